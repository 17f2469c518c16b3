#!/usr/bin/env bash
# The live drill (devstack/DRILL.md): measure Gmail's search-index lag, history lag and Message-ID
# handling on a real mailbox, plus the same after a deliberately dropped response.
#   SAFESEND_GMAIL_CREDENTIALS_FILE=token.json bash scripts/drill.sh --to sink@example.com
#   bash scripts/drill.sh --mock     the same code against the local Gmail simulator (labelled MOCK)
# Arguments go to `python -m devstack.drill` (try --help). Reports land in .local/drill/ (--out DIR).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/bootstrap.sh >&2
exec .venv/bin/python -m devstack.drill "$@"
