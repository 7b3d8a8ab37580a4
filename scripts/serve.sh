#!/usr/bin/env bash
# Set up (first run only) and start the embedded deployment: API + scheduler + one CPU worker,
# SQLite and a local file store in ./blendserve-data, SmolLM2-135M-Instruct on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/blendserve serve "$@"
