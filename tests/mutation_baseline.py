"""The gate runs the mutation suite's baseline checks once, not twice (issue 21.5).

The mutation suite (tests/infra/test_mutations.py) first runs, in an unmutated scratch copy of the
repository, every test a mutation's needles name, and fails unless they pass: a mutation "caught" by
a broken copy proves nothing. The main suite ran those same ~300 tests of tests/infra again on the
checkout, whose files the copy holds byte for byte (`terraform test` of the module, the gcloud
pipeline, the policy matrix): ~125 CPU-s each time (2-core machine, 2026-12-02), about a twelfth of
the gate.

In the full gate (scripts/test.sh) they run once, in the copy:
- ``python -m tests.mutation_baseline FILE`` collects the baseline's tests on the checkout (the
  mutation suite's own selection: its test files, ``-k`` of every needle) and writes their node ids,
  one a line, before either suite starts;
- the main suite, given ``--mutation-baseline-ids=FILE``, deselects exactly those ids and says so in
  its summary;
- the mutation suite, given the same option, runs exactly those ids in its copy, and its baseline
  test fails unless every one of them passed (an id the copy lacks is a collection error there).
Without the option (a plain `pytest`, `--fast`, the mutation suite run alone) nothing changes:
every test runs where it always did.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

OPTION = "--mutation-baseline-ids"
ROOT = Path(__file__).resolve().parents[1]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        OPTION,
        metavar="FILE",
        default=None,
        help="node ids (one a line, `python -m tests.mutation_baseline FILE`) that the mutation suite's "
        "baseline runs: the main suite deselects them, the mutation suite runs exactly them",
    )


class BaselineIdsError(RuntimeError):
    """The baseline's ids could not be collected or read: the gate must not guess which tests ran."""


def read_ids(path: str | os.PathLike[str]) -> list[str]:
    """The ids in FILE; an empty or missing list is an error (it would deselect nothing and make the
    baseline run every test of the copy, or none)."""
    try:
        ids = [line for line in Path(path).read_text().splitlines() if line.strip()]
    except OSError as exc:
        raise BaselineIdsError(f"{OPTION}: cannot read {path}: {exc}") from exc
    if not ids:
        raise BaselineIdsError(f"{OPTION}: {path} lists no test")
    return ids


def baseline_selection() -> tuple[tuple[str, ...], str]:
    """(the test files, the -k expression) of the mutation suite's baseline run."""
    from tests.infra.test_mutations import MUTATIONS, keyword

    files = tuple(sorted({t for m in MUTATIONS for t in m.tests}))
    return files, keyword(n for m in MUTATIONS for n in m.fails)


def parse_collected(output: str) -> list[str]:
    """The node ids `pytest --collect-only -q` printed (its summary line has no "::")."""
    return [line.strip() for line in output.splitlines() if "::" in line and not line.startswith(" ")]


def collect_ids(root: Path = ROOT, timeout_s: float = 300) -> list[str]:
    """The baseline's node ids, collected on the checkout with the plugins the copy's runs load."""
    files, expression = baseline_selection()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COVERAGE_"))}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # as the copy's runs (test_mutations.nested_env)
    command = [sys.executable, "-m", "pytest", "-p", "pytest_timeout", "-p", "no:cacheprovider"]
    command += ["--collect-only", "-q", "-k", expression, *files]
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    ids = parse_collected(done.stdout)
    if done.returncode != 0 or not ids:
        raise BaselineIdsError(f"collecting the baseline's tests failed ({done.returncode}):\n{done.stdout[-3000:]}")
    return ids


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    path = config.getoption(OPTION)
    if not path:
        return
    elsewhere = set(read_ids(path))
    moved = [item for item in items if item.nodeid in elsewhere]
    if moved:
        config.hook.pytest_deselected(items=moved)
        items[:] = [item for item in items if item.nodeid not in elsewhere]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    path = config.getoption(OPTION)
    if path and not hasattr(config, "workerinput"):
        count = len(read_ids(path))
        terminalreporter.write_line(  # the same words in both runs of the gate
            f"mutation baseline: the {count} tests listed in {path} run once, in the mutation suite's "
            "baseline (its byte-identical scratch copy, where each one must pass), not in the main suite"
        )


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.mutation_baseline FILE", file=sys.stderr)
        return 2
    try:
        ids = collect_ids()
    except (BaselineIdsError, subprocess.TimeoutExpired) as exc:
        print(f"mutation_baseline: {exc}", file=sys.stderr)
        return 1
    Path(argv[0]).write_text("".join(f"{node}\n" for node in ids))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
