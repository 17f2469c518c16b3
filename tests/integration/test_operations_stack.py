"""Issue 20 on the local stack: pause the Scheduler stand-in and /health reports the sweep late
after three intervals (the dead man's switch, watched turning red); make a duplicate and its
`duplicate_found` signal is printed once, by the real functions, in the shape the metrics read."""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from devstack.stack import LocalStack, StackConfig, SweepTicker, fetch_health
from safesend.core.signals import SIGNALS
from tests.emulator_fixtures import SharedEmulators
from tests.integration.test_never_silent_stack import wait_verified_or_review
from tests.integration.test_stack import Client

pytestmark = [pytest.mark.integration, pytest.mark.functions_out_of_process]
INTERVAL_S = 1.0
CAPTURE_ENV = "SAFESEND_SIGNAL_CAPTURE"  # append the stack's signal lines here (tests/infra/fixtures)


@pytest.fixture(scope="module")
def stack(shared_emulators: SharedEmulators) -> Iterator[LocalStack]:
    config = StackConfig()
    config.service_env = {
        **config.service_env,
        "SAFESEND_SWEEP_INTERVAL_S": f"{INTERVAL_S:g}",
        "SAFESEND_VERIFY_HORIZON_S": "8",
        "SAFESEND_HISTORY_CHECK_S": "0",
    }
    with shared_emulators.stack_for("operations", config) as running:
        yield running
        capture = os.environ.get(CAPTURE_ENV)
        if capture:
            with open(capture, "a", encoding="utf-8") as out:
                out.writelines(json.dumps(line) + "\n" for line in signal_lines(running))


def signal_lines(stack: LocalStack) -> list[dict[str, Any]]:
    """The JSON lines the functions printed that carry a signal's event."""
    assert stack.functions is not None
    found = []
    for raw in stack.functions.log_path.read_text(encoding="utf-8", errors="replace").splitlines():
        if raw.startswith("{") and '"event": "' in raw:
            found.append(json.loads(raw))
    return found


def _post(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(urllib.request.Request(url, data=b"", method="POST"), timeout=5) as response:
        return dict(json.loads(response.read()))


def _wait_status(stack: LocalStack, status: str, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        health = fetch_health(stack.url, stack.internal_headers())
        if health["status"] == status or time.monotonic() > deadline:
            return health
        time.sleep(0.25)


def test_a_paused_scheduler_turns_health_late_after_three_intervals(stack):
    ticker = SweepTicker(stack.url, INTERVAL_S, stack.internal_headers()).start()
    try:
        assert _wait_status(stack, "ok", 20)["status"] == "ok"
        assert _post(f"{ticker.control_url}/_scheduler/pause")["paused"] is True
        paused_at = time.monotonic()
        late = _wait_status(stack, "sweep_late", 20)
        assert late["status"] == "sweep_late" and late["last_sweep"]["late"] is True
        assert time.monotonic() - paused_at >= 2 * INTERVAL_S  # not before the intervals passed
        assert late["last_sweep"]["age_s"] >= 3 * INTERVAL_S  # shown rounded to 0.1 s; "late" used the exact age
        _post(f"{ticker.control_url}/_scheduler/resume")
        assert _wait_status(stack, "ok", 20)["status"] == "ok"
        sweeps = [line for line in signal_lines(stack) if line["event"] == "sweep_completed"]
        assert sweeps and set(SIGNALS["sweep_completed"].fields) <= set(sweeps[-1])
    finally:
        ticker.stop()


def test_a_duplicate_is_signalled_once(stack):
    n8n = Client(stack)
    stack.sim.set_index_lag(4)  # past the 3 s window: the resend lands a second copy (issue 8.1)
    stack.relay.set_mode("forward-then-5xx", count=1)
    try:
        response = n8n.send(n8n.job())
        job_id = response.json()["job_id"]
        view = wait_verified_or_review(n8n, job_id)
    finally:
        stack.relay.set_mode("forward-and-respond")
        stack.sim.set_index_lag(0.5)
    assert (view["state"], view["review_reason"]) == ("review", "duplicate")
    for _ in range(3):  # later sweeps and tasks must not signal it again
        n8n.sweep()
    duplicates = [line for line in signal_lines(stack) if line["event"] == "duplicate_found"]
    assert [line["job_id"] for line in duplicates] == [job_id]
    assert duplicates[0]["severity"] == "ERROR" and duplicates[0]["copies"] == 2
    reviews = [line for line in signal_lines(stack) if line["event"] == "job_needs_review"]
    assert any(line["job_id"] == job_id and line["reason"] == "duplicate" for line in reviews)
