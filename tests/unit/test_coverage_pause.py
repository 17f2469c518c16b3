"""tests/coverage_pause.py on a scratch suite under a real `coverage run`: a test marked
`functions_out_of_process` is not measured in this process, the tests after it are again (also after a
marked test fails), and without coverage the marker changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

LIBRARY = """def in_marked():
    return "marked"


def in_failing_marked():
    return "failing"


def in_plain():
    return "plain"


def after_failure():
    return "after"


def at_volume():
    return "volume"
"""

SUITE = """import pytest

import lib


@pytest.mark.functions_out_of_process
def test_1_marked():
    assert lib.in_marked() == "marked"


def test_2_plain():
    assert lib.in_plain() == "plain"


@pytest.mark.functions_out_of_process
def test_3_marked_and_failing():
    assert lib.in_failing_marked() == "not this"


def test_4_after_the_failure():
    assert lib.after_failure() == "after"


@pytest.mark.measured_elsewhere
def test_5_at_volume():
    assert lib.at_volume() == "volume"
"""

INI = """[pytest]
markers =
    functions_out_of_process: paused tracer
    measured_elsewhere: paused tracer
"""


def scratch_env(tmp_path: Path) -> dict[str, str]:
    """Without the gate's COVERAGE_* (its data file: a report run with them combines and deletes the
    gate's data files so far) and PYTEST_* settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COVERAGE_", "PYTEST_"))}
    env.update(PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", PYTHONPATH=f"{ROOT}{os.pathsep}{tmp_path}")
    return env


def run_scratch(tmp_path: Path, *prefix: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "lib.py").write_text(LIBRARY)
    (tmp_path / "test_scratch.py").write_text(SUITE)
    (tmp_path / "pytest.ini").write_text(INI)
    return subprocess.run(
        [sys.executable, "-m", *prefix, "pytest", "-p", "tests.coverage_pause", "-q", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env=scratch_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def executed_functions(tmp_path: Path) -> set[str]:
    subprocess.run(
        [sys.executable, "-m", "coverage", "json", "-q", "-o", "cov.json"],
        cwd=tmp_path,
        env=scratch_env(tmp_path),
        check=True,
        timeout=60,
        capture_output=True,
    )
    files = json.loads((tmp_path / "cov.json").read_text())["files"]
    functions = files["lib.py"]["functions"]
    return {name for name, data in functions.items() if name and data["executed_lines"]}


def test_a_marked_test_is_not_traced_and_the_tests_after_it_are(tmp_path: Path) -> None:
    """Either marker pauses the tracer: `at_volume` (measured_elsewhere) is not traced either."""
    done = run_scratch(tmp_path, "coverage", "run", "--source=.", "-m")
    assert "1 failed, 4 passed" in done.stdout, done.stdout + done.stderr
    assert executed_functions(tmp_path) == {"in_plain", "after_failure"}


def test_without_coverage_the_marker_changes_nothing(tmp_path: Path) -> None:
    done = run_scratch(tmp_path)
    assert done.returncode == 1 and "1 failed, 4 passed" in done.stdout, done.stdout + done.stderr
    assert "FAILED test_scratch.py::test_3_marked_and_failing" in done.stdout  # only the scratch's own failure
