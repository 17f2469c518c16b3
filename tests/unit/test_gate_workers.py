"""The gate's speed without losing a check (issue 21.5): scripts/test.sh runs every test on parallel
pytest-xdist workers, one module per worker at a time, slow modules first (tests/scheduling.py);
`--fast` is lint + the unit tests; run-local.sh bootstraps only what it runs.

The scripts run in a scratch copy with stub tools that record their arguments, never in this
checkout (a real bootstrap installs; a real gate runs for minutes)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests import scheduling

ROOT = Path(__file__).resolve().parents[2]
ALL_PARTS = ["venv", "tasks", "infra", "tfplugin", "emulators", "chromium", "postgres"]
RECORDER = (
    '#!/usr/bin/env bash\nprintf "%s %s\\n" "{name}" "$*" >> "{log}"\n'
    'printf "%s %s\\n" "$(nice)" "$*" >> "{log}.nice"\n'
    'printf "%s %s %s %s\\n" "${{PYTHONDONTWRITEBYTECODE-unset}}" "${{PYTHONPYCACHEPREFIX-unset}}" '
    '"${{SAFESEND_TEST_FAST-unset}}" "$*" >> "{log}.env"\n'
    'printf "%s %s\\n" "${{SAFESEND_N8N_INSTALL_PID-unset}}" "$*" >> "{log}.n8npid"\n'
    # STUB_WAITS_FOR: a file to wait for (10 s at most) before answering, to order a call after another.
    'for _ in {{1..100}}; do [[ -z "${{STUB_WAITS_FOR:-}}" || -e "$STUB_WAITS_FOR" ]] && break; sleep 0.1; done\n'
    'if [[ -n "${{STUB_FAILS_ON:-}}" && "$*" == *"$STUB_FAILS_ON"* ]]; then exit 1; fi\n'
)


def clean_env() -> dict[str, str]:
    """This process's environment without the suite's coverage or xdist settings."""
    prefixes = ("COVERAGE_", "PYTEST_XDIST", "SAFESEND_TEST", "SAFESEND_N8N_INSTALL")
    return {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}


def bare_env(*plugins: str) -> dict[str, str]:
    """clean_env() for a nested pytest on a scratch suite that loads only `plugins` (PYTEST_PLUGINS,
    which its xdist workers inherit too): autoloading hypothesis, schemathesis, anyio, cov... cost
    each nested pytest process ~2 CPU-s of imports, ~0.25 without. Not for runs of this suite."""
    return {**clean_env(), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTEST_PLUGINS": ",".join(plugins)}


STUB_N8N_INSTALL = """#!/usr/bin/env bash
# n8n-install.sh: `--check` answers $STUB_N8N_INSTALLED; an install records its pid, sleeps
# $STUB_N8N_SECONDS, notes whether the bootstrap ran meanwhile, and fails if $STUB_N8N_FAILS is set.
printf '%s\\n' "${1:-install}" >> "{log}.n8n"
if [[ "${1:-}" == --check ]]; then [[ -n "${STUB_N8N_INSTALLED:-}" ]]; exit; fi
printf '%s\\n' "$$" > "{log}.n8n.pid"
sleep "${STUB_N8N_SECONDS:-0}"
grep -q '^bootstrap' "{log}" 2>/dev/null && printf 'bootstrap ran meanwhile\\n' >> "{log}.n8n"
if [[ -n "${STUB_N8N_FAILS:-}" ]]; then echo "npm ERR! network unreachable" >&2; exit 1; fi
"""


def scratch_scripts(tmp_path: Path, script: str) -> Path:
    """A copy of scripts/<script> whose bootstrap.sh, lint.sh, n8n-install.sh and .venv/bin/python
    only record calls (n8n-install.sh's in calls.log.n8n)."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / script, tmp_path / "scripts" / script)
    log = tmp_path / "calls.log"
    if script != "n8n-install.sh":
        n8n = tmp_path / "scripts" / "n8n-install.sh"
        n8n.write_text(STUB_N8N_INSTALL.replace("{log}", str(log)))
        n8n.chmod(0o755)
    stubs = {"scripts/bootstrap.sh": "bootstrap", "scripts/lint.sh": "lint", ".venv/bin/python": "python"}
    for path, name in stubs.items():
        if path == f"scripts/{script}":
            continue
        target = tmp_path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(RECORDER.format(name=name, log=log))
        target.chmod(0o755)
    return log


def run_script(
    tmp_path: Path, script: str, *args: str, fails_on: str = "", status: int = 0, env: dict[str, str] | None = None
) -> list[str]:
    """The calls the script made; a stub whose arguments contain `fails_on` exits 1."""
    log = scratch_scripts(tmp_path, script)
    done = subprocess.run(
        ["bash", str(tmp_path / "scripts" / script), *args],
        env={**clean_env(), "STUB_FAILS_ON": fails_on, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == status, done.stdout + done.stderr
    return log.read_text().splitlines() if log.exists() else []


def bootstrap_parts(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """scripts/bootstrap.sh --list in an empty scratch tree: were it to install, it would fail at once."""
    (tmp_path / "scripts").mkdir(exist_ok=True)
    shutil.copy(ROOT / "scripts" / "bootstrap.sh", tmp_path / "scripts" / "bootstrap.sh")
    return subprocess.run(
        ["bash", str(tmp_path / "scripts" / "bootstrap.sh"), *args, "--list"],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


# ------------------------------------------------------------------ scripts/test.sh
BASELINE_IDS = "--mutation-baseline-ids={root}/.local/test-times/mutation-baseline-ids.txt"
MUTATIONS_ALONE = (
    "python -m pytest -p no:cov tests/infra/test_mutations.py --module-times={root}/.local/test-times/mutations.json "
    + BASELINE_IDS
)
SUITE_WITH_COVERAGE = [
    "python -m coverage erase",
    "python -m coverage run -m pytest -n 4 --dist loadgroup --no-loadscope-reorder --waiting-lane"
    " --ignore=tests/infra/test_mutations.py --module-times={root}/.local/test-times/suite.json " + BASELINE_IDS,
    "python -m coverage combine --append -q",
    "python -m coverage report",
]


WARM_BYTECODE = sorted(
    f"python -m pytest --collect-only -q -p no:cov -p no:randomly --ignore=tests/infra/test_mutations.py {part}"
    for part in ("tests/integration tests/infra", "tests/unit")
)
# The mutation suite's baseline tests, listed beside lint (tests/mutation_baseline.py): both runs get the list.
LIST_BASELINE = "python -m tests.mutation_baseline {root}/.local/test-times/mutation-baseline-ids.txt"


def gate_calls(tmp_path: Path) -> list[str]:
    root = tmp_path.resolve()
    return sorted([MUTATIONS_ALONE.format(root=root), *(call.format(root=root) for call in SUITE_WITH_COVERAGE)])


def test_the_full_gate_is_lint_then_the_suite_with_coverage_beside_the_mutation_suite(tmp_path):
    calls = run_script(tmp_path, "test.sh")
    assert calls[0] == "bootstrap --for test"
    # lint; beside it the bytecode cache filled and the baseline's tests listed
    beside_lint = ["lint ", *WARM_BYTECODE, LIST_BASELINE.format(root=tmp_path.resolve())]
    assert sorted(calls[1:5]) == sorted(beside_lint)
    assert sorted(calls[5:]) == gate_calls(tmp_path)  # every test, each once
    suite = [call for call in calls if "coverage" in call]
    assert suite == [call.format(root=tmp_path.resolve()) for call in SUITE_WITH_COVERAGE]  # in this order


def test_the_mutation_suite_runs_niced_beside_the_suite(tmp_path):
    """The CPU-bound mutation suite yields to the timed stack tests on the workers."""
    run_script(tmp_path, "test.sh")
    base = os.nice(0)
    nice = dict(line.split(" ", 1)[::-1] for line in (tmp_path / "calls.log.nice").read_text().splitlines())
    [mutations] = [int(n) for call, n in nice.items() if "test_mutations.py" in call and "--ignore" not in call]
    suite = [int(n) for call, n in nice.items() if "coverage" in call]
    assert mutations == min(base + 10, 19) and suite and all(n == base for n in suite), nice


def run_gate(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """The full gate (scripts/test.sh without arguments) in a scratch copy of stubs."""
    scratch_scripts(tmp_path, "test.sh")
    return subprocess.run(
        ["bash", str(tmp_path / "scripts" / "test.sh")],
        env={**clean_env(), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def n8n_calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "calls.log.n8n"
    return log.read_text().splitlines() if log.exists() else []


def test_the_gate_installs_n8n_in_the_background_while_it_bootstraps(tmp_path):
    done = run_gate(tmp_path, STUB_N8N_SECONDS="2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert n8n_calls(tmp_path) == ["--check", "install", "bootstrap ran meanwhile"]
    assert "n8n-install.sh (in the background; failed)" not in done.stdout
    # The suite knows the install's pid: tests/scheduling.py hands out the real-n8n modules last meanwhile.
    pid = (tmp_path / "calls.log.n8n.pid").read_text().strip()
    suite = [line.split(" ", 1)[0] for line in suite_env(tmp_path)]
    assert suite == [pid], (pid, suite)


def suite_env(tmp_path: Path) -> list[str]:
    """SAFESEND_N8N_INSTALL_PID as the suite's `coverage run` saw it, one line per such call."""
    lines = (tmp_path / "calls.log.n8npid").read_text().splitlines()
    return [line for line in lines if "coverage run" in line]


@pytest.mark.parametrize("env", [{"STUB_N8N_INSTALLED": "1"}, {"SAFESEND_SKIP_N8N": "1"}], ids=["installed", "skipped"])
def test_the_gate_installs_no_n8n_when_it_is_there_or_skipped(tmp_path, env):
    done = run_gate(tmp_path, **env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert n8n_calls(tmp_path) == (["--check"] if "STUB_N8N_INSTALLED" in env else [])
    assert [line.split(" ", 1)[0] for line in suite_env(tmp_path)] == ["unset"]  # nothing to wait for


def test_a_failed_background_install_is_shown_and_left_to_the_n8n_tests(tmp_path):
    """The n8n tests install it themselves (n8n_support.ensure_n8n) and fail if they cannot."""
    done = run_gate(tmp_path, STUB_N8N_FAILS="1")
    assert done.returncode == 0, done.stdout + done.stderr  # the (stubbed) suite passed
    shown = done.stdout.split("n8n-install.sh (in the background; failed)", 1)
    assert len(shown) == 2 and "npm ERR! network unreachable" in shown[1], done.stdout


def test_a_gate_cut_short_stops_the_background_install(tmp_path):
    """The bootstrap fails once the install is under way (it waits for the install's pid file)."""
    pid_file = str(tmp_path / "calls.log.n8n.pid")
    done = run_gate(tmp_path, STUB_N8N_SECONDS="60", STUB_FAILS_ON="--for test", STUB_WAITS_FOR=pid_file)
    assert done.returncode == 1
    pid = int((tmp_path / "calls.log.n8n.pid").read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.05)
    assert not Path(f"/proc/{pid}").exists(), "the background n8n install outlived the gate"


@pytest.mark.parametrize("status", [0, 1])
def test_the_full_gate_ends_with_where_its_time_went(tmp_path, status):
    """A CI log has no timestamps: the last line says how long each part of the gate took."""
    done = run_gate(tmp_path, STUB_FAILS_ON="coverage run" if status else "")
    assert done.returncode == status, done.stderr
    last = done.stdout.rstrip().splitlines()[-1]
    parts = r"bootstrap \d+ s, lint \d+ s, suite \d+ s, coverage \d+ s, waiting for the mutation suite \d+ s"
    assert re.fullmatch(rf"gate: {parts}; \d+ s in all", last), last


@pytest.mark.parametrize("failing", ["coverage run", "coverage report", "test_mutations.py"])
def test_the_full_gate_fails_when_either_run_fails(tmp_path, failing):
    calls = run_script(tmp_path, "test.sh", fails_on=failing, status=1)
    assert sorted(calls[5:]) == gate_calls(tmp_path)  # both ran to the end


def test_the_full_gate_stops_before_any_test_when_the_baseline_cannot_be_listed(tmp_path):
    """Without the list the suite would run the baseline's tests too, or the baseline would guess."""
    calls = run_script(tmp_path, "test.sh", fails_on="tests.mutation_baseline", status=1)
    runs = ("python -m coverage", "python -m pytest -p no:cov tests/infra/test_mutations.py")
    assert calls and not [call for call in calls if call.startswith(runs)], calls


def test_the_full_gates_workers_can_be_set(tmp_path):
    calls = run_script(tmp_path, "test.sh", env={"SAFESEND_TEST_WORKERS": "5"})
    assert any(
        call.startswith("python -m coverage run -m pytest -n 6 --dist loadgroup --no-loadscope-reorder --waiting-lane ")
        for call in calls
    ), calls


@pytest.mark.parametrize("args", [(), ("--fast",), ("tests/unit",)])
def test_every_mode_keeps_compiled_bytecode_outside_the_tree(tmp_path, args):
    """PYTHONDONTWRITEBYTECODE (set on the CI machine) made each of the gate's Python processes
    compile the project and pytest's rewritten tests again; the cache goes to .local/pycache."""
    run_script(tmp_path, "test.sh", *args, env={"PYTHONDONTWRITEBYTECODE": "1"})
    seen = {
        line.split(" ", 2)[:2] == ["unset", f"{tmp_path.resolve()}/.local/pycache"]
        for line in (tmp_path / "calls.log.env").read_text().splitlines()
    }
    assert seen == {True}


@pytest.mark.parametrize("args", [(), ("--fast",), ("tests/unit",)])
def test_each_run_starts_with_an_empty_bytecode_cache(tmp_path, args):
    """One gate left ~260 MB of bytecode under its scratch copies' /tmp paths, new paths each run."""
    stale = tmp_path / ".local" / "pycache" / "tmp" / "old-scratch-copy" / "m.cpython-311.pyc"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"stale")
    run_script(tmp_path, "test.sh", *args)
    assert not stale.exists()


def test_one_worker_runs_the_full_gate_serially_without_xdist(tmp_path):
    calls = run_script(tmp_path, "test.sh", env={"SAFESEND_TEST_WORKERS": "1"})
    [suite] = [call for call in calls if call.startswith("python -m coverage run")]
    assert suite.startswith("python -m coverage run -m pytest --ignore=") and " -n " not in suite, suite


def test_fast_is_lint_then_the_unit_and_property_tests_without_emulators(tmp_path):
    calls = run_script(tmp_path, "test.sh", "--fast")
    assert calls == [
        "bootstrap --for fast",
        "lint ",
        "python -m pytest tests/unit -n 3 --dist loadgroup --no-loadscope-reorder",
    ]


@pytest.mark.parametrize("args", [(), ("--fast",), ("tests/unit",)])
def test_only_fast_draws_fewer_property_examples(tmp_path, args):
    """--fast runs each property on a quarter of its examples (tests/props.py); the gate, and a
    plain pytest run, on all of them."""
    run_script(tmp_path, "test.sh", *args, env={"SAFESEND_TEST_FAST": "0"})
    pytest_runs = [
        line.split(" ", 3)
        for line in (tmp_path / "calls.log.env").read_text().splitlines()
        if " -m pytest " in f" {line.split(' ', 3)[3]} " and "--collect-only" not in line
    ]
    assert pytest_runs and {run[2] for run in pytest_runs} == {"1" if args == ("--fast",) else "0"}, pytest_runs


def test_fasts_workers_can_be_set_and_nonsense_is_refused(tmp_path):
    five, zero = tmp_path / "five", tmp_path / "zero"
    for scratch in (five, zero):
        scratch.mkdir()
    calls = run_script(five, "test.sh", "--fast", env={"SAFESEND_TEST_WORKERS": "5"})
    assert calls[-1] == "python -m pytest tests/unit -n 5 --dist loadgroup --no-loadscope-reorder"
    assert run_script(zero, "test.sh", "--fast", env={"SAFESEND_TEST_WORKERS": "0"}, status=2) == []


def test_the_full_gate_refuses_nonsense_workers_before_running_anything(tmp_path):
    assert run_script(tmp_path, "test.sh", env={"SAFESEND_TEST_WORKERS": "three"}, status=2) == []


def test_fast_takes_no_pytest_arguments(tmp_path):
    assert run_script(tmp_path, "test.sh", "--fast", "-x", status=2) == []


def test_arguments_are_just_pytest_after_the_test_bootstrap(tmp_path):
    assert run_script(tmp_path, "test.sh", "tests/unit", "-x") == [
        "bootstrap --for test",
        "python -m pytest tests/unit -x",
    ]


def test_ci_runs_the_full_gate_not_the_fast_one():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash scripts/test.sh\n" in ci and "--fast" not in ci


# ------------------------------------------------------------------ scripts/bootstrap.sh, run-local.sh
def test_run_local_bootstraps_only_what_it_runs(tmp_path):
    calls = run_script(tmp_path, "run-local.sh", "--no-auth")
    assert calls == ["bootstrap --for run", "python -m devstack.stack --no-auth"]


@pytest.mark.parametrize(
    ("purpose", "parts"),
    [
        ("run", ["venv", "tasks", "emulators"]),  # no checkov, Terraform, chromium, PostgreSQL server
        ("fast", ["venv"]),
        ("test", ALL_PARTS),
    ],
)
def test_each_purpose_installs_its_parts(tmp_path, purpose, parts):
    done = bootstrap_parts(tmp_path, "--for", purpose)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == parts


def test_run_adds_the_postgresql_server_only_for_the_postgres_store(tmp_path):
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "bootstrap.sh", tmp_path / "scripts" / "bootstrap.sh")
    done = subprocess.run(
        ["bash", str(tmp_path / "scripts" / "bootstrap.sh"), "--for", "run", "--list"],
        env={**clean_env(), "SAFESEND_STORE": "postgres"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["venv", "tasks", "emulators", "postgres"]


def test_without_a_purpose_bootstrap_installs_everything_as_before(tmp_path):
    done = bootstrap_parts(tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ALL_PARTS


def test_the_test_purpose_installs_every_part_the_script_defines():
    defined = re.findall(r"^part_(\w+)\(\) \{$", (ROOT / "scripts" / "bootstrap.sh").read_text(), re.MULTILINE)
    assert defined == ALL_PARTS


def test_an_unknown_purpose_is_refused(tmp_path):
    done = bootstrap_parts(tmp_path, "--for", "everything")
    assert done.returncode == 1
    assert "--for takes run, test or fast" in done.stderr


# ------------------------------------------------------------------ tests/scheduling.py
def test_each_module_is_its_own_group_the_two_real_n8n_modules_too():
    """They ran one after the other on one worker: 338 s, the longest path through the gate."""
    node, cli = "tests/integration/test_n8n_node_e2e.py", "tests/integration/test_n8n_e2e.py"
    assert (scheduling.group_of(f"{node}::test_a"), scheduling.group_of(f"{cli}::test_b")) == (node, cli)
    assert scheduling.group_of("tests/integration/test_stack.py") == "tests/integration/test_stack.py"
    assert scheduling.group_of("tests/unit/test_keys.py") != scheduling.group_of("tests/unit/test_mime.py")


def test_each_test_of_a_split_module_is_a_group_of_its_own():
    storm = "tests/integration/test_fault_storm.py"
    phases = [f"{storm}::test_fault_storm[{name}]" for name in ("paced-pool", "reviewers")]
    assert [scheduling.group_of(nodeid) for nodeid in phases] == phases
    stack = "tests/integration/test_stack.py"
    assert scheduling.group_of(f"{stack}::test_a") == scheduling.group_of(f"{stack}::test_b") == stack


def test_the_storms_phases_are_handed_out_longest_first_among_the_slow_modules(collection):
    ids = only(
        collection,
        "tests/integration/test_fault_storm.py",
        "tests/integration/test_pacing_stack.py",
        "tests/integration/test_fault_relay.py",
    )
    storm = [nodeid.split("::", 1)[1] for nodeid in ids if "test_fault_storm.py" in nodeid]
    assert storm == [
        "test_fault_storm[paced-pool]",
        "test_fault_storm[graph-pool]",
        "test_fault_storm_messengers",
        "test_fault_storm[beyond-window]",
        "test_fault_storm[inside-window]",
        "test_fault_storm[reviewers]",
    ]
    pacing = next(i for i, nodeid in enumerate(ids) if "test_pacing_stack.py" in nodeid)
    assert ids[pacing - 1].endswith("[graph-pool]") and ids[pacing + 1].endswith("test_fault_storm_messengers")
    assert "test_fault_relay.py" in ids[-1]  # not in the slow list: after it


def test_every_fuzzed_operation_is_a_test_of_its_own_on_the_workers(collection):
    """schemathesis' per-operation items shared one node id under pytest 9: xdist ran POST /send only."""
    ids = only(collection, "tests/integration/test_openapi_contract.py")
    assert len(ids) == len(set(ids))
    fuzzed = [nodeid.split("::", 1)[1] for nodeid in ids if "test_api_conforms_to_openapi" in nodeid]
    assert "test_api_conforms_to_openapi[GET /status]" in fuzzed and len(fuzzed) == 7, fuzzed


CLONING_CONFTEST = """
import os

import pytest

pytest_plugins = ["tests.scheduling"]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    first = items[0]
    for name in os.environ["CLONE_NAMES"].split(","):  # what schemathesis does under pytest 9
        items.append(pytest.Function.from_parent(first.parent, name=name, callobj=first.obj, originalname=first.name))
"""


def run_with_clones(tmp_path: Path, names: str) -> subprocess.CompletedProcess[str]:
    """A scratch suite whose one test gets clones named `names`: items whose node ids pytest 9
    builds from the test function's name alone, so all of them share test_one.py::test_a."""
    return run_scratch_suite(
        tmp_path,
        CLONING_CONFTEST,
        args=("-v",),
        plugins=(),  # serial: not even xdist
        env={"CLONE_NAMES": names},
        test_one="def test_a():\n    pass\n",
    )


def test_items_that_share_a_node_id_take_their_own_names(tmp_path):
    done = run_with_clones(tmp_path, "test_a[x],test_a[y]")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "test_one.py::test_a[x] PASSED" in done.stdout and "test_one.py::test_a[y] PASSED" in done.stdout
    assert "3 passed" in done.stdout


def test_items_that_still_share_a_node_id_are_refused(tmp_path):
    done = run_with_clones(tmp_path, "test_a")
    assert done.returncode != 0
    assert "tests share a node id, so xdist would run only one of each" in done.stdout + done.stderr


def collected_modules(ids: list[str]) -> list[str]:
    """The modules of `ids`, in order, each once where its tests follow each other."""
    modules: list[str] = []
    for nodeid in ids:
        module = nodeid.split("::", 1)[0]
        if not modules or modules[-1] != module:
            modules.append(module)
    return modules


def test_slow_modules_are_handed_out_first_and_unit_modules_last(collection):
    modules = collected_modules(
        only(
            collection,
            "tests/unit/test_keys.py",
            "tests/infra/test_layout.py",
            "tests/integration/test_fault_relay.py",
            "tests/integration/test_fault_storm.py",
        )
    )
    assert modules == [
        "tests/integration/test_fault_storm.py",  # listed in SLOW_FIRST
        "tests/integration/test_fault_relay.py",
        "tests/infra/test_layout.py",
        "tests/unit/test_keys.py",
    ]


SCRATCH_MODULE = """
import os
import pytest

@pytest.fixture(scope="module")
def started_on():
    return os.environ["PYTEST_XDIST_WORKER"]

@pytest.mark.parametrize("n", range(6))
def test_where(started_on, n):
    with open(os.environ["WHERE_LOG"], "a") as log:
        log.write(f"{__name__} {started_on} {os.environ['PYTEST_XDIST_WORKER']}\\n")
"""


def test_a_module_and_its_module_scoped_fixture_stay_on_one_worker(tmp_path):
    """Real xdist on a scratch suite: with tests/scheduling.py, --dist loadgroup never splits a module."""
    modules = dict.fromkeys(("test_alpha", "test_beta", "test_gamma"), SCRATCH_MODULE)
    done = run_scratch_suite(tmp_path, SCHEDULING_CONFTEST, **modules)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "18 passed" in done.stdout
    rows = [line.split() for line in (tmp_path / "where.log").read_text().splitlines()]
    workers: dict[str, set[str]] = {}
    for module, fixture_worker, test_worker in rows:
        assert fixture_worker == test_worker
        workers.setdefault(module, set()).add(test_worker)
    assert sorted(workers) == ["test_alpha", "test_beta", "test_gamma"]
    assert all(len(on) == 1 for on in workers.values()), workers
    assert len(set().union(*workers.values())) == 2, "both workers got work"


SCHEDULING_CONFTEST = 'pytest_plugins = ["tests.scheduling"]\n'
SPLIT_CONFTEST = """
from tests import scheduling

pytest_plugins = ["tests.scheduling"]
scheduling.SPLIT_MODULES = frozenset({"test_split.py"})
"""

SPLIT_MODULE = """
import os
import time

import pytest

@pytest.mark.parametrize("phase", ["one", "two"])
def test_phase(phase):
    started = time.monotonic()
    time.sleep(3)
    with open(os.environ["WHERE_LOG"], "a") as log:
        log.write(f"{phase} {os.environ['PYTEST_XDIST_WORKER']} {started} {time.monotonic()}\\n")
"""


XDIST = ("-q", "-n", "2", "--dist", "loadgroup", "--no-loadscope-reorder")  # as test.sh runs it


def run_scratch_suite(
    tmp_path: Path,
    conftest: str,
    *,
    args: tuple[str, ...] = XDIST,
    plugins: tuple[str, ...] = ("xdist.plugin",),
    env: dict[str, str] | None = None,
    **modules: str,
) -> subprocess.CompletedProcess[str]:
    """pytest (by default real xdist on 2 workers) on a scratch suite of `modules` with `conftest`,
    loading no plugin but `plugins` and the conftest's: the scheduling under test needs no other."""
    for name, text in modules.items():
        (tmp_path / f"{name}.py").write_text(text)
    (tmp_path / "conftest.py").write_text(conftest)
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    env = {**bare_env(*plugins), "WHERE_LOG": str(tmp_path / "where.log"), **(env or {})}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *sys.path])
    return subprocess.run(
        [sys.executable, "-m", "pytest", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_the_scratch_suites_load_only_the_plugins_they_use(monkeypatch, tmp_path):
    """Their ~17 pytest processes (xdist controllers and workers) each imported the autoloaded
    hypothesis, schemathesis, anyio... (~2 CPU-s): xdist's runs load xdist alone, the serial ones none."""
    envs: list[dict[str, str]] = []

    def fake_run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        envs.append(kwargs["env"])
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    for name in ("xdist", "clones"):
        (tmp_path / name).mkdir()
    run_scratch_suite(tmp_path / "xdist", SCHEDULING_CONFTEST, test_a="")
    run_with_clones(tmp_path / "clones", "test_a[x]")
    assert [env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] for env in envs] == ["1", "1"]
    assert [env["PYTEST_PLUGINS"] for env in envs] == ["xdist.plugin", ""]


def test_a_split_modules_tests_run_on_two_workers_at_the_same_time(tmp_path):
    done = run_scratch_suite(tmp_path, SPLIT_CONFTEST, test_split=SPLIT_MODULE)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {
        phase: (worker, float(a), float(b))
        for phase, worker, a, b in (line.split() for line in (tmp_path / "where.log").read_text().splitlines())
    }
    assert sorted(rows) == ["one", "two"]
    assert rows["one"][0] != rows["two"][0], rows
    assert max(rows["one"][1], rows["two"][1]) < min(rows["one"][2], rows["two"][2]), rows  # overlapped


def test_a_split_module_with_a_module_scoped_fixture_is_refused(tmp_path):
    shared = "import pytest\n\n@pytest.fixture(scope='module')\ndef stack():\n    return 1\n\n"
    shared += "def test_a(stack):\n    pass\n\ndef test_b(stack):\n    pass\n"  # would pass unsplit
    done = run_scratch_suite(tmp_path, SPLIT_CONFTEST, test_split=shared)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "2 errors" in done.stdout and "uses the module-scoped fixture 'stack'" in done.stdout, done.stdout


STUB_PYTHON = """#!/usr/bin/env bash
# A venv's python: records pip calls; every check and import it is asked for succeeds.
if [[ "$1" == "-m" && "$2" == "pip" ]]; then
    printf '%s %s\\n' "$0" "$*" >> "{log}"
elif [[ "$*" == *cache_tag* ]]; then
    echo "stub-311 3.11.0"
fi
exit 0
"""


STUB_UV = """#!/usr/bin/env bash
# The pinned uv: records each `uv pip install --quiet --python PY ARGS` as "PY ARGS" and when it ran.
[[ "$1 $2" == "pip install" ]] || exit 0
shift 2
py="" args=()
while (($#)); do
    case "$1" in
        --python) py="$2"; shift 2 ;;
        --quiet) shift ;;
        *) args+=("$1"); shift ;;
    esac
done
venv="$(basename "$(dirname "$(dirname "$py")")")"
printf 'start %s %s\\n' "$venv" "$(date +%s.%N)" >> "{log}.times"
# STUB_UV_BARRIER=N: wait (at most 30 s) until N installs have started. Side by side, each goes on at
# once; one after another, the first waits out the 30 s and ends before the second starts.
for _ in $(seq 600); do
    (( $(grep -c '^start ' "{log}.times") >= ${STUB_UV_BARRIER:-0} )) && break
    sleep 0.05
done
sleep "${STUB_UV_SECONDS:-0}"
printf 'end %s %s\\n' "$venv" "$(date +%s.%N)" >> "{log}.times"
printf '%s %s\\n' "$py" "${args[*]}" >> "{log}"
if [[ "$venv" == "${STUB_UV_FAILS:-}" ]]; then echo "stub uv: no matching distribution" >&2; exit 1; fi
exit 0
"""


def uv_requirement_in_lock() -> str:
    """requirements-dev.txt's `uv==X` stanza (the line and its --hash lines)."""
    lines = (ROOT / "requirements-dev.txt").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("uv=="))
    end = next(i for i in range(start, len(lines)) if not lines[i].endswith("\\"))
    return "\n".join(lines[start : end + 1])


def scratch_bootstrap(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """bootstrap.sh with the project's locks, stub venvs, the pinned uv already installed (a stub
    with the stamp bootstrap.sh writes) and a stub Java + Cloud SDK: it runs for real and records
    what it would install."""
    for name in ("scripts/bootstrap.sh", "requirements.txt", "requirements-dev.txt", "requirements-infra.in"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    for name in ("requirements.txt", "requirements-postgres.txt"):
        (tmp_path / "functions").mkdir(exist_ok=True)
        shutil.copy(ROOT / "functions" / name, tmp_path / "functions" / name)
    log = tmp_path / "pip.log"
    for venv in (".venv", ".venv-tasks"):
        python = tmp_path / venv / "bin" / "python"
        python.parent.mkdir(parents=True)
        python.write_text(STUB_PYTHON.replace("{log}", str(log)))
        python.chmod(0o755)
    uv = tmp_path / ".local" / "bootstrap-uv" / "bin" / "uv"
    uv.parent.mkdir(parents=True)
    uv.write_text(STUB_UV.replace("{log}", str(log)))
    uv.chmod(0o755)
    tag = f"{sys.implementation.cache_tag} {sys.version.split()[0]}"
    digest = hashlib.sha256((uv_requirement_in_lock() + "\n").encode()).hexdigest()
    (uv.parents[1] / ".safesend-bootstrap.sha256").write_text(f"{tag} {digest}\n")
    sdk = tmp_path / "sdk" / "platform"
    (sdk / "cloud-firestore-emulator").mkdir(parents=True)
    (sdk / "cloud-firestore-emulator" / "cloud-firestore-emulator.jar").write_bytes(b"")
    pubsub = sdk / "pubsub-emulator" / "bin" / "cloud-pubsub-emulator"
    pubsub.parent.mkdir(parents=True)
    pubsub.write_text("#!/bin/sh\n")
    pubsub.chmod(0o755)
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\nexit 0\n")
    java.chmod(0o755)
    env = {
        **clean_env(),
        "PYTHON": sys.executable,
        "JAVA_HOME": str(tmp_path / "jdk"),
        "SAFESEND_GCLOUD_SDK_ROOT": str(tmp_path / "sdk"),
        "TMPDIR": str(tmp_path),
    }
    return log, env


def run_bootstrap(tmp_path: Path, env: dict[str, str], purpose: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(tmp_path / "scripts" / "bootstrap.sh"), "--for", purpose],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def pip_installs(tmp_path: Path, env: dict[str, str], log: Path, purpose: str) -> list[str]:
    """The `-r FILE`s (and the venv) of each install one bootstrap run did."""
    before = log.read_text().splitlines() if log.exists() else []
    done = run_bootstrap(tmp_path, env, purpose)
    assert done.returncode == 0, done.stderr
    after = log.read_text().splitlines() if log.exists() else []
    installs = []
    for line in after[len(before) :]:
        venv = Path(line.split()[0]).parents[1].name
        requirement = re.search(r"-r (\S+)", line)
        installs.append(f"{venv} {requirement.group(1) if requirement else 'pinned'}")
    return installs


def test_run_installs_the_runtime_lock_and_a_venv_made_for_the_tests_serves_it(tmp_path):
    log, env = scratch_bootstrap(tmp_path)
    assert sorted(pip_installs(tmp_path, env, log, "run")) == [  # side by side: in any order
        ".venv functions/requirements-postgres.txt",  # the deployed runtime, not the test tools
        ".venv-tasks pinned",
    ]
    assert pip_installs(tmp_path, env, log, "run") == []  # stamped: nothing to do
    assert pip_installs(tmp_path, env, log, "fast") == [".venv requirements-dev.txt"]  # the tests add the rest
    assert pip_installs(tmp_path, env, log, "run") == []  # the dev set holds the runtime's pins


def test_the_venvs_are_installed_side_by_side(tmp_path):
    """One after another, a fresh clone's four venvs took ~3 min of the 2-core CI machine's gate."""
    log, env = scratch_bootstrap(tmp_path)
    done = run_bootstrap(tmp_path, {**env, "STUB_UV_BARRIER": "2"}, "run")  # not a sleep: a loaded machine
    assert done.returncode == 0, done.stderr
    times: dict[str, dict[str, float]] = {}
    for what, venv, at in (line.split() for line in Path(f"{log}.times").read_text().splitlines()):
        times.setdefault(venv, {})[what] = float(at)
    assert sorted(times) == [".venv", ".venv-tasks"]
    assert max(t["start"] for t in times.values()) < min(t["end"] for t in times.values()), times  # overlapped
    assert done.stderr.index("installing into .venv ") < done.stderr.index("installing into .venv-tasks")  # in order


def test_a_failing_part_fails_bootstrap_with_its_messages_and_the_others_finish(tmp_path):
    _log, env = scratch_bootstrap(tmp_path)
    done = run_bootstrap(tmp_path, {**env, "STUB_UV_FAILS": ".venv-tasks"}, "run")
    assert done.returncode == 1
    assert "stub uv: no matching distribution" in done.stderr
    assert "uv pip install into .venv-tasks failed" in done.stderr
    assert "bootstrap: ERROR: failed: tasks (messages above)" in done.stderr
    assert "ok for run" not in done.stderr
    assert (tmp_path / ".venv" / ".safesend-bootstrap.sha256").is_file()  # the other part finished
    assert not (tmp_path / ".venv-tasks" / ".safesend-bootstrap.sha256").exists()  # not stamped: tried again


def test_uv_is_installed_from_the_dev_locks_pin_with_its_hashes():
    """bootstrap.sh's uv_requirement is exactly the lock's stanza, so pip --require-hashes checks it."""
    script = (ROOT / "scripts" / "bootstrap.sh").read_text()
    function = re.search(r"^uv_requirement\(\) \{\n.*?^\}\n", script, re.MULTILINE | re.DOTALL)
    assert function, "uv_requirement() not found"
    done = subprocess.run(
        ["bash", "-c", f'set -euo pipefail\nROOT="{ROOT}"\n{function.group(0)}uv_requirement'],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    stanza = uv_requirement_in_lock()
    assert done.stdout.rstrip("\n") == stanza and stanza.count("--hash=sha256:") >= 2
    assert "--require-hashes --no-deps -r <(printf '%s\\n' \"$requirement\")" in script


def test_a_failure_on_a_worker_still_points_at_that_workers_emulator_logs(tmp_path):
    """Each worker keeps its emulator logs in its own temp dir; the controller's summary names it."""
    done = run_scratch_suite(
        tmp_path,
        'pytest_plugins = ["tests.emulator_fixtures", "tests.scheduling"]\n',
        args=("-q", "-n", "2", "--dist", "loadgroup", "--basetemp", str(tmp_path / "t")),
        test_fails="def test_fails(emulator_log_dir):\n    assert False\n",
        test_passes="def test_passes(emulator_log_dir):\n    assert True\n",
    )
    assert done.returncode == 1, done.stdout + done.stderr
    named = [line.split(": ", 1)[1] for line in done.stdout.splitlines() if line.startswith("emulator logs: ")]
    assert len(named) == 2, done.stdout  # one per worker
    assert all(Path(path).is_dir() and "emulator-logs" in path for path in named)


def test_the_unit_tests_have_the_same_ids_in_every_process(collection):
    """xdist refuses to run when its workers collect different ids (a parameter minted per run)."""
    first, second = only(collection, "tests/unit/"), collected_ids("tests/unit")
    assert first == second, sorted(set(first) ^ set(second))[:6]


# What the collection tests above ask about, collected once: each pytest start with this suite's
# plugins and conftests costs seconds of imports (five collections, now two; the second, of tests/unit
# alone, is the other process the unit ids are compared with).
COLLECTED = (
    "tests/unit",
    "tests/infra/test_layout.py",
    "tests/integration/test_fault_storm.py",
    "tests/integration/test_pacing_stack.py",
    "tests/integration/test_fault_relay.py",
    "tests/integration/test_openapi_contract.py",
)


@pytest.fixture(scope="module")
def collection() -> list[str]:
    """The node ids of COLLECTED in the order a run hands them out (the tests only read it)."""
    return collected_ids(*COLLECTED)


def only(ids: list[str], *paths: str) -> list[str]:
    """The ids of `paths` (modules, or folders ending in '/'), in their order: the order is a stable
    sort on a rank per module and COLLECTED keeps the tests' order of paths, so it is the order a
    collection of just those paths has."""

    def wanted(module: str) -> bool:
        return any(module == path or (path.endswith("/") and module.startswith(path)) for path in paths)

    return [nodeid for nodeid in ids if wanted(nodeid.split("::", 1)[0])]


def collected_ids(*paths: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist", *paths],
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if "::" in line]


QUICK_MODULE = """
import os

def test_quick():
    with open(os.environ["WHERE_LOG"], "a") as log:
        log.write(f"{__name__} {os.environ['PYTEST_XDIST_WORKER']}\\n")
"""

LONG_MODULE = """
import os
import time

def test_long_first():
    with open(os.environ["WHERE_LOG"], "a") as log:
        log.write(f"{__name__} {os.environ['PYTEST_XDIST_WORKER']}\\n")
    time.sleep(4)

def test_long_second():
    pass
"""


def test_no_module_waits_behind_a_long_test_while_another_worker_is_free(tmp_path):
    """A module of two long tests (the storm, the gcloud CLI's) gets no second module queued behind
    it at the start: the quick modules all run on the other worker meanwhile."""
    modules = dict.fromkeys(("test_b", "test_c", "test_d"), QUICK_MODULE)
    done = run_scratch_suite(tmp_path, SCHEDULING_CONFTEST, test_a_long=LONG_MODULE, **modules)
    assert done.returncode == 0, done.stdout + done.stderr
    ran_on = dict(line.split() for line in (tmp_path / "where.log").read_text().splitlines())
    long_worker = ran_on.pop("test_a_long")
    assert sorted(ran_on) == ["test_b", "test_c", "test_d"]
    assert long_worker not in ran_on.values(), ran_on


WAITING_CONFTEST = """
from tests import scheduling

pytest_plugins = ["tests.scheduling"]
scheduling.SPLIT_MODULES = frozenset({"test_wait.py"})
scheduling.WAITING_MODULES = frozenset({"test_wait.py"})
"""


def waiting_module(phases: int, seconds: float) -> str:
    """A split, mostly waiting module (the storm's stand-in): each phase sleeps, logging its worker."""
    return f"""
import os
import time

import pytest

@pytest.mark.parametrize("phase", range({phases}))
def test_phase(phase):
    time.sleep({seconds})
    with open(os.environ["WHERE_LOG"], "a") as log:
        log.write(f"test_wait {{os.environ['PYTEST_XDIST_WORKER']}}\\n")
"""


BUSY_MODULE = """
import os
import time

def test_busy():
    time.sleep(1.5)
    with open(os.environ["WHERE_LOG"], "a") as log:
        log.write(f"{__name__} {os.environ['PYTEST_XDIST_WORKER']}\\n")
"""


def ran_on(tmp_path: Path) -> list[tuple[str, str]]:
    return [tuple(line.split()) for line in (tmp_path / "where.log").read_text().splitlines()]  # type: ignore[misc]


LANE = ("-q", "-n", "3", "--dist", "loadgroup", "--no-loadscope-reorder", "--waiting-lane")  # as the gate runs it


def test_the_waiting_lane_runs_the_waiting_groups_and_the_others_everything_else(tmp_path):
    """--waiting-lane: the last worker takes the mostly waiting phases (collected last here, so it has
    to look past the queue's head), the other workers every other module."""
    quick = dict.fromkeys(("test_b", "test_c", "test_d", "test_e"), QUICK_MODULE)
    done = run_scratch_suite(tmp_path, WAITING_CONFTEST, args=LANE, test_wait=waiting_module(2, 2.0), **quick)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = ran_on(tmp_path)
    assert sorted(worker for module, worker in rows if module == "test_wait") == ["gw2", "gw2"], rows
    others = {worker for module, worker in rows if module != "test_wait"}
    assert len([row for row in rows if row[0] != "test_wait"]) == 4 and others <= {"gw0", "gw1"}, rows


def test_without_the_lane_the_waiting_groups_go_to_any_worker(tmp_path):
    """The lane is the full gate's choice (scripts/test.sh): without the option the queue's order rules."""
    quick = dict.fromkeys(("test_b", "test_c", "test_d", "test_e"), QUICK_MODULE)
    done = run_scratch_suite(tmp_path, WAITING_CONFTEST, args=LANE[:-1], test_wait=waiting_module(2, 2.0), **quick)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = ran_on(tmp_path)
    assert len(rows) == 6 and {worker for module, worker in rows if module != "test_wait"} & {"gw2"}, rows


@pytest.mark.parametrize("waiting", [True, False])
def test_no_worker_idles_while_work_of_the_other_kind_is_left(tmp_path, waiting):
    """Only waiting phases: the other workers take them too. No waiting phase: the lane takes modules."""
    if waiting:
        modules = {"test_wait": waiting_module(6, 1.5)}
    else:
        modules = {f"test_{name}": BUSY_MODULE for name in ("b", "c", "d", "e", "f", "g")}
    done = run_scratch_suite(tmp_path, WAITING_CONFTEST, args=LANE, **modules)
    assert done.returncode == 0, done.stdout + done.stderr
    workers = [worker for _module, worker in ran_on(tmp_path)]
    assert len(workers) == 6 and set(workers) == {"gw0", "gw1", "gw2"}, workers


def test_bootstraps_list_of_provider_wheels_is_python_that_runs():
    """A `python -c` line indented with the shell code is an IndentationError, and `for x in $(...)`
    hides it: the fresh clone would download no provider wheel at all."""
    code = re.search(
        r'wheels="\$\("\$INFRA_VENV/bin/python" -c "(.*?)"\)"', (ROOT / "scripts" / "bootstrap.sh").read_text(), re.S
    )
    assert code is not None
    done = subprocess.run(
        [sys.executable, "-c", code.group(1)], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert all("==" in requirement for requirement in done.stdout.split()) and done.stdout.split()


def test_the_venvs_nothing_runs_pip_in_are_made_without_it(tmp_path):
    """ensurepip put pip into .venv-tasks and .venv-tfplugin (uv fills both, nothing runs pip there):
    ~5.7 CPU-s each on every fresh clone. .venv keeps pip (a developer's), .venv-infra needs it
    (`pip download` of the schema wheels)."""
    script = (ROOT / "scripts" / "bootstrap.sh").read_text()
    parts = dict(re.findall(r"^part_(\w+)\(\) \{\n(.*?)^\}\n", script, re.MULTILINE | re.DOTALL))
    made = {part: re.search(r'ensure_venv "\$\w+"( --without-pip)?\n', parts[part]) for part in ALL_PARTS}
    assert {part: bool(m and m.group(1)) for part, m in made.items() if m} == {
        "venv": False,
        "tasks": True,
        "infra": False,
        "tfplugin": True,
    }
    ensure_venv = re.search(r"^ensure_venv\(\) \{\n.*?^\}\n", script, re.MULTILINE | re.DOTALL)
    assert ensure_venv is not None
    venv = tmp_path / "v"
    done = subprocess.run(
        [
            "bash",
            "-c",
            f'set -euo pipefail\nlog() {{ :; }}\n{ensure_venv.group(0)}ensure_venv "$1" --without-pip',
            "-",
            venv,
        ],
        env={**clean_env(), "PYTHON": sys.executable, "ROOT": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    probe = subprocess.run([venv / "bin" / "python", "-c", "import pip"], capture_output=True, timeout=60, check=False)
    assert probe.returncode != 0 and b"No module named 'pip'" in probe.stderr
