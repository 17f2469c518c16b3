"""The full gate measures coverage on parallel workers without losing any process (issue 21.5).

scripts/test.sh runs for real in a scratch tree (stub bootstrap and lint, the project's coverage
settings, this venv's python): the tests run on two pytest-xdist workers and one of them starts a
Python server in another directory, stopped by SIGTERM as the stacks stop functions-framework.
Every line of the scratch `functions/` runs in exactly one of those three processes, so the gate
reports 100% only if each process's data reaches the combined report. Also: tests/module_times.py,
which writes where a run's time went, adds up the workers' time on the controller."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.unit.test_gate_workers import ROOT, bare_env

SERVED = '''"""Runs in three processes: part on each xdist worker, part in a server a test starts."""

import sys
import time
from pathlib import Path


def on_first_worker() -> str:
    return "first"


def on_second_worker() -> str:
    return "second"


def serve(ready: str) -> None:
    Path(ready).write_text("ready")
    time.sleep(60)  # stopped by SIGTERM long before


if __name__ == "__main__":
    serve(sys.argv[1])
'''

FIRST = """import os

import served


def test_first():
    with open(os.environ["WORKERS_LOG"], "a") as log:
        log.write(os.environ.get("PYTEST_XDIST_WORKER", "none") + "\\n")
    assert served.on_first_worker() == "first"
"""

SECOND = """import os
import signal
import subprocess
import sys
import time

import served


def test_second(tmp_path):
    with open(os.environ["WORKERS_LOG"], "a") as log:
        log.write(os.environ.get("PYTEST_XDIST_WORKER", "none") + "\\n")
    assert served.on_second_worker() == "second"
    ready = tmp_path / "ready"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    server = subprocess.Popen([sys.executable, served.__file__, str(ready)], cwd=elsewhere)
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready.exists()
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=30) == -signal.SIGTERM
    # A stray report run with the gate's environment (a test that forgot to clear COVERAGE_*): with
    # parallel = true it combines the data files saved so far, the server's, into COVERAGE_FILE and
    # deletes them. The gate's own combine must add to that file, not write over it.
    stray = [sys.executable, "-m", "coverage", "json", "-q", "-o", str(tmp_path / "stray.json")]
    subprocess.run(stray, cwd=elsewhere, check=True, timeout=60, capture_output=True)
"""


GATE_PLUGINS = ("xdist.plugin", "pytest_cov.plugin")  # of the gate's plugins, those this module's checks involve


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A scratch run, its output captured, bounded in time."""
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=240, check=False)


def scratch_env(**extra: str) -> dict[str, str]:
    """A scratch run's environment: pytest loads xdist (the gate's workers) and pytest-cov (loaded
    in the gate too, beside the `coverage run` under test), none of the other plugins; tests.scheduling
    and tests.module_times import from this checkout."""
    return {**bare_env(*GATE_PLUGINS), "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path]), **extra}


def scratch_gate(tmp_path: Path) -> Path:
    """A tree where scripts/test.sh runs for real: stub bootstrap/lint, python = this venv's."""
    tree = tmp_path / "tree"
    (tree / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "test.sh", tree / "scripts" / "test.sh")
    for stub in ("bootstrap.sh", "lint.sh"):
        (tree / "scripts" / stub).write_text("exit 0\n")
    python = tree / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/usr/bin/env bash\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")  # the gate's [tool.coverage]
    (tree / "pytest.ini").write_text(
        "[pytest]\ntestpaths = tests\naddopts = -p no:cacheprovider\npythonpath = functions\n"
    )
    (tree / "conftest.py").write_text(
        'pytest_plugins = ["tests.scheduling", "tests.module_times", "tests.mutation_baseline"]\n'
    )
    (tree / "functions").mkdir()
    (tree / "functions" / "served.py").write_text(SERVED)
    (tree / "tests" / "infra").mkdir(parents=True)
    (tree / "tests" / "test_first.py").write_text(FIRST)
    (tree / "tests" / "test_second.py").write_text(SECOND)
    (tree / "tests" / "infra" / "test_mutations.py").write_text("def test_mutation_suite_stand_in():\n    pass\n")
    return tree


def test_the_gate_combines_every_workers_and_every_servers_coverage(tmp_path):
    tree = scratch_gate(tmp_path)
    workers_log = tmp_path / "workers.log"
    env = scratch_env(WORKERS_LOG=str(workers_log), SAFESEND_TEST_WORKERS="2", TMPDIR=str(tmp_path))
    done = run(["bash", str(tree / "scripts" / "test.sh")], tree, env)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert sorted(workers_log.read_text().split()) == ["gw0", "gw1"], output  # one module on each worker
    total = next(line for line in done.stdout.splitlines() if line.startswith("TOTAL"))
    assert total.split()[-1] == "100.0%", output  # both workers' lines and the stopped server's
    times = json.loads((tree / ".local" / "test-times" / "suite.json").read_text())
    assert sorted(times) == ["tests/test_first.py", "tests/test_second.py"]


def test_the_scratch_runs_load_only_the_coverage_and_xdist_plugins():
    """Each of their ~8 pytest processes imported hypothesis, schemathesis, anyio... (~2 CPU-s, more
    under the gate's `coverage run`, which traces every process test.sh starts)."""
    env = scratch_env(EXTRA="x")
    assert env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] == "1" and env["EXTRA"] == "x"
    assert env["PYTEST_PLUGINS"] == "xdist.plugin,pytest_cov.plugin"
    assert str(ROOT) in env["PYTHONPATH"].split(os.pathsep)


def test_module_times_count_a_modules_fixtures_on_the_controller(tmp_path):
    """A module-scoped fixture's start counts for its module; xdist workers' time reaches the file."""
    (tmp_path / "test_slow.py").write_text(
        "import time\nimport pytest\n\n@pytest.fixture(scope='module')\ndef stack():\n    time.sleep(0.6)\n\n"
        "def test_one(stack):\n    pass\n\ndef test_two(stack):\n    pass\n"
    )
    (tmp_path / "test_quick.py").write_text("def test_quick():\n    pass\n")
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["tests.scheduling", "tests.module_times"]\n')
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    env = scratch_env()
    for parallel in ([], ["-n", "2", "--dist", "loadgroup"]):
        out = tmp_path / "times.json"
        done = run([sys.executable, "-m", "pytest", "-q", f"--module-times={out}", *parallel], tmp_path, env)
        assert done.returncode == 0, done.stdout + done.stderr
        times = json.loads(out.read_text())
        assert list(times) == ["test_slow.py", "test_quick.py"], times  # slowest first
        assert times["test_slow.py"] >= 0.6 > times["test_quick.py"]
        assert "time per module" in done.stdout
        timeline = {row["group"]: row for row in json.loads((tmp_path / "times.timeline.json").read_text())}
        assert sorted(timeline) == ["test_quick.py", "test_slow.py"]
        slow = timeline["test_slow.py"]
        # its fixture's start included (the offsets are rounded to 0.1 s: 0.8 to 1.4 is 0.6 less a rounding)
        assert slow["start_s"] >= 0 and slow["end_s"] - slow["start_s"] >= 0.55
        workers = {row["worker"] for row in timeline.values()}
        assert workers <= {"gw0", "gw1"} if parallel else workers == {"-"}
        assert "ended last" in done.stdout
