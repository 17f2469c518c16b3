"""pytest plugin: wall time per test module, to see where the gate's time goes (issue 21.5).

Enabled from tests/conftest.py. With ``--module-times=PATH`` the run writes a JSON object
``{module: seconds}`` (setup + call + teardown of each of its tests, so a module-scoped stack's start
and stop count for the module that asked for it, and a session emulator for the first module that
used it) and prints the slowest modules in the summary. Under pytest-xdist the workers' reports reach
the controller, which adds them up: the numbers are worker time, not the run's wall time.

Beside it, ``<PATH stem>.timeline.json`` says when each scheduling group ran (a module, or one test
of a split module: tests/scheduling.py): its worker, its first test's start and its last test's end
in seconds from the run's start; the summary lists the groups that ended last. It shows the tail of
a parallel run: which groups still ran while cores sat idle.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from tests.scheduling import group_of

SHOWN = 25  # modules listed in the summary; the file has them all
SHOWN_LAST = 8  # modules listed in the summary's "ended last"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--module-times",
        metavar="PATH",
        default=None,
        help="write each test module's total time (setup + call + teardown) as JSON to PATH",
    )


class ModuleTimes:
    """Adds up the reported phase durations per module, and notes when each module ran; the
    controller writes and prints them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.spans: dict[str, list[float]] = {}  # group: [first start, last stop] (epoch seconds)
        self.workers: dict[str, str] = {}  # group: the xdist worker that ran it ("-" in a serial run)
        self.started = time.time()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid.split("::", 1)[0]] += report.duration
        group = group_of(report.nodeid)
        span = self.spans.setdefault(group, [report.start, report.stop])
        span[0], span[1] = min(span[0], report.start), max(span[1], report.stop)
        node = getattr(report, "node", None)  # set by xdist on the controller
        self.workers[group] = getattr(getattr(node, "gateway", None), "id", "-")

    def timeline(self) -> list[dict[str, Any]]:
        rows = [
            {
                "group": group,
                "worker": self.workers.get(group, "-"),
                "start_s": round(start - self.started, 1),
                "end_s": round(stop - self.started, 1),
            }
            for group, (start, stop) in self.spans.items()
        ]
        return sorted(rows, key=lambda row: row["start_s"])

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        times = sorted(self.seconds.items(), key=lambda item: -item[1])
        self.path.write_text(json.dumps({module: round(s, 2) for module, s in times}, indent=1) + "\n")
        timeline = self.timeline()
        timeline_path = self.path.with_name(f"{self.path.stem}.timeline.json")
        timeline_path.write_text(json.dumps(timeline, indent=1) + "\n")
        terminalreporter.section("time per module (setup + call + teardown)")
        for module, seconds in times[:SHOWN]:
            terminalreporter.write_line(f"{seconds:9.1f}s  {module}")
        total = sum(self.seconds.values())
        terminalreporter.write_line(f"{total:9.1f}s  in all {len(times)} modules (all in {self.path})")
        terminalreporter.write_line(f"ended last (from the run's start; all in {timeline_path}):")
        for row in sorted(timeline, key=lambda row: -row["end_s"])[:SHOWN_LAST]:
            terminalreporter.write_line(
                f"{row['start_s']:9.1f}s to {row['end_s']:7.1f}s  {row['worker']:>4}  {row['group']}"
            )


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("module_times")
    if path and not hasattr(config, "workerinput"):  # not on an xdist worker: its controller adds up
        config.pluginmanager.register(ModuleTimes(Path(path)), "safesend-module-times")
