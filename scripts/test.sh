#!/usr/bin/env bash
# Run the test suite the same way locally and in CI: bootstrap (no-op when up to date), then pytest.
# Arguments go to pytest; its options come from pytest.ini.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"
bash scripts/bootstrap.sh
exec .venv/bin/python -m pytest "$@"
