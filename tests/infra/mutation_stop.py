"""A pytest plugin for the mutation suite's nested runs (tests/infra/test_mutations.py): the run
ends as soon as every needle of its mutation has failed in some test, and an interrupt (a hung
run's SIGINT) always reaches it.

The suite's verdict on a mutation is "each needle (a substring of a test id) names a failed
test"; once that holds, the tests still to run cannot change it, and a mutation of the deploy
configuration failed its first scenario, then ran nine more. A mutation that is not caught runs
every selected test, as before. Loaded with `-p tests.infra.mutation_stop` from the copy."""

from __future__ import annotations

import json
import os
import signal

import pytest

NEEDLES = "SAFESEND_MUTATION_NEEDLES"  # a JSON list; unset or empty: the plugin does nothing


class StopWhenCaught:
    """Counts the needles no failed test has matched yet; none left: the session stops."""

    def __init__(self, needles: list[str]) -> None:
        self.missing = set(needles)
        self.session: pytest.Session | None = None

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call" or not report.failed:
            return
        self.missing = {needle for needle in self.missing if needle not in report.nodeid}
        if not self.missing and self.session is not None:
            self.session.shouldstop = "every needle of the mutation failed"


def pytest_configure(config: pytest.Config) -> None:
    # scripts/test.sh runs the mutation suite in the background (`&`), where bash ignores SIGINT, and
    # an ignored SIGINT is inherited, so Python installs no KeyboardInterrupt handler: a hung run would
    # ignore run_checks' interrupt, be killed 30 s later and its fixtures would never tear down.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    needles = json.loads(os.environ.get(NEEDLES) or "[]")
    if needles:
        config.pluginmanager.register(StopWhenCaught(needles), "mutation-stop")
