#!/usr/bin/env bash
# The static gate, the same locally and in CI (scripts/test.sh runs it first when called without
# arguments): ruff's lint rules, ruff's formatting, mypy --strict on functions/ (devstack/ a little
# looser), deptry on functions/ (every import declared in functions/requirements*.in, nothing
# declared unused, nothing imported that only comes as another package's dependency), import-linter
# on functions/safesend (no layer imports one above it; pyproject.toml, [tool.importlinter]). The locks'
# freshness is a unit test (tests/unit/test_packaging.py). All configuration is in pyproject.toml; each tool runs even if an earlier one failed,
# and the script fails if any did.
#
#   bash scripts/lint.sh          check (needs .venv: bash scripts/bootstrap.sh)
#   bash scripts/lint.sh --fix    apply ruff's safe fixes and format first, then check
#
# Formatting covers what pyproject.toml does not list under [tool.ruff.format] exclude: files that
# other work was still changing when the formatter came in. Shorten that list as they land.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"

BIN="${SAFESEND_VENV:-$ROOT/.venv}/bin" # SAFESEND_VENV: another venv with the same locked tools
for tool in ruff mypy deptry lint-imports; do
    [[ -x "$BIN/$tool" ]] || { printf 'lint: %s missing in .venv: run bash scripts/bootstrap.sh\n' "$tool" >&2; exit 1; }
done

if [[ "${1:-}" == "--fix" ]]; then
    "$BIN/ruff" check --fix --quiet . || true
    "$BIN/ruff" format --quiet .
fi

failed=()
step() {
    local name="$1" started=$SECONDS
    shift
    printf 'lint: %s\n' "$name" >&2
    if "$@"; then
        printf 'lint: %s ok (%ss)\n' "$name" "$((SECONDS - started))" >&2
    else
        failed+=("$name")
    fi
}

step "ruff check" "$BIN/ruff" check --no-fix --output-format=concise .
step "ruff format --check" "$BIN/ruff" format --check .
step "mypy" "$BIN/mypy"
step "deptry" "$BIN/python" -m deptry functions
step "import layers" env PYTHONPATH=functions "$BIN/lint-imports" --no-cache --no-logo

if ((${#failed[@]})); then
    printf 'lint: FAILED: %s (fix them, or try: bash scripts/lint.sh --fix)\n' "${failed[*]}" >&2
    exit 1
fi
printf 'lint: ok\n' >&2
