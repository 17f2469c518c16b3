#!/usr/bin/env bash
# Run the test suite the same way locally and in CI: bootstrap (no-op when up to date), then pytest.
#
#   bash scripts/test.sh          the full gate (README, .ci/run): everything bootstrapped, then
#                                 scripts/lint.sh (ruff, ruff format, mypy; seconds), then every
#                                 test, serially, with branch coverage of functions/, in-process and
#                                 in the subprocesses the tests start (functions-framework under
#                                 gunicorn), failing under the floor ([tool.coverage] in pyproject.toml)
#   bash scripts/test.sh --fast   the inner loop: only .venv bootstrapped, scripts/lint.sh, then the
#                                 unit and property tests (tests/unit) on $SAFESEND_TEST_WORKERS
#                                 pytest-xdist workers (default 2; --dist loadfile: a module and its
#                                 module-scoped fixtures on one worker); no emulator, no coverage
#   bash scripts/test.sh ARGS...  just pytest with ARGS (e.g. tests/unit -x): no lint, no coverage
#
# pytest's other options come from pytest.ini.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"
if [[ "${1:-}" == "--fast" ]]; then
    (($# == 1)) || { printf 'test.sh: --fast takes no other argument\n' >&2; exit 2; }
    WORKERS="${SAFESEND_TEST_WORKERS:-2}"
    [[ "$WORKERS" =~ ^[1-9][0-9]?$ ]] || { printf 'test.sh: SAFESEND_TEST_WORKERS must be 1-99\n' >&2; exit 2; }
    bash scripts/bootstrap.sh --for fast
    bash scripts/lint.sh
    exec .venv/bin/python -m pytest tests/unit -n "$WORKERS" --dist loadfile
fi
bash scripts/bootstrap.sh --for test
if (($# == 0)); then
    bash scripts/lint.sh
    exec .venv/bin/python -m pytest --cov --cov-report=term-missing:skip-covered
fi
exec .venv/bin/python -m pytest "$@"
