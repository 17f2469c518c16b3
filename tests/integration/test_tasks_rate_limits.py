"""The local Cloud Tasks emulator dispatches a queue with rate_limits as Cloud Tasks documents it
(devstack/task_pacing.py): a burst of max_burst_size, then max_dispatches_per_second, never more than
max_concurrent_dispatches in flight. Real HTTP tasks to a loopback receiver.

The pacing is checked on the emulator's grant times (its X-Devstack-Dispatch-Granted header, a
CLOCK_MONOTONIC second shared by both processes), not on arrival times: on a busy machine the threads
and the loopback between a grant and the receiver's handler bunch spaced dispatches together, which
says nothing about the pacer. Arrivals still prove every task was delivered, after its grant."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from google.api_core import exceptions as gexc

from devstack.tasks_emulator_main import GRANTED_HEADER
from tests.loopback_http import LoopbackHttpServer, QuietHandler

pytestmark = pytest.mark.integration


class SlowReceiver:
    """Records when each task was granted and arrived, and how many were in flight at once; answers
    after ``hold_s``."""

    def __init__(self, hold_s: float = 0.0) -> None:
        self.arrivals: list[float] = []
        self.grants: list[float | None] = []
        self.in_flight = 0
        self.max_in_flight = 0
        lock = threading.Lock()
        outer = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server calls it by this name
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                granted = self.headers.get(GRANTED_HEADER)
                with lock:
                    outer.arrivals.append(time.monotonic())
                    outer.grants.append(float(granted) if granted else None)
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                time.sleep(hold_s)
                with lock:
                    outer.in_flight -= 1
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.http = LoopbackHttpServer(Handler, "paced-receiver", backlog=64)  # a burst connects at once
        self.url = f"{self.http.url}/task"

    def wait_for(self, count: int, timeout_s: float = 20.0) -> list[float]:
        """The sorted grant times once ``count`` tasks arrived (fewer if the timeout passes first)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and len(self.arrivals) < count:
            time.sleep(0.02)
        grants = list(self.grants)
        assert None not in grants, "a paced dispatch came without its grant time"
        assert all(g is not None and g <= a for g, a in zip(grants, self.arrivals, strict=False))
        return sorted(g for g in grants if g is not None)


@pytest.fixture
def receiver_factory() -> Iterator[Any]:
    made: list[SlowReceiver] = []

    def make(hold_s: float = 0.0) -> SlowReceiver:
        made.append(SlowReceiver(hold_s))
        return made[-1]

    yield make
    for receiver in made:
        receiver.http.stop()


def paced_queue(tasks_emulator: Any, **rate_limits: Any) -> tuple[Any, str, Any]:
    client = tasks_emulator.client()
    path = tasks_emulator.queue_path(f"paced-{uuid.uuid4().hex[:8]}")
    client.create_queue(parent=tasks_emulator.location_path, queue={"name": path, "rate_limits": rate_limits})
    return client, path, client.get_queue(name=path)


def enqueue(client: Any, queue: str, url: str, count: int) -> None:
    """All ``count`` tasks at once: created while the queue is paused, then the queue resumes."""
    client.pause_queue(name=queue)
    for _ in range(count):
        client.create_task(parent=queue, task={"http_request": {"http_method": "POST", "url": url, "body": b"{}"}})
    client.resume_queue(name=queue)


def test_a_burst_then_the_rate(tasks_emulator: Any, receiver_factory: Any) -> None:
    receiver = receiver_factory()
    client, queue, shown = paced_queue(tasks_emulator, max_dispatches_per_second=1.0)
    assert shown.rate_limits.max_burst_size == 10  # derived, as Cloud Tasks documents for 1/s
    enqueue(client, queue, receiver.url, 12)
    arrivals = receiver.wait_for(12)
    assert len(arrivals) == 12
    first = arrivals[0]
    assert arrivals[9] - first < 0.8  # the full bucket: ten at once
    assert arrivals[10] - first >= 0.85  # then one token a second
    assert arrivals[11] - arrivals[10] >= 0.85


def test_a_fast_rate_never_exceeds_burst_plus_rate(tasks_emulator: Any, receiver_factory: Any) -> None:
    receiver = receiver_factory()
    client, queue, shown = paced_queue(tasks_emulator, max_dispatches_per_second=10.0)
    assert shown.rate_limits.max_burst_size == 2
    enqueue(client, queue, receiver.url, 14)
    arrivals = receiver.wait_for(14)
    assert len(arrivals) == 14
    for i, start in enumerate(arrivals):
        for j in range(i + 1, len(arrivals)):
            # a token bucket's bound, with 50 ms of slack for the dispatch threads and the loopback
            assert j - i + 1 <= 2 + 10.0 * (arrivals[j] - start + 0.05)
    assert arrivals[-1] - arrivals[0] >= (14 - 2) / 10.0 - 0.1  # and not faster overall


def test_at_most_max_concurrent_dispatches_in_flight(tasks_emulator: Any, receiver_factory: Any) -> None:
    receiver = receiver_factory(hold_s=0.4)
    client, queue, shown = paced_queue(tasks_emulator, max_dispatches_per_second=100.0, max_concurrent_dispatches=2)
    assert (shown.rate_limits.max_burst_size, shown.rate_limits.max_concurrent_dispatches) == (20, 2)
    enqueue(client, queue, receiver.url, 6)
    arrivals = receiver.wait_for(6)
    assert len(arrivals) == 6
    assert receiver.max_in_flight == 2  # two at a time: the rate alone would have sent all six at once
    assert arrivals[-1] - arrivals[0] >= 2 * 0.4 - 0.05


def test_out_of_range_rate_limits_are_refused(tasks_emulator: Any) -> None:
    with pytest.raises(gexc.InvalidArgument):
        paced_queue(tasks_emulator, max_dispatches_per_second=501.0)
