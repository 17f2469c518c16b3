#!/usr/bin/env bash
# Run safesend's benchmarks and print one comparison table (see bench/README.md).
#   bash scripts/bench.sh            full run, a few minutes
#   bash scripts/bench.sh --quick    about 30 s
# Any other argument goes to `python -m bench.run` (try --help).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/bootstrap.sh
exec .venv/bin/python -m bench.run "$@"
