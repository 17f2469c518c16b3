"""The mutation suite's ~88 nested pytest runs (tests/infra/test_mutations.py) skip what they do not
use (issue 21.5): the gate's coverage measurement and the autoloaded hypothesis/schemathesis plugins."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def clean_env() -> dict[str, str]:
    """This process's environment without the suite's coverage or xdist settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("COVERAGE_", "PYTEST_XDIST", "SAFESEND_TEST"))}


def fake_popen(monkeypatch: pytest.MonkeyPatch, stdout: str) -> list[tuple[list[str], dict[str, str]]]:
    """Replaces the nested pytest run by one that prints `stdout`; returns the (argv, env) it got."""
    from tests.infra import test_mutations

    calls: list[tuple[list[str], dict[str, str]]] = []

    class FakePopen:
        def __init__(self, argv: list[str], **kwargs: object) -> None:
            calls.append((argv, kwargs["env"]))  # type: ignore[arg-type]

        def communicate(self, timeout: float | None = None) -> tuple[str, str]:
            return stdout, ""

    monkeypatch.setattr(test_mutations.subprocess, "Popen", FakePopen)
    return calls


def test_the_mutation_suites_nested_runs_are_outside_the_coverage_measurement(monkeypatch, tmp_path):
    """84 nested pytest runs in scratch copies measure nothing of functions/; the gate's coverage
    (COVERAGE_PROCESS_CONFIG, inherited by every subprocess) made each ~1.7x slower."""
    from tests.infra import test_mutations

    monkeypatch.setenv("COVERAGE_PROCESS_CONFIG", "{}")
    monkeypatch.setenv("HOME", str(tmp_path))
    calls = fake_popen(monkeypatch, "FAILED tests/infra/test_policy.py::test_x - boom\n")
    failed, _ = test_mutations.run_checks(tmp_path, ("tests/infra/test_policy.py",), ("test_x",), True)
    [(_, seen)] = calls
    assert failed == {"tests/infra/test_policy.py::test_x"}
    assert seen["HOME"] == str(tmp_path)
    assert not [name for name in seen if name.startswith("COVERAGE_")]


def test_the_mutation_suites_nested_runs_load_only_the_timeout_plugin(monkeypatch, tmp_path):
    """Autoloading hypothesis and schemathesis cost each of the ~88 nested runs a second of imports."""
    from tests.infra import test_mutations

    calls = fake_popen(monkeypatch, "1 passed\n")
    test_mutations.run_checks(tmp_path, ("tests/infra/test_policy.py",), ("test_x",), True)
    [(argv, env)] = calls
    assert env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] == "1"
    assert argv[argv.index("-p") + 1] == "pytest_timeout"  # pytest.ini's timeout and the timeout marks


def test_a_nested_test_may_take_the_whole_runs_bound_not_pytest_inis(monkeypatch, tmp_path):
    """Niced beside the gate's workers, the baseline's real `terraform test` passed 300 s (CI-like run)."""
    from tests.infra import test_mutations

    calls = fake_popen(monkeypatch, "1 passed\n")
    test_mutations.run_checks(tmp_path, ("tests/infra/test_policy.py",), ("test_x",), True, timeout=900)
    [(argv, _)] = calls
    assert argv[argv.index("-o") + 1] == "timeout=960"  # the run's own bound cuts a hang first


