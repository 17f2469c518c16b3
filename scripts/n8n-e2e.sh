#!/usr/bin/env bash
# Real n8n against the local stack, headless: the example workflows in examples/n8n/ as shipped.
#
#   bash scripts/n8n-e2e.sh            # install n8n if missing (cached outside the repo), run the e2e tests
#   bash scripts/n8n-e2e.sh -k wait    # extra arguments go to pytest
#
# The same tests run with everything else in `bash scripts/test.sh` (tests/integration/test_n8n_e2e.py);
# this script is the short way to run only them. Steps:
#   1. scripts/n8n-install.sh: pinned n8n + Node from the npm registry into
#      ${SAFESEND_N8N_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/safesend-n8n/<versions>} (first time: minutes, ~3 GB)
#   2. scripts/bootstrap.sh (via scripts/test.sh): the project's venvs and the emulators
#   3. pytest tests/integration/test_n8n_e2e.py: a LocalStack with auth on, a counting proxy in front
#      of it, n8n import:workflow / import:credentials / execute / start in temporary user folders
#      (loopback only; every n8n process is stopped by its process group; every wait is bounded).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"

started=$SECONDS
n8n_bin="$(bash scripts/n8n-install.sh)"
printf 'n8n-e2e: %s (ready after %d s)\n' "$n8n_bin" "$((SECONDS - started))" >&2
export SAFESEND_N8N_BIN="$n8n_bin"
exec bash scripts/test.sh tests/integration/test_n8n_e2e.py "$@"
