#!/usr/bin/env bash
# Set up (first run only: scripts/setup.sh, then the tests' own chromium, scripts/setup_test.sh) and run the
# whole test suite, on SQLite and on PostgreSQL (127.0.0.1:5432, database `test`, trust auth; override with
# BLENDSERVE_TEST_PG).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/setup_test.sh
export HF_HUB_OFFLINE=1
# The suite starts a few hundred Python processes: let them cache the project's bytecode (__pycache__ is
# git-ignored) rather than compile every module again, where the machine sets PYTHONDONTWRITEBYTECODE.
unset PYTHONDONTWRITEBYTECODE
# The linter first (under a second): pyflakes, pycodestyle, isort, pyupgrade, bugbear (pyproject.toml).
.venv/bin/ruff check --quiet .
# Then the docs site (a few seconds): --strict fails on a broken link or anchor, and the configuration page is
# generated from the settings model (docs/hooks/settings_page.py). Built into a temporary folder, never kept.
site=$(mktemp -d)
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir "$site" || { rm -rf "$site"; exit 1; }
rm -rf "$site"
# The suite in three processes (pytest-xdist), a test file to each at a time: most tests wait on servers and
# subprocesses, so three keep two cores busy. BLENDSERVE_TEST_WORKERS=0 runs it in this one process.
# Threads that find no work sleep at once (OMP_WAIT_POLICY) rather than spin for a core the others need.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
exec .venv/bin/python -m pytest -q -n "${BLENDSERVE_TEST_WORKERS:-3}" --dist loadfile "$@"
