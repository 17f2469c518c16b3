#!/usr/bin/env bash
# Run the test suite the same way locally and in CI: bootstrap (no-op when up to date), then pytest.
#
#   bash scripts/test.sh          the full gate (README, .ci/run): scripts/lint.sh (ruff, ruff
#                                 format, mypy; seconds), then every test with branch coverage of
#                                 functions/, in-process and in the subprocesses the tests start
#                                 (functions-framework under gunicorn), failing under the floor
#                                 ([tool.coverage] in pyproject.toml)
#   bash scripts/test.sh ARGS...  just pytest with ARGS (e.g. tests/unit -x): no lint, no coverage
#
# pytest's other options come from pytest.ini.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"
bash scripts/bootstrap.sh
if (($# == 0)); then
    bash scripts/lint.sh
    exec .venv/bin/python -m pytest --cov --cov-report=term-missing:skip-covered
fi
exec .venv/bin/python -m pytest "$@"
