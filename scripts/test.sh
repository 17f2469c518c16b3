#!/usr/bin/env bash
# Run the test suite the same way locally and in CI: bootstrap (no-op when up to date), then pytest.
#
#   bash scripts/test.sh          the full gate (README, .ci/run): scripts/lint.sh (ruff, ruff
#                                 format, mypy; seconds), then every test on $SAFESEND_TEST_WORKERS
#                                 pytest-xdist workers (default 3; tests/scheduling.py) and a
#                                 waiting lane beside them for the fault storm's phases, under
#                                 coverage.py: `coverage run` measures pytest, and through
#                                 [tool.coverage.run] patch=subprocess every Python process it
#                                 starts (the workers, functions-framework under gunicorn, ...), each
#                                 writing its own data file next to $COVERAGE_FILE (an absolute
#                                 path, whatever a process's cwd); `coverage combine` adds them up
#                                 and `coverage report` fails under the floor (pyproject.toml). The
#                                 mutation suite (tests/infra/test_mutations.py: nested pytest runs
#                                 in scratch copies, nothing of functions/ to measure) runs beside it
#                                 in a process of its own, without coverage; the gate fails if either
#                                 does. Each run writes its time per test module (tests/module_times.py).
#   bash scripts/test.sh --fast   the inner loop: scripts/lint.sh, then the unit and property tests
#                                 (tests/unit) on $SAFESEND_TEST_WORKERS pytest-xdist workers
#                                 (default 3; tests/scheduling.py); no emulator, no coverage, each
#                                 property on a quarter of its examples (tests/props.py)
#   bash scripts/test.sh ARGS...  just pytest with ARGS (e.g. tests/unit -x): no lint, no coverage
#
# pytest's other options come from pytest.ini.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"
# Compiled bytecode is kept, outside the tree: the gate starts hundreds of Python processes (xdist
# workers, gunicorn workers, ~90 nested pytest runs of the mutation suite, stubs), and with
# PYTHONDONTWRITEBYTECODE set (as on the CI machine) each one compiled functions/, devstack/ and
# pytest's assertion-rewritten tests again: collecting tests/unit took 7.0 CPU-s, 2.9 with the cache.
# Emptied at each start: the scratch copies and temporary venvs of one gate leave ~260 MB of
# bytecode under their /tmp paths, new ones each run; the gain is within a run, not across runs.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX="$ROOT/.local/pycache"
rm -rf "$PYTHONPYCACHEPREFIX"
# Workers: SAFESEND_TEST_WORKERS, 1 runs serially. The full gate's default is 3 on the 2-core CI
# machine: its stack tests spend ~40 % of their time waiting on timed answers, so two workers left
# half a core idle (fresh clones of 75177cc, idle machine, 2026-12-02: 2 workers 1,117 s at 1.5
# cores busy, 3 workers 786 s, load at most 14); 4 beside the mutation suite drove the load to 17
# and timed stack tests failed (2026-12-01, before the CPU cuts); after them 4 passed in 789 s for
# 1,521 CPU-s against 774 s for 1,348 on 3 (2026-12-02: both cores busy throughout, so more workers
# only added contention). --fast's default is 3 as well: a few unit tests wait on nested runs (two
# hang for 20 s on purpose), which left a core idle on 2 workers (tests/unit with a quarter of the
# property examples, 2-core machine, 2026-12-02: 2 workers 100 s at 1.25 cores busy, 3 workers 80 s).
WORKERS="${SAFESEND_TEST_WORKERS:-}"
[[ -z "$WORKERS" || "$WORKERS" =~ ^[1-9][0-9]?$ ]] || { printf 'test.sh: SAFESEND_TEST_WORKERS must be 1-99\n' >&2; exit 2; }
MUTATIONS=tests/infra/test_mutations.py
TIMES="$ROOT/.local/test-times" # --module-times of the last full gate
# took PART: one "PART N s" entry of the full gate's time line, printed at its end (CI logs show
# where the minutes went without timestamps).
took_at=$SECONDS
took=()
took() { took+=("$1 $((SECONDS - took_at)) s"); took_at=$SECONDS; }
if (($# == 0)); then
    WORKERS="${WORKERS:-3}"
    # On a new machine the pinned n8n and its Node (tests/integration's real-n8n modules) take minutes
    # to install, mostly downloads and sqlite3's native build: started now, in the background, they
    # overlap the bootstrap and lint instead of holding a worker mid-suite. The n8n tests wait for it
    # on n8n-install.sh's lock (and install themselves if it failed: its log is shown at the end).
    n8n_pid=""
    n8n_log="$(mktemp "${TMPDIR:-/tmp}/safesend-n8n-install.XXXXXX")"
    if [[ "${SAFESEND_SKIP_N8N:-}" != 1 ]] && ! bash scripts/n8n-install.sh --check >/dev/null 2>&1; then
        setsid bash scripts/n8n-install.sh >"$n8n_log" 2>&1 & # its own process group: npm and node-gyp too
        n8n_pid=$!
        # tests/scheduling.py hands out the real-n8n modules last while it runs
        export SAFESEND_N8N_INSTALL_PID="$n8n_pid"
        # The group, or the process itself if setsid has not made the group yet.
        stop_n8n_install() { kill -- -"$n8n_pid" 2>/dev/null || kill "$n8n_pid" 2>/dev/null || true; }
        trap stop_n8n_install EXIT
    fi
    bash scripts/bootstrap.sh --for test
    took bootstrap
    # The bytecode cache filled once, beside lint, in two collect-only runs (one per core): each xdist
    # worker collects the whole suite, and three workers starting on an empty cache each compiled every
    # module and assertion-rewrote every test module under coverage (3 workers collecting nothing else,
    # 2026-12-02, this slower 2-core machine: 70 s and 124 CPU-s on an empty cache, 35 s and 66 on a
    # filled one; the fill itself ~30 CPU-s, beside lint). Its outcome is no verdict: the suite's own
    # collection reports any error.
    warm=()
    for part in "tests/integration tests/infra" "tests/unit"; do
        # shellcheck disable=SC2086 # two test folders in one word, split on purpose
        .venv/bin/python -m pytest --collect-only -q -p no:cov -p no:randomly --ignore="$MUTATIONS" $part >/dev/null 2>&1 &
        warm+=($!)
    done
    # The tests the mutation suite's baseline runs in its scratch copy, listed once on the checkout:
    # the suite below leaves them to it instead of running them twice (tests/mutation_baseline.py;
    # ~125 CPU-s). Collected beside lint; a failure to list them fails the gate before any test.
    mkdir -p "$TIMES"
    baseline_ids="$TIMES/mutation-baseline-ids.txt"
    rm -f "$baseline_ids"
    .venv/bin/python -m tests.mutation_baseline "$baseline_ids" &
    ids_pid=$!
    trap 'kill "${warm[@]}" "$ids_pid" 2>/dev/null || true; [[ -z "$n8n_pid" ]] || stop_n8n_install' EXIT
    bash scripts/lint.sh
    wait "${warm[@]}" || true
    wait "$ids_pid" || { printf 'test.sh: could not list the mutation baseline'"'"'s tests (above)\n' >&2; exit 1; }
    took lint
    mutations_log="$(mktemp "${TMPDIR:-/tmp}/safesend-mutations.XXXXXX")"
    # Niced: the mutation suite is pure CPU and times nothing, while the stack tests on the workers
    # wait on servers whose answers are timed; it takes the CPU they leave (a fresh-clone run at
    # load 22 starved the storm's respawning gunicorn workers past their 20 s bound).
    nice -n 10 .venv/bin/python -m pytest -p no:cov "$MUTATIONS" --module-times="$TIMES/mutations.json" \
        --mutation-baseline-ids="$baseline_ids" >"$mutations_log" 2>&1 &
    mutations_pid=$!
    # stopped if the gate is cut short
    trap 'kill "$mutations_pid" 2>/dev/null || true; [[ -z "$n8n_pid" ]] || stop_n8n_install' EXIT
    export COVERAGE_FILE="$ROOT/.coverage"
    .venv/bin/python -m coverage erase
    suite=0
    # The suite on $WORKERS pytest-xdist workers plus one, the waiting lane (tests/scheduling.py): the
    # fault storm's phases take ~440 s of wall for ~110 CPU-s, the rest waiting on timed arrivals and
    # windows, and on one of three workers they held a third of the gate's lanes at ~0.25 core (the
    # suite used 1.56 of the 2 cores, fresh clone of 59bf900, 2026-12-02). On the lane they run one
    # after another while the three workers keep both cores busy with everything else. 1: serially, no xdist.
    workers=()
    ((WORKERS > 1)) && workers=(-n "$((WORKERS + 1))" --dist loadgroup --no-loadscope-reorder --waiting-lane)
    .venv/bin/python -m coverage run -m pytest "${workers[@]}" --ignore="$MUTATIONS" \
        --module-times="$TIMES/suite.json" --mutation-baseline-ids="$baseline_ids" || suite=$?
    took suite
    # --append: .coverage was erased above, so any data in it now is this run's, combined by a stray
    # report command some test ran with this environment (parallel = true makes `coverage json`
    # combine and delete the data files saved so far); without it the combine below wrote over them.
    .venv/bin/python -m coverage combine --append -q || suite=$((suite ? suite : 2)) # no data: nothing measured
    .venv/bin/python -m coverage report || suite=$((suite ? suite : 2)) # 2: under the floor
    took coverage
    mutations=0
    wait "$mutations_pid" || mutations=$?
    took "waiting for the mutation suite"
    printf '\n---------- %s (run beside the suite, without coverage)\n' "$MUTATIONS"
    cat "$mutations_log"
    rm -f "$mutations_log"
    if [[ -n "$n8n_pid" ]] && ! wait "$n8n_pid"; then
        printf '\n---------- scripts/n8n-install.sh (in the background; failed)\n'
        cat "$n8n_log"
    fi
    trap - EXIT
    rm -f "$n8n_log"
    printf '\ngate: %s; %d s in all\n' "$(IFS=,; printf '%s' "${took[*]}" | sed 's/,/, /g')" "$SECONDS"
    ((suite == 0 && mutations == 0)) || exit 1
    exit 0
fi
if [[ "$1" == "--fast" ]]; then
    (($# == 1)) || { printf 'test.sh: --fast takes no other argument\n' >&2; exit 2; }
    WORKERS="${WORKERS:-3}"
    bash scripts/bootstrap.sh --for fast
    bash scripts/lint.sh
    # Every unit and property test, each property on a quarter of its examples (tests/props.py);
    # the full gate runs them all on their full counts.
    export SAFESEND_TEST_FAST=1
    exec .venv/bin/python -m pytest tests/unit -n "$WORKERS" --dist loadgroup --no-loadscope-reorder
fi
bash scripts/bootstrap.sh --for test
exec .venv/bin/python -m pytest "$@"
