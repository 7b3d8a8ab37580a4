"""The images' build-time checks import only what loads without a GPU.

`docker build` mounts no GPU and no driver: a module whose native code links libcuda.so.1 (sgl_kernel's
ops, flashinfer's, vLLM's CUDA build) fails to import there, so the build would fail on every machine.
These checks parse each Dockerfile's `python -c` lines and read their imports; nothing is built.
"""
from __future__ import annotations

import ast
import json
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILES = sorted(ROOT.glob("Dockerfile*"))

# Modules whose import loads CUDA code (libcuda.so.1, a GPU's runtime): never imported at build.
GPU_ONLY = ("sgl_kernel", "flashinfer", "flash_attn", "deep_gemm", "vllm._C", "vllm", "xformers", "cupy",
            "pynvml", "torch.cuda")
GPU_CALLS = re.compile(r"torch\.cuda\.|cuda\.is_available|nvidia-smi")


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", "", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest))
    return out


def python_snippets(run: str) -> list[str]:
    """The code of every `python -c CODE` / `python3 -c CODE` in one RUN's shell line."""
    words = shlex.split(run)
    return [words[i + 2] for i, w in enumerate(words[:-2])
            if re.fullmatch(r"(\S*/)?python3?(\.\d+)?", w) and words[i + 1] == "-c"]


def imported(code: str) -> set[str]:
    """Every module an `import`/`from` statement of `code` names."""
    names = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def gpu_only(names: set[str]) -> set[str]:
    return {n for n in names if any(n == g or n.startswith(g + ".") for g in GPU_ONLY)}


def build_checks(path: Path) -> list[str]:
    return [code for word, rest in instructions(path.read_text()) if word == "RUN" for code in python_snippets(rest)]


def test_the_old_build_check_is_caught() -> None:
    """The parser sees what made the SGLang image fail to build: sgl_kernel imported in a RUN."""
    old = 'FROM x\nRUN pip install -e . \\\n && python3 -c "import sglang, sgl_kernel, blendserve"\n'
    codes = [c for w, r in instructions(old) if w == "RUN" for c in python_snippets(r)]
    assert codes == ["import sglang, sgl_kernel, blendserve"]
    assert gpu_only(imported(codes[0])) == {"sgl_kernel"}


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_build_checks_import_nothing_gpu_only(path: Path) -> None:
    for code in build_checks(path):
        assert not gpu_only(imported(code)), f"{path.name} imports {gpu_only(imported(code))} at build: {code}"
        assert not GPU_CALLS.search(code), f"{path.name} asks for a GPU at build: {code}"


def test_the_sglang_image_checks_its_packages_at_build() -> None:
    """What loads without a GPU is imported; sgl_kernel is looked up, not loaded."""
    codes = build_checks(ROOT / "Dockerfile.sglang")
    assert codes, "Dockerfile.sglang has no build-time check"
    names = set().union(*(imported(c) for c in codes))
    assert {"sglang", "blendserve", "blendserve.worker.engines.sglang"} <= names
    assert any("find_spec('sgl_kernel')" in c for c in codes)


def test_the_sglang_image_runs_the_preflight_before_a_worker() -> None:
    entry = [rest for word, rest in instructions((ROOT / "Dockerfile.sglang").read_text()) if word == "ENTRYPOINT"]
    assert len(entry) == 1
    argv = json.loads(entry[0])
    script = argv[argv.index("-c") + 1]
    assert "blendserve doctor" in script and script.index("blendserve doctor") < script.index("exec blendserve")
    assert '"$1" = worker' in script          # the api and scheduler roles start without it
