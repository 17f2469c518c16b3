#!/usr/bin/env bash
# Run the test suite the same way locally and in CI: bootstrap (no-op when up to date), then pytest.
#
#   bash scripts/test.sh          the full gate (README, .ci/run): scripts/lint.sh (ruff, ruff
#                                 format, mypy; seconds), then every test with branch coverage of
#                                 functions/, in-process and in the subprocesses the tests start
#                                 (functions-framework under gunicorn), failing under the floor
#                                 ([tool.coverage] in pyproject.toml). The tests run on
#                                 $SAFESEND_TEST_WORKERS parallel workers (pytest-xdist, default 3),
#                                 one module per worker at a time, slow modules first
#                                 (tests/scheduling.py); each worker has its own emulators and ports.
#   bash scripts/test.sh --fast   the inner loop: scripts/lint.sh, then the unit and property tests
#                                 (tests/unit) on the same workers; no emulator, no coverage
#   bash scripts/test.sh ARGS...  just pytest with ARGS (e.g. tests/unit -x): no lint, no coverage
#
# pytest's other options come from pytest.ini.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"
WORKERS="${SAFESEND_TEST_WORKERS:-3}"
[[ "$WORKERS" =~ ^[1-9][0-9]?$ ]] || { printf 'test.sh: SAFESEND_TEST_WORKERS must be 1-99\n' >&2; exit 2; }
PARALLEL=(-n "$WORKERS" --dist loadgroup --no-loadscope-reorder)
if (($# == 0)); then
    bash scripts/bootstrap.sh --for test
    bash scripts/lint.sh
    exec .venv/bin/python -m pytest --cov --cov-report=term-missing:skip-covered "${PARALLEL[@]}"
fi
if [[ "$1" == "--fast" ]]; then
    (($# == 1)) || { printf 'test.sh: --fast takes no other argument\n' >&2; exit 2; }
    bash scripts/bootstrap.sh --for fast
    bash scripts/lint.sh
    exec .venv/bin/python -m pytest tests/unit "${PARALLEL[@]}"
fi
bash scripts/bootstrap.sh --for test
exec .venv/bin/python -m pytest "$@"
