"""Pause this process's coverage tracer while a module marked `functions_out_of_process` or
`measured_elsewhere` runs.

Such a module runs the service in subprocesses (functions-framework under gunicorn, measured there
through [tool.coverage.run] patch=subprocess), or none of it (the infra checks), and in this process
only the harness: the simulators, relays, receivers, schemathesis, the webhook clients, the HCL
parser. None of that is in coverage's `source`, so the tracer measures nothing here, yet on Python
3.11 it still runs on every call of that code: the contract test's pytest process took 64 CPU-s with
the tracer on and 40 with it paused (31 without coverage at all; 2026-12-02, the 2-core test
machine), its functions' subprocesses measured the same either way. Tracing resumes after each
marked test, pass or fail, so unmarked tests (which do run functions/ in this process) are measured
as before. Without coverage running (`--fast`, a plain pytest run) this does nothing.

`measured_elsewhere` is for a module that does run functions/ here, but only code other tests
measure, at volume: the pacing benchmark's scenarios run the pacing core for thousands of simulated
sends (34 CPU-s traced, 21 untraced; 2026-12-03, the 2-core test machine), and the unit tests of
pacing and admission measure that code. The gate's coverage report shows whether that stays true.

A thread the harness starts while the tracer is paused stays untraced after it resumes (coverage
traces a thread from its start): a marked module must not leave threads running functions/ code for
later tests. The gate's coverage total (scripts/test.sh) would show it.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import coverage
import pytest

MARKERS = ("functions_out_of_process", "measured_elsewhere")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    cov = coverage.Coverage.current() if any(item.get_closest_marker(m) for m in MARKERS) else None
    if cov is None:
        return (yield)
    cov.stop()
    try:
        return (yield)
    finally:
        with warnings.catch_warnings():
            # A restart warns "already imported a file that will be measured" for every functions/
            # module: true of any restart, and no sign of a module measured too late (it was measured
            # from the process's start).
            warnings.simplefilter("ignore")
            cov.start()
