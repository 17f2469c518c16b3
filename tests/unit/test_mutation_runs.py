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


def test_a_needle_with_parameters_selects_only_those_cases(tmp_path):
    """`test_x[reviewers]` runs test_x's reviewers case, not its ten scenarios (an env-parity
    mutation ran all ten: ~14 CPU-s instead of ~2), and the nodes that can contain it all run."""
    from tests.infra import test_mutations

    select = test_mutations.keyword(["test_x[b-1]", "test_y[key", "test_z"])
    assert select == "test_x[b-1] or test_y[key or test_z"
    (tmp_path / "test_sel.py").write_text(
        "import pytest\n"
        "@pytest.mark.parametrize('p', ['a-1', 'b-1', 'b-10'])\ndef test_x(p): pass\n"
        "@pytest.mark.parametrize('p', ['key1', 'nokey'])\ndef test_y(p): pass\n"
        "@pytest.mark.parametrize('p', [1, 2])\ndef test_z(p): pass\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:randomly", "--collect-only", "-q", "-k", select, "test_sel.py"],
        cwd=tmp_path,
        env={**clean_env(), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    selected = {line.split("::")[1] for line in done.stdout.splitlines() if "::" in line}
    assert selected == {"test_x[b-1]", "test_y[key1]", "test_z[1]", "test_z[2]"}, done.stdout


def test_the_copies_share_one_parse_cache(monkeypatch, tmp_path):
    """python-hcl2 parsed the same 26 .tf files in each of ~90 copies (~0.8 CPU-s each); the copies
    side by side now share one cache of parses."""
    from tests.infra import support, test_mutations

    seen: dict[str, str] = {}

    def fake_run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        seen.update(kwargs["env"])  # type: ignore[arg-type]
        return subprocess.CompletedProcess(argv, 0, "1 passed\n", "")

    monkeypatch.setattr(test_mutations.subprocess, "run", fake_run)
    test_mutations.run_checks(tmp_path / "copy", ("tests/infra/test_policy.py",), "test_x")
    assert seen[support.PARSE_CACHE] == str(tmp_path / "hcl-parses")


def test_a_copy_parses_only_the_files_no_other_copy_had(monkeypatch, tmp_path):
    """The shared cache serves a file's parse for its exact bytes: a changed file is parsed anew."""
    from tests.infra import support

    one, two = tmp_path / "one.tf", tmp_path / "two.tf"
    one.write_text('variable "a" {\n  default = 1\n}\n')
    two.write_text('locals {\n  b = "x"\n}\n')
    files = [str(one), str(two)]
    parsed: list[list[str]] = []
    real_run_tool = support.run_tool

    def counting_run_tool(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        parsed.append(args[args.index(str(support.HCL2_LIB)) + 1 :])
        return real_run_tool(args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(support, "run_tool", counting_run_tool)
    cache = tmp_path / "cache"
    first = support.parse_hcl(files, cache)
    assert first == support.parse_hcl(files, None)
    assert support.parse_hcl(files, cache) == first
    two.write_text('locals {\n  b = "y"\n}\n')
    changed = support.parse_hcl(files, cache)
    assert changed[str(one)] == first[str(one)] and changed[str(two)] != first[str(two)]
    assert changed == support.parse_hcl(files, None)
    assert parsed == [files, files, [str(two)], files]
