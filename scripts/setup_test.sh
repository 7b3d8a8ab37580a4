#!/usr/bin/env bash
# What only the tests need beyond scripts/setup.sh: Debian's chromium, which the dashboard's browser test
# drives through Playwright (Playwright's own browser download is not used). The product never needs it,
# so scripts/setup.sh (and `scripts/serve.sh`) leave it alone. Says what it installs before it does.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" != 0 ]; then
  echo "setup_test: chromium is missing; the dashboard test needs it (apt-get install chromium, as root)" >&2
  exit 0
fi
echo "setup_test: installing chromium with apt-get, for the dashboard's browser test only (about a minute)" >&2
(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null