def collect(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`pytest --collect-only -q` as the nested runs start it: no autoloaded plugin."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", *args],
        cwd=cwd,
        env={**clean_env(), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_the_infra_checks_need_no_plugin_but_the_timeout_one():
    """What the nested runs rely on: tests/infra collects with autoloading off and pytest_timeout on."""
    done = collect(ROOT, "-p", "pytest_timeout", "-W", "error", "tests/infra")
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
    done = collect(tmp_path, "-k", select, "test_sel.py")
    selected = {line.split("::")[1] for line in done.stdout.splitlines() if "::" in line}
    assert selected == {"test_x[b-1]", "test_y[key1]", "test_z[1]", "test_z[2]"}, done.stdout


def test_the_copies_share_one_parse_cache(monkeypatch, tmp_path):
    """python-hcl2 parsed the same 26 .tf files in each of ~90 copies (~0.8 CPU-s each); the copies
    side by side now share one cache of parses."""
    from tests.infra import support, test_mutations

    calls = fake_popen(monkeypatch, "1 passed\n")
    test_mutations.run_checks(tmp_path / "copy", ("tests/infra/test_policy.py",), ("test_x",), True)
    [(_, seen)] = calls
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


def fake_tree(tmp_path: Path, source: str) -> Path:
    """A copy as make_copy lays it out, holding only tests/infra/test_fake.py (and the stop plugin)."""
    tree = tmp_path / "copy"
    (tree / "tests" / "infra").mkdir(parents=True)
    (tree / "pytest.ini").write_text("[pytest]\n")
    (tree / "tests" / "__init__.py").write_text("")
    (tree / "tests" / "infra" / "__init__.py").write_text("")
    (tree / "tests" / "infra" / "mutation_stop.py").write_text((ROOT / "tests/infra/mutation_stop.py").read_text())
    (tree / "tests" / "infra" / "test_fake.py").write_text(source)
    return tree


FAKE = """import pathlib, pytest
@pytest.mark.parametrize("case", [1, 2, 3])
def test_a(case):
    pathlib.Path(f"ran-a{case}").touch()
    assert case != 2
def test_b():
    pathlib.Path("ran-b").touch()
    assert False
"""


def test_a_caught_mutations_run_ends_once_every_needle_failed(tmp_path):
    """An env-parity mutation failed its first deploy scenario, then ran nine more (~1.3 CPU-s
    each): the verdict was made at the first. The baseline (stop=False) runs everything."""
    from tests.infra import test_mutations

    tree = fake_tree(tmp_path, FAKE)
    failed, output = test_mutations.run_checks(tree, ("tests/infra/test_fake.py",), ("test_a",), True)
    assert failed == {"tests/infra/test_fake.py::test_a[2]"}, output
    assert sorted(p.name for p in tree.glob("ran-*")) == ["ran-a1", "ran-a2"]
    failed, output = test_mutations.run_checks(tree, ("tests/infra/test_fake.py",), ("test_a", "test_b"), False)
    assert failed == {"tests/infra/test_fake.py::test_a[2]", "tests/infra/test_fake.py::test_b"}, output
    assert sorted(p.name for p in tree.glob("ran-*")) == ["ran-a1", "ran-a2", "ran-a3", "ran-b"]


def test_a_mutation_the_checks_miss_is_reported_not_caught(tmp_path):
    """A no-op "mutation" of a real copy: its named test passes there, so the runner reports it."""
    from tests.infra import test_mutations

    noop = test_mutations.Mutation(
        "no-op",
        "nothing: the text is put back as it was",
        "cloudbuild-gcloud.yaml",
        '_INDEX_LAG_S: "90"',
        '_INDEX_LAG_S: "90"',
        ("test_gcloud_substitution_defaults_are_the_terraform_variable_defaults",),
        ("tests/infra/test_env_parity.py",),
    )
    tree = test_mutations.make_copy(tmp_path / "no-op")
    test_mutations.apply(noop, tree)
    failed, output = test_mutations.run_checks(tree, noop.tests, noop.fails, True)
    assert "1 passed" in output and not failed, output
    assert test_mutations.uncaught(noop, failed) == list(noop.fails)


def test_a_nested_run_that_crashes_is_reported_not_caught(tmp_path):
    """A run that dies (here at collection) names no failed test: its mutation is not caught."""
    from tests.infra import test_mutations

    crash = test_mutations.Mutation("crash", "nothing", "x", "x", "x", ("test_a",), ("tests/infra/test_fake.py",))
    tree = fake_tree(tmp_path, "import os\nos._exit(3)\n")
    failed, output = test_mutations.run_checks(tree, crash.tests, crash.fails, True)
    assert not failed and " passed" not in output, output
    assert test_mutations.uncaught(crash, failed) == ["test_a"]


HANGS = (  # a run that hangs in its test, with a session fixture whose teardown leaves a mark
    "import pathlib, time, pytest\n"
    "@pytest.fixture(scope='session')\n"
    "def server():\n"
    "    yield\n"
    "    pathlib.Path('torn-down').touch()\n"
    "def test_a(server):\n"
    "    pathlib.Path('started').touch()\n"
    "    time.sleep(600)\n"
)


@pytest.mark.parametrize("parent_sigint", ["default", "ignored"])
def test_a_nested_run_that_hangs_is_interrupted_and_reported(tmp_path, parent_sigint):
    """A hang costs its timeout, then the run is interrupted (its fixtures' teardown runs) and
    reported as timed out: the suite goes on. Also when this process ignores SIGINT, as the
    mutation suite does when scripts/test.sh runs it in the background (an inherited disposition)."""
    from tests.infra import test_mutations

    tree = fake_tree(tmp_path, HANGS)
    started = time.monotonic()
    # 20 s: a cold nested pytest on the loaded CI machine did not reach the test within 8 s.
    previous = signal.getsignal(signal.SIGINT)
    if parent_sigint == "ignored":
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        failed, output = test_mutations.run_checks(tree, ("tests/infra/test_fake.py",), ("test_a",), True, timeout=20)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - started < 80
    assert not failed and output.startswith("TIMED OUT after 20 s"), output
    assert (tree / "started").exists() and (tree / "torn-down").exists()


SHARED = """from . import helper
def test_value():
    assert helper.VALUE == 1
"""


def test_a_copy_loads_the_templates_bytecode_for_its_unchanged_files_only(monkeypatch, tmp_path):
    """Each of the ~92 copies compiled the same tests/infra modules again under its own path (~0.3
    CPU-s per nested run): a copy now loads the template's .pyc (relocated to its own path) for
    every file with the template's bytes, and compiles the file it changed from its own bytes."""
    import marshal
    import shutil

    from tests.infra import shared_bytecode, test_mutations

    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)  # as scripts/test.sh runs the suite
    template = fake_tree(tmp_path, SHARED)
    (template / "tests" / "infra" / "helper.py").write_text("VALUE = 1\n")
    tests = ("tests/infra/test_fake.py",)
    test_mutations.compile_template(template, tests)
    tree = tmp_path / "mutated"
    shutil.copytree(template, tree, ignore=shutil.ignore_patterns("__pycache__"))
    (tree / "tests" / "infra" / "helper.py").write_text("VALUE = 2\n")

    shared = shared_bytecode.share_bytecode(template, tree)
    assert Path("tests/infra/test_fake.py") in shared and Path("tests/infra/__init__.py") in shared
    assert Path("tests/infra/helper.py") not in shared
    pycs = [p for f in shared for p in shared_bytecode.bytecode_paths(tree / f) if p.is_file()]
    assert shared_bytecode.bytecode_paths(tree / tests[0])[1] in pycs  # pytest's, assertions rewritten
    before = {p: p.stat().st_mtime_ns for p in pycs}

    failed, output = test_mutations.run_checks(tree, tests, ("test_value",), True)
    assert failed == {"tests/infra/test_fake.py::test_value"}, output  # the copy's own helper.py ran
    assert str(template) not in output, output  # tracebacks name the copy's files
    assert {p: p.stat().st_mtime_ns for p in pycs} == before  # loaded as they were, not recompiled
    helper = shared_bytecode.bytecode_paths(tree / "tests" / "infra" / "helper.py")[0]
    code = marshal.loads(helper.read_bytes()[shared_bytecode.HEADER :])  # noqa: S302 - the nested run wrote it
    assert 2 in code.co_consts and code.co_filename == str(tree / "tests" / "infra" / "helper.py")
    failed, output = test_mutations.run_checks(template, tests, ("test_value",), False)
    assert not failed and "1 passed" in output, output


