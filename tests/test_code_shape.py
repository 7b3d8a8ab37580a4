"""The product's shape: small modules and short functions, one package, the lab apart.

A module over 300 lines or a function over 60 is where a newcomer stops reading: each is named with its
size, so a change that grows one past the bound splits it rather than raises the bound.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "blendserve"
MAX_MODULE_LINES = 300
MAX_FUNCTION_LINES = 60


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_no_module_over_300_lines() -> None:
    long = [f"{p.relative_to(ROOT)}: {n}" for p in _modules()
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES]
    assert not long, long


def test_no_function_over_60_lines() -> None:
    long = []
    for p in _modules():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{p.relative_to(ROOT)}:{node.lineno} {node.name}: {n}")
    assert not long, long


def test_one_package_and_the_lab_apart() -> None:
    """Only `blendserve` is installed (no generic top-level `core` or `server` in site-packages), and no test
    imports the benchmarks: the harness they share lives under tests/."""
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'include = ["blendserve*"]' in pyproject
    assert not [d.name for d in ROOT.iterdir() if d.is_dir() and (d / "__init__.py").exists()
                and d.name not in ("blendserve", "tests", "benchmarks")]
    importers = [str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("*.py") if _imports_benchmarks(p)]
    assert not importers, importers


def _imports_benchmarks(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        if any(name.split(".")[0] == "benchmarks" for name in names):
            return True
    return False
