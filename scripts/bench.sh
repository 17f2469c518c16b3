#!/usr/bin/env bash
# Run safesend's benchmarks and print one table (see bench/README.md).
#   bash scripts/bench.sh            the issue-5 suite on the local stack, about 5 minutes;
#                                    writes bench/results.json and bench/results/<date>.md
#   bash scripts/bench.sh --quick    small sizes, 2 runs, writes nothing
#   bash scripts/bench.sh --micro    the earlier micro-benchmarks (transport, claim, cpu, service)
# Any other argument goes to `python -m bench.run` (try --help, or --micro --help).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/bootstrap.sh
exec .venv/bin/python -m bench.run "$@"