# --------------------------------------------------------------------------- runs forked from a zygote
@pytest.fixture
def zygotes(tmp_path: Path) -> Iterator[Any]:
    """A pool as the mutation suite makes it (tests/infra/mutation_zygote.py), closed afterwards."""
    from tests.infra import test_mutations
    from tests.infra.mutation_zygote import ZygotePool

    pool = ZygotePool(test_mutations.nested_env(tmp_path / "copy"), tmp_path / "zygote-runs")
    yield pool
    pool.close()
    assert all(zygote.process.poll() is not None for zygote in pool.every)  # none left running


def test_a_run_from_a_zygote_reports_what_a_process_of_its_own_reports(tmp_path, zygotes):
    """The verdicts of FAKE's runs (early stop included: the run's own environment reaches its
    plugin) are the same from a zygote's child, and one zygote serves the runs one after another."""
    from tests.infra import test_mutations

    tree = fake_tree(tmp_path, FAKE)
    args = (tree, ("tests/infra/test_fake.py",), ("test_a",), True)
    failed, output = test_mutations.run_checks(*args, popen=zygotes.popen)
    assert failed == {"tests/infra/test_fake.py::test_a[2]"}, output
    assert sorted(p.name for p in tree.glob("ran-*")) == ["ran-a1", "ran-a2"]  # stopped at the verdict
    for ran in tree.glob("ran-*"):
        ran.unlink()
    alone_failed, _ = test_mutations.run_checks(*args)  # a process of its own, as before
    assert alone_failed == failed and sorted(p.name for p in tree.glob("ran-*")) == ["ran-a1", "ran-a2"]
    failed, output = test_mutations.run_checks(
        tree, ("tests/infra/test_fake.py",), ("test_a", "test_b"), False, popen=zygotes.popen
    )
    assert failed == {"tests/infra/test_fake.py::test_a[2]", "tests/infra/test_fake.py::test_b"}, output
    assert len(zygotes.every) == 1


