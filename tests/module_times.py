"""pytest plugin: wall time per test module, to see where the gate's time goes (issue 21.5).

Enabled from tests/conftest.py. With ``--module-times=PATH`` the run writes a JSON object
``{module: seconds}`` (setup + call + teardown of each of its tests, so a module-scoped stack's start
and stop count for the module that asked for it, and a session emulator for the first module that
used it) and prints the slowest modules in the summary. Under pytest-xdist the workers' reports reach
the controller, which adds them up: the numbers are worker time, not the run's wall time.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

SHOWN = 25  # modules listed in the summary; the file has them all


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--module-times",
        metavar="PATH",
        default=None,
        help="write each test module's total time (setup + call + teardown) as JSON to PATH",
    )


class ModuleTimes:
    """Adds up the reported phase durations per module; the controller writes and prints them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds: defaultdict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid.split("::", 1)[0]] += report.duration

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        times = sorted(self.seconds.items(), key=lambda item: -item[1])
        self.path.write_text(json.dumps({module: round(s, 2) for module, s in times}, indent=1) + "\n")
        terminalreporter.section("time per module (setup + call + teardown)")
        for module, seconds in times[:SHOWN]:
            terminalreporter.write_line(f"{seconds:9.1f}s  {module}")
        total = sum(self.seconds.values())
        terminalreporter.write_line(f"{total:9.1f}s  in all {len(times)} modules (all in {self.path})")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("module_times")
    if path and not hasattr(config, "workerinput"):  # not on an xdist worker: its controller adds up
        config.pluginmanager.register(ModuleTimes(Path(path)), "safesend-module-times")
