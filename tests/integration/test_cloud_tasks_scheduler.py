"""CloudTasksScheduler against gcloud-tasks-emulator: real HTTP tasks dispatched to a local receiver.

The emulator lacks two behaviours of the real service, covered by focused tests here:
task-name dedup (the real API answers ALREADY_EXISTS) and the OIDC Authorization header.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.api_core import exceptions as gexc

from safesend.adapters.cloud_tasks import CloudTasksScheduler
from safesend.core.errors import SchedulerError
from tests.loopback_http import LoopbackHttpServer, QuietHandler


class Receiver:
    """A loopback HTTP endpoint that records what Cloud Tasks delivers."""

    def __init__(self) -> None:
        self.deliveries: list[dict[str, Any]] = []
        outer = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server calls it by this name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.deliveries.append(
                    {
                        "path": self.path,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "body": json.loads(body or b"{}"),
                        "at": time.time(),
                    }
                )
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.http = LoopbackHttpServer(Handler, "tasks-receiver")
        self.url = f"{self.http.url}/reconcile"

    def wait_for(self, count: int, timeout_s: float = 20.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and len(self.deliveries) < count:
            time.sleep(0.05)
        return list(self.deliveries)

    def stop(self) -> None:
        self.http.stop()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.stop()


@pytest.fixture
def queue(tasks_emulator) -> str:
    path = tasks_emulator.queue_path(f"reconcile-{uuid.uuid4().hex[:8]}")
    tasks_emulator.client().create_queue(parent=tasks_emulator.location_path, queue={"name": path})
    return path


def test_check_is_dispatched_at_its_time_with_job_and_step(tasks_emulator, queue, receiver):
    scheduler = CloudTasksScheduler(queue, receiver.url, emulator_host=tasks_emulator.host)
    at = datetime.now(UTC) + timedelta(seconds=1.5)
    scheduler.schedule_check("abc123", "a1-c0", at)
    assert receiver.deliveries == []  # not before its time
    [delivery] = receiver.wait_for(1)
    assert delivery["at"] >= at.timestamp() - 0.3
    assert delivery["body"] == {"job_id": "abc123", "step": "a1-c0"}
    assert delivery["headers"]["content-type"] == "application/json"
    assert delivery["headers"]["x-cloudtasks-taskname"] == "abc123-a1-c0"


def test_repeated_enqueue_is_delivered_twice_by_the_emulator_which_reconcile_must_tolerate(
    tasks_emulator, queue, receiver
):
    """The emulator has no name dedup: both copies arrive. The service-level duplicate-delivery
    tests (test_stack.py) prove reconcile is idempotent under exactly this."""
    scheduler = CloudTasksScheduler(queue, receiver.url, emulator_host=tasks_emulator.host)
    now = datetime.now(UTC)
    scheduler.schedule_check("dup1", "a1-c0", now)
    scheduler.schedule_check("dup1", "a1-c0", now)
    deliveries = receiver.wait_for(2)
    assert [d["body"]["job_id"] for d in deliveries] == ["dup1", "dup1"]


class RecordingClient:
    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.calls: list[dict[str, Any]] = []

    def create_task(self, parent: str, task: dict[str, Any], timeout: float) -> None:
        self.calls.append({"parent": parent, "task": task})
        if self.error:
            raise self.error


def test_already_exists_from_the_real_api_counts_as_scheduled():
    client = RecordingClient(gexc.AlreadyExists("task exists"))
    scheduler = CloudTasksScheduler("projects/p/locations/l/queues/q", "https://r.example/x", client=client)
    scheduler.schedule_check("job1", "a1-c0", datetime.now(UTC))  # must not raise
    assert client.calls[0]["task"]["name"] == "projects/p/locations/l/queues/q/tasks/job1-a1-c0"


def test_other_api_errors_become_scheduler_errors():
    scheduler = CloudTasksScheduler(
        "projects/p/locations/l/queues/q",
        "https://r.example/x",
        client=RecordingClient(gexc.ServiceUnavailable("down")),
    )
    with pytest.raises(SchedulerError):
        scheduler.schedule_check("job1", "a1-c0", datetime.now(UTC))


def test_task_carries_an_oidc_token_for_the_reconcile_url_when_configured():
    scheduler = CloudTasksScheduler(
        "projects/p/locations/l/queues/q",
        "https://reconcile.example/run",
        service_account_email="tasks@p.iam.gserviceaccount.com",
    )
    task = scheduler.build_task("job1", "a2-c3", datetime(2026, 11, 29, tzinfo=UTC))
    assert task["http_request"]["oidc_token"] == {
        "service_account_email": "tasks@p.iam.gserviceaccount.com",
        "audience": "https://reconcile.example/run",
    }
    assert task["name"].endswith("/tasks/job1-a2-c3")
    assert (
        CloudTasksScheduler("q", "u").build_task("j", "s", datetime.now(UTC))["http_request"].get("oidc_token") is None
    )


def test_names_differ_per_step_so_later_checks_are_never_deduplicated_away():
    scheduler = CloudTasksScheduler("projects/p/locations/l/queues/q", "https://r.example/x")
    names = {scheduler.task_name("job1", f"a{a}-c{c}") for a in range(1, 4) for c in range(5)}
    assert len(names) == 15


def test_unreachable_tasks_service_raises_scheduler_error():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    scheduler = CloudTasksScheduler(
        "projects/p/locations/l/queues/q", "http://127.0.0.1:1/x", emulator_host=dead, timeout_s=1.0
    )
    with pytest.raises(SchedulerError):
        scheduler.schedule_check("job1", "a1-c0", datetime.now(UTC))
