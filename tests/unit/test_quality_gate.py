"""The gate CI runs fails when it should: a ruff finding, a mypy --strict error, coverage under the
floor. Each tool runs with the repository's own pyproject.toml on a planted fault in a scratch tree
(never in this checkout, which other tests read), and .ci/run is checked to run that gate."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def scratch_tree(tmp_path: Path, files: dict[str, str]) -> Path:
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return tmp_path


def run(tool: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The tool on the scratch tree, outside the suite's own coverage measurement (whose settings
    reach subprocesses through COVERAGE_* variables)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_")}
    return subprocess.run(tool, cwd=cwd, env=env, capture_output=True, text=True, timeout=240, check=False)


CLEAN = '"""A clean module."""\n\n\ndef double(value: int) -> int:\n    return value * 2\n'
TYPED_TREE = {
    "functions/main.py": CLEAN,
    "functions/safesend/__init__.py": '"""Package."""\n',
    "devstack/__init__.py": '"""Package."""\n',
}


@pytest.mark.parametrize(
    ("planted", "expect_failure"),
    [
        (CLEAN, False),
        ('"""Unused import."""\n\nimport os\n', True),
        ('"""Long line."""\n\nX = "' + "x" * 130 + '"\n', True),
    ],
)
def test_ruff_check_fails_on_a_finding(tmp_path, planted, expect_failure):
    tree = scratch_tree(tmp_path, {"functions/safesend/planted.py": planted})
    result = run([str(BIN / "ruff"), "check", "--no-fix", "."], tree)
    assert (result.returncode != 0) == expect_failure, result.stdout + result.stderr


def test_ruff_format_check_fails_on_unformatted_code(tmp_path):
    tree = scratch_tree(tmp_path, {"functions/safesend/planted.py": '"""Doc."""\nX = {"a":1}\n'})
    assert run([str(BIN / "ruff"), "format", "--check", "."], tree).returncode != 0
    assert run([str(BIN / "ruff"), "format", "."], tree).returncode == 0
    assert run([str(BIN / "ruff"), "format", "--check", "."], tree).returncode == 0


@pytest.mark.parametrize(
    ("planted", "expect_failure"),
    [
        (CLEAN, False),
        ('"""Untyped: an error only under --strict."""\n\n\ndef double(value):\n    return value * 2\n', True),
        ('"""Wrong type."""\n\n\ndef double(value: int) -> str:\n    return value * 2\n', True),
    ],
)
def test_mypy_strict_fails_on_a_type_error_in_the_package(tmp_path, planted, expect_failure):
    tree = scratch_tree(tmp_path, {**TYPED_TREE, "functions/safesend/planted.py": planted})
    result = run([str(BIN / "mypy"), "--cache-dir", str(tmp_path / ".mypy_cache")], tree)
    assert (result.returncode != 0) == expect_failure, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("declared", "planted", "rule"),
    [
        ("functions-framework==3.10.2\nflask==3.1.3\n", "import flask\n", None),
        ("functions-framework==3.10.2\n", "import flask\n", "DEP003"),  # only functions-framework's dependency
        ("functions-framework==3.10.2\n", "import safesend_no_such_package\n", "DEP001"),  # not installed
        ("functions-framework==3.10.2\nflask==3.1.3\nidna==3.20\n", "import flask\n", "DEP002"),  # unused
    ],
)
def test_deptry_fails_on_a_missing_unused_or_transitive_dependency(tmp_path, declared, planted, rule):
    tree = scratch_tree(
        tmp_path,
        {
            "functions/requirements.in": declared,
            "functions/requirements-postgres.in": "-r requirements.in\n",
            "requirements-dev.in": "pytest==9.2.0\n",
            "functions/main.py": '"""Entry."""\n\n' + planted,
        },
    )
    result = run([str(BIN / "python"), "-m", "deptry", "functions"], tree)
    output = result.stdout + result.stderr
    assert (result.returncode != 0) == (rule is not None), output
    assert rule is None or rule in output, output


def test_the_gate_runs_deptry_on_the_deployed_code():
    lint = (ROOT / "scripts" / "lint.sh").read_text()
    assert 'step "deptry" "$BIN/python" -m deptry functions' in lint


def test_coverage_under_the_floor_fails_the_report(tmp_path):
    half_run = (
        '"""Half of it runs."""\n\n\ndef used() -> int:\n    return 1\n\n\n'
        "def unused() -> int:\n    a = 1\n    b = 2\n    return a + b\n\n\nused()\n"
    )
    tree = scratch_tree(tmp_path, {"functions/half.py": half_run})
    assert run([str(BIN / "python"), "-m", "coverage", "run", "functions/half.py"], tree).returncode == 0
    run([str(BIN / "python"), "-m", "coverage", "combine"], tree)
    report = run([str(BIN / "python"), "-m", "coverage", "report"], tree)
    assert report.returncode == 2, report.stdout + report.stderr  # coverage's "under fail_under"
    assert "fail-under" in (report.stdout + report.stderr).lower()


def test_ci_runs_lint_then_the_suite_under_the_coverage_floor():
    ci = (ROOT / ".ci" / "run").read_text()
    test_sh = (ROOT / "scripts" / "test.sh").read_text()
    assert "bash scripts/test.sh\n" in ci and "set -euo pipefail" in ci
    no_args = test_sh.split("if (($# == 0)); then", 1)[1].split("\n    exit 0\nfi\n", 1)[0]  # the full gate's block
    assert no_args.index("bash scripts/lint.sh") < no_args.index("coverage run -m pytest")
    assert no_args.index("coverage run -m pytest") < no_args.index("coverage report")
    assert "set -euo pipefail" in test_sh
    floor = next(line for line in (ROOT / "pyproject.toml").read_text().splitlines() if line.startswith("fail_under"))
    assert float(floor.split("=")[1]) >= 90.0


def test_ci_cannot_skip_the_real_n8n_tests():
    """test_n8n_e2e's only skip is the local opt-out SAFESEND_SKIP_N8N=1; .ci/run clears it first."""
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.index("unset SAFESEND_SKIP_N8N") < ci.index("bash scripts/test.sh")
    e2e = (ROOT / "tests" / "integration" / "test_n8n_e2e.py").read_text()
    assert e2e.count("skipif") == 1 and 'os.environ.get("SAFESEND_SKIP_N8N") == "1"' in e2e
