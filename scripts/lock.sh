#!/usr/bin/env bash
# Regenerate the hashed dependency locks from their .in files (needs the package index):
#
#   functions/requirements.in          -> functions/requirements.txt           (deployed, Firestore store)
#   functions/requirements-postgres.in -> functions/requirements-postgres.txt  (deployed, job_store = postgres)
#   requirements-dev.in                -> requirements-dev.txt                  (.venv: tests and the gate)
#   requirements-infra.in              -> requirements-infra.txt                (.venv-infra: checkov, check-jsonschema)
#
# The tests' real n8n has a lock of its own, npm's: tools/n8n/package-lock.json, written by
# `bash scripts/n8n-install.sh --lock` (tests/unit/test_n8n_lock.py fails when it is stale).
#
# The functions' locks are resolved for their runtime (python312 on Linux); the dev lock for every
# Python the venv may use (>= 3.11), with the runtime packages held at the functions' versions.
# Existing pins are kept unless a .in asks otherwise (uv prefers them); pass --upgrade to move all.
# tests/unit/test_packaging.py fails when a lock no longer matches its .in.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"
UV="${UV:-$ROOT/.venv/bin/uv}"
[[ -x "$UV" ]] || { printf 'lock: uv missing in .venv: run bash scripts/bootstrap.sh (or set UV)\n' >&2; exit 1; }

compile() {
    "$UV" pip compile --quiet --generate-hashes --custom-compile-command "bash scripts/lock.sh" --annotation-style line "$@"
}
# The functions' runtime is python312 (infra/modules/safesend/variables.tf, var.runtime).
compile --python-version 3.12 --python-platform x86_64-manylinux_2_28 "$@" \
    functions/requirements.in -o functions/requirements.txt
compile --python-version 3.12 --python-platform x86_64-manylinux_2_28 "$@" \
    functions/requirements-postgres.in -c functions/requirements.txt -o functions/requirements-postgres.txt
compile --universal --python-version 3.11 "$@" \
    requirements-dev.in -c functions/requirements-postgres.txt -o requirements-dev.txt
compile --universal --python-version 3.11 "$@" requirements-infra.in -o requirements-infra.txt
printf 'lock: ok\n' >&2