IMPORTS = """import os, sys
def test_the_run_is_a_fresh_pytest_in_its_copy():
    checkout = os.environ["CHECKOUT"]
    mine = [os.path.join(checkout, part) + os.sep for part in ("tests", "functions", "devstack", "tools", "infra")]
    loaded = sorted(name for name, module in list(sys.modules.items())
                    if name != "__main__"  # the zygote's script: the process's entry, no module of a tree
                    and (getattr(module, "__file__", None) or "").startswith(tuple(mine)))
    assert loaded == [], loaded  # nothing of the checkout (the zygote's own folder) was imported
    assert os.getcwd() == os.environ["TREE"] and sys.path[0] == os.environ["TREE"]
    assert sys.modules["tests.infra.test_fake"].__file__.startswith(os.environ["TREE"])
    assert "SAFESEND_MUTATION_NEEDLES" in os.environ and "COVERAGE_PROCESS_START" not in os.environ
"""


def test_a_zygotes_child_imports_the_copys_files_never_the_checkouts(tmp_path, zygotes, monkeypatch):
    """A mutated file must be read from the copy: the zygote (a file of this checkout) imports
    nothing of any tree before it forks, and the child runs in the copy as `python -m pytest`."""
    from tests.infra import test_mutations

    tree = fake_tree(tmp_path, IMPORTS)
    monkeypatch.setenv("CHECKOUT", str(ROOT))
    monkeypatch.setenv("TREE", str(tree))
    monkeypatch.setenv("COVERAGE_PROCESS_START", "pyproject.toml")  # the gate's: never reaches a run
    failed, output = test_mutations.run_checks(
        tree, ("tests/infra/test_fake.py",), ("test_the_run",), False, popen=zygotes.popen
    )
    assert not failed and "1 passed" in output, output


def test_a_zygote_run_that_crashes_is_reported_not_caught(tmp_path, zygotes):
    from tests.infra import test_mutations

    tree = fake_tree(tmp_path, "import os\nos._exit(3)\n")
    failed, output = test_mutations.run_checks(
        tree, ("tests/infra/test_fake.py",), ("test_a",), True, popen=zygotes.popen
    )
    assert not failed and " passed" not in output, output
    # the zygote outlived its child and serves the next run
    tree = fake_tree(tmp_path / "next", FAKE)
    failed, _ = test_mutations.run_checks(tree, ("tests/infra/test_fake.py",), ("test_b",), True, popen=zygotes.popen)
    assert failed == {"tests/infra/test_fake.py::test_b"} and len(zygotes.every) == 1


def test_a_zygote_run_that_hangs_is_interrupted_and_reported(tmp_path, zygotes):
    """As a process of its own: interrupted at its timeout (its fixtures tear down), reported as
    timed out, and the zygote (which ignores the interrupt) serves the next run."""
    from tests.infra import test_mutations

    tree = fake_tree(tmp_path, HANGS)
    started = time.monotonic()
    failed, output = test_mutations.run_checks(
        tree, ("tests/infra/test_fake.py",), ("test_a",), True, timeout=20, popen=zygotes.popen
    )
    assert time.monotonic() - started < 80
    assert not failed and output.startswith("TIMED OUT after 20 s"), output
    assert (tree / "started").exists() and (tree / "torn-down").exists()
    tree = fake_tree(tmp_path / "next", FAKE)
    failed, _ = test_mutations.run_checks(tree, ("tests/infra/test_fake.py",), ("test_b",), True, popen=zygotes.popen)
    assert failed == {"tests/infra/test_fake.py::test_b"} and len(zygotes.every) == 1


def test_the_zygote_runs_pytest_only(tmp_path, zygotes):
    with pytest.raises(ValueError, match="pytest only"):
        zygotes.popen(["/bin/sh", "-c", "true"], cwd=tmp_path, env={})


def test_an_answer_that_came_with_the_one_before_is_not_waited_for():
    """A run that ends at once: its pid and its exit status reach the pipe together. A buffered reader
    took both on the first read, select() then saw nothing, and the run waited out its timeout."""
    from tests.infra.mutation_zygote import LineChannel

    read_end, write_end = os.pipe()
    try:
        os.write(write_end, b'{"pid": 7}\n{"status": 3}\n')
        answers = LineChannel(read_end)
        started = time.monotonic()
        assert [answers.read_line(5), answers.read_line(5)] == ['{"pid": 7}', '{"status": 3}']
        assert time.monotonic() - started < 1
        assert answers.read_line(0.1) is None  # nothing more: None at the timeout
        os.close(write_end)
        write_end = -1
        with pytest.raises(OSError, match="closed"):
            answers.read_line(5)
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)
