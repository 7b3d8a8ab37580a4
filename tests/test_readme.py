"""The README stays short and true: its length, its links and the docs' links, and its sample batch."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from blendserve.core.config import SMOLLM2
from blendserve.protocol.bodies import model_info
from blendserve.scheduler.validation import ValidRequest, validate

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SAMPLE = ROOT / "examples" / "batch.jsonl"
SNIPPET = ROOT / "examples" / "run_batch.py"
MAX_LINES = 150
# [text](target) outside code: a target with no scheme, not a bare anchor.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def markdown_files() -> list[Path]:
    return [README, *sorted((ROOT / "docs").rglob("*.md"))]


def relative_links(path: Path) -> list[str]:
    """Link targets of a Markdown file that point at files: fenced code and inline code left out."""
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:|#", t)]


def test_the_readme_is_short():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines; the rest belongs in docs/"


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves_to_a_file(path):
    missing = [t for t in relative_links(path) if not (path.parent / t.split("#")[0]).is_file()]
    assert not missing, f"{path.relative_to(ROOT)} links to files that do not exist: {missing}"


def test_the_link_check_sees_links():
    assert "docs/quickstart.md" in relative_links(README)


def test_the_sample_is_a_valid_batch_for_the_embedded_default(tiny_model):
    """Every line passes the service's own validation, under the name the embedded default serves (the
    tiny model's tokenizer stands in for SmolLM2's: the rules checked here are the file's, not the model's)."""
    lines = SAMPLE.read_bytes().splitlines()
    out = list(validate(lines, "/v1/chat/completions", {SMOLLM2: model_info(SMOLLM2, tiny_model)}, 1000))
    assert len(out) == len(lines) >= 3
    assert all(isinstance(r, ValidRequest) for r in out), [r for r in out if not isinstance(r, ValidRequest)]


def test_the_readme_snippet_makes_the_calls_the_example_makes():
    """The README shows the SDK calls of examples/run_batch.py, which tests/test_serve_smollm2.py runs
    against a live server: both make the same calls, so the README's cannot drift from a tested one."""
    block = re.search(r"```python\n(.*?)```", README.read_text(), flags=re.S)[1]
    calls = re.compile(r"client\.[a-z_.]+\(")
    assert set(calls.findall(block)) == set(calls.findall(SNIPPET.read_text())) >= {
        "client.files.create(", "client.batches.create(", "client.batches.retrieve(", "client.files.content("}
    assert "examples/batch.jsonl" in block
