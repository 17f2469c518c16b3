"""The mutation suite's ~88 nested pytest runs (tests/infra/test_mutations.py) skip what they do not
use (issue 21.5): the gate's coverage measurement and the autoloaded hypothesis/schemathesis plugins."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def clean_env() -> dict[str, str]:
    """This process's environment without the suite's coverage or xdist settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("COVERAGE_", "PYTEST_XDIST", "SAFESEND_TEST"))}


def test_the_mutation_suites_nested_runs_are_outside_the_coverage_measurement(monkeypatch, tmp_path):
    """84 nested pytest runs in scratch copies measure nothing of functions/; the gate's coverage
    (COVERAGE_PROCESS_CONFIG, inherited by every subprocess) made each ~1.7x slower."""
    from tests.infra import test_mutations

    seen: dict[str, str] = {}

    def fake_run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        seen.update(kwargs["env"])  # type: ignore[arg-type]
        return subprocess.CompletedProcess(argv, 0, "FAILED tests/infra/test_policy.py::test_x - boom\n", "")

    monkeypatch.setenv("COVERAGE_PROCESS_CONFIG", "{}")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(test_mutations.subprocess, "run", fake_run)
    failed, _ = test_mutations.run_checks(tmp_path, ("tests/infra/test_policy.py",), "test_x")
    assert failed == {"tests/infra/test_policy.py::test_x"}
    assert seen["HOME"] == str(tmp_path)
    assert not [name for name in seen if name.startswith("COVERAGE_")]


def test_the_mutation_suites_nested_runs_load_only_the_timeout_plugin(monkeypatch, tmp_path):
    """Autoloading hypothesis and schemathesis cost each of the ~88 nested runs a second of imports."""
    from tests.infra import test_mutations

    calls: list[tuple[list[str], dict[str, str]]] = []

    def fake_run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append((argv, kwargs["env"]))  # type: ignore[arg-type]
        return subprocess.CompletedProcess(argv, 0, "1 passed\n", "")

    monkeypatch.setattr(test_mutations.subprocess, "run", fake_run)
    test_mutations.run_checks(tmp_path, ("tests/infra/test_policy.py",), "test_x")
    [(argv, env)] = calls
    assert env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] == "1"
    assert argv[argv.index("-p") + 1] == "pytest_timeout"  # pytest.ini's timeout and the timeout marks


def test_the_infra_checks_need_no_plugin_but_the_timeout_one():
    """What the nested runs rely on: tests/infra collects with autoloading off and pytest_timeout on."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "pytest_timeout", "--collect-only", "-q", "-W", "error", "tests/infra"],
        cwd=ROOT,
        env={**clean_env(), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
