"""Settings are parsed once, at an entry point, and passed down: no module below one reads the environment.

Every module under blendserve/ is searched for `get_settings(` and `os.environ`; a hit outside the entry
points fails the test, named by file, line and text.
"""
from __future__ import annotations

import ast
import json
from pathlib import Path

from blendserve.cli import load_settings, write_settings
from blendserve.core.config import Settings

PACKAGE = Path(__file__).resolve().parents[1] / "blendserve"
PATTERNS = ("get_settings(", "os.environ")

# Entry points, where settings are parsed and the environment may be read: the whole module, or (for a
# module that is also a library) only the named functions and its `if __name__ == "__main__":` block.
ENTRY_MODULES = {
    "cli.py",                   # every `blendserve` command
    "core/config.py",           # defines get_settings
    "migrations/env.py",        # Alembic's own entry point when run by hand
}
ENTRY_FUNCTIONS = {
    "doctor/command.py": {"main"},   # `blendserve doctor`: the machine's environment for its probes (CUDA_HOME)
}

def _allowed_lines(rel: str, source: str) -> set[int]:
    """Lines of an entry point's named functions and `__main__` block."""
    names = ENTRY_FUNCTIONS.get(rel)
    if not names:
        return set()
    lines: set[int] = set()
    for node in ast.parse(source).body:
        is_main = isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)
        if is_main or (isinstance(node, ast.FunctionDef) and node.name in names):
            lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return lines


def hits() -> list[tuple[str, int, str]]:
    """(module, line, text) of every read of the settings or the environment outside the entry points."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in ENTRY_MODULES:
            continue
        source = path.read_text()
        allowed = _allowed_lines(rel, source)
        for n, line in enumerate(source.splitlines(), start=1):
            if n not in allowed and any(p in line for p in PATTERNS):
                found.append((rel, n, line.strip()))
    return found


def test_no_module_below_an_entry_point_reads_the_settings_or_the_environment():
    found = hits()
    unexpected = [f"blendserve/{rel}:{n}: {text}" for rel, n, text in found]
    assert not unexpected, "read below an entry point (pass the settings in instead):\n" + "\n".join(unexpected)


def test_list_settings_are_typed_from_the_comma_strings_users_write(monkeypatch):
    monkeypatch.setenv("BLENDSERVE_API_KEYS", "acme:sk-a1, sk-solo")
    monkeypatch.setenv("BLENDSERVE_MODELS", "tiny=/m/tiny,big=/m/big")
    monkeypatch.setenv("BLENDSERVE_COMPLETION_WINDOWS", "24h,90s,2d")
    monkeypatch.setenv("BLENDSERVE_KEY_PRIORITIES", "sk-a1=high")
    monkeypatch.setenv("BLENDSERVE_CORS_ORIGINS", "https://a.example,https://b.example")
    s = Settings()
    assert s.api_keys == ["acme:sk-a1", "sk-solo"]
    assert s.models == {"tiny": Path("/m/tiny"), "big": Path("/m/big")}
    assert s.completion_windows == {"24h": 86400, "90s": 90, "2d": 172800}
    assert s.key_priorities["tenant:acme"] == "high"            # by the key's tenant
    assert s.cors_origins == ["https://a.example", "https://b.example"]
    assert Settings(api_keys="", models="").api_keys == [] and Settings(models="").models == {}


def test_a_settings_file_carries_every_setting_and_not_the_environment(tmp_path, monkeypatch):
    """What `serve` hands its roles: the settings it parsed, which a role reads back whatever its
    environment says; the flags still win."""
    monkeypatch.setenv("BLENDSERVE_CPU_THREADS", "3")
    monkeypatch.setenv("BLENDSERVE_SPECULATIVE", "off")
    given = Settings(data_dir=tmp_path, api_keys="acme:k1,k2", key_priorities="k2=low", models="m=/m",
                     completion_windows="24h,4s")
    path = write_settings(given)
    assert path.parent == tmp_path and path.stat().st_mode & 0o077 == 0      # it holds the keys
    monkeypatch.setenv("BLENDSERVE_CPU_THREADS", "7")
    monkeypatch.setenv("BLENDSERVE_API_KEYS", "other")
    loaded = load_settings(path)
    assert loaded == given and loaded.cpu.threads == 3 and loaded.spec.method == "off"
    assert load_settings(path, data_dir=str(tmp_path / "d")).data_dir == tmp_path / "d"
    assert json.loads(path.read_text())["api_keys"] == ["acme:k1", "k2"]
