"""The gate runs the mutation suite's baseline checks once (tests/mutation_baseline.py): the main
suite leaves exactly the listed tests to the baseline, and the baseline fails unless each of them
passed in its copy. Scratch suites and fake copies, never the real ~300 tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import mutation_baseline
from tests.infra import test_mutations

from .test_mutation_runs import fake_tree

ROOT = Path(__file__).resolve().parents[2]

SCRATCH_SUITE = """import pytest
@pytest.mark.parametrize("case", ["a b", "c[d]"])
def test_listed(case):
    pass
def test_kept():
    pass
def test_also_kept():
    pass
"""


def run_scratch(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest on tmp_path/test_scratch.py with only this plugin loaded (no autoloaded plugins)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COVERAGE_", "PYTEST_", "SAFESEND_TEST"))}
    env.update(PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.mutation_baseline", "-p", "no:cacheprovider", "-rA", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_main_suite_deselects_exactly_the_listed_tests_and_says_so(tmp_path):
    (tmp_path / "test_scratch.py").write_text(SCRATCH_SUITE)
    listed = run_scratch(tmp_path, "--collect-only", "-q", "-k", "listed", "test_scratch.py")
    ids = mutation_baseline.parse_collected(listed.stdout)
    assert ids == ["test_scratch.py::test_listed[a b]", "test_scratch.py::test_listed[c[d]]"], listed.stdout
    (tmp_path / "ids.txt").write_text("".join(f"{i}\n" for i in ids))
    done = run_scratch(tmp_path, "--mutation-baseline-ids=ids.txt", "test_scratch.py")
    assert done.returncode == 0, done.stdout
    assert "2 passed, 2 deselected" in done.stdout, done.stdout
    ran = {line.split(" ", 1)[1] for line in done.stdout.splitlines() if line.startswith("PASSED ")}
    assert ran == {"test_scratch.py::test_kept", "test_scratch.py::test_also_kept"}
    assert "mutation baseline: the 2 tests listed in ids.txt run once, in the mutation suite's baseline" in done.stdout


def test_without_the_list_every_test_runs(tmp_path):
    (tmp_path / "test_scratch.py").write_text(SCRATCH_SUITE)
    done = run_scratch(tmp_path, "test_scratch.py")
    assert "4 passed" in done.stdout and "deselected" not in done.stdout and "mutation baseline" not in done.stdout


@pytest.mark.parametrize("content", [None, "", "\n \n"], ids=["missing", "empty", "blank"])
def test_a_missing_or_empty_list_is_an_error_not_a_silent_full_or_empty_run(tmp_path, content):
    path = tmp_path / "ids.txt"
    if content is not None:
        path.write_text(content)
    with pytest.raises(mutation_baseline.BaselineIdsError):
        mutation_baseline.read_ids(path)
    (tmp_path / "test_scratch.py").write_text(SCRATCH_SUITE)
    done = run_scratch(tmp_path, f"--mutation-baseline-ids={path}", "test_scratch.py")
    assert done.returncode != 0 and " passed" not in done.stdout, done.stdout


FAKE = """import pytest
@pytest.mark.parametrize("case", [1, 2, 3])
def test_a(case):
    assert case != {broken}
def test_b():
    pass
"""


@pytest.mark.parametrize("broken", [0, 2], ids=["all-pass", "one-fails"])
def test_the_baseline_runs_exactly_the_listed_ids_and_needs_each_to_pass(tmp_path, broken):
    tree = fake_tree(tmp_path, FAKE.format(broken=broken))
    ids = ["tests/infra/test_fake.py::test_a[2]", "tests/infra/test_fake.py::test_b"]
    failed, output = test_mutations.run_checks(tree, tuple(ids), (), False)
    verdict = test_mutations.baseline_verdict(output)
    if broken:
        assert failed == {ids[0]} and verdict == "1 failed, 1 passed", output
    else:
        assert not failed and verdict == f"{len(ids)} passed", output  # test_a[1] and [3] not run


def test_an_id_the_copy_lacks_fails_the_baseline(tmp_path):
    """A copy missing a listed test (a file left out of make_copy's list) is no pass."""
    tree = fake_tree(tmp_path, FAKE.format(broken=0))
    ids = ("tests/infra/test_fake.py::test_b", "tests/infra/test_gone.py::test_c")
    _failed, output = test_mutations.run_checks(tree, ids, (), False)
    assert test_mutations.baseline_verdict(output) != f"{len(ids)} passed", output


def test_the_verdict_is_the_last_summary_lines_counts():
    verdict = test_mutations.baseline_verdict
    assert verdict("x\n300 passed, 278 deselected in 182.73s (0:03:02)\n") == "300 passed, 278 deselected"
    assert verdict("===== 1 failed, 2 passed in 0.30s =====\nwarning on stderr") == "1 failed, 2 passed"
    assert verdict("ERROR: not found: tests/x.py::y\nno tests ran in 0.01s") == ""
