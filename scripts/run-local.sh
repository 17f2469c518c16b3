#!/usr/bin/env bash
# Run safesend locally: emulators (Firestore, Pub/Sub, Cloud Tasks), the Gmail simulator behind
# the fault relay, and the four functions on http://127.0.0.1:${SAFESEND_PORT:-8080}.
# With SAFESEND_GMAIL_CREDENTIALS_FILE (or _JSON) set, real Gmail is used instead of the simulator.
# Auth is on (an API key is printed at start); `bash scripts/run-local.sh --no-auth` turns it off.
# Ctrl-C stops every process it started.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"
bash scripts/bootstrap.sh --for run  # only what it runs: no infra tools, Terraform or browser
exec .venv/bin/python -m devstack.stack "$@"
