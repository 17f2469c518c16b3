"""The emulator set every LocalStack of a pytest process shares (tests/emulator_fixtures.py): two stacks
on it in their own projects see none of each other's documents, messages or queues, stopping one
leaves the other whole, and a dead emulator makes the next ``ready()`` start a working set."""

from __future__ import annotations

import os
import signal
import time
import uuid
from typing import Any

import pytest
from google.api_core import exceptions as gexc
from google.cloud import firestore, pubsub_v1

from devstack.emulators import EmulatorStack
from devstack.stack import LocalStack, StackConfig
from tests.emulator_fixtures import SharedEmulators
from tests.integration.test_stack import SETTLED, Client

pytestmark = pytest.mark.integration


@pytest.fixture
def emulator_env(shared_emulators: SharedEmulators, monkeypatch: pytest.MonkeyPatch) -> EmulatorStack:
    """The shared set, with this process's Google clients pointed at it."""
    emulators = shared_emulators.ready()
    for name, value in emulators.env().items():
        monkeypatch.setenv(name, value)
    return emulators


def settled_job(stack: LocalStack) -> str:
    client = Client(stack)
    response = client.send(client.job())
    assert response.status_code in (200, 202), response.text
    job_id: str = response.json()["job_id"]
    assert client.wait_for(job_id, SETTLED)["state"] == "sent"
    return job_id


def job_ids(project: str) -> set[str]:
    """The jobs stored in `project` (the service's collection, functions/safesend/adapters/firestore_store.py)."""
    db = firestore.Client(project=project)
    try:
        return {doc.id for doc in db.collection("ai_jobs").list_documents()}
    finally:
        db.close()


def queue_names(emulators: EmulatorStack, stack: LocalStack) -> set[str]:
    return {queue.name for queue in emulators.tasks.client().list_queues(parent=stack.tasks_location_path)}


def pulled(subscriber: Any, subscription: str, timeout_s: float = 5.0) -> list[bytes]:
    """Every message waiting on `subscription`, acknowledged; an empty pull after `timeout_s` ends it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            response = subscriber.pull(subscription=subscription, max_messages=20, timeout=2)
        except gexc.DeadlineExceeded:  # nothing came within this pull's timeout
            continue
        if response.received_messages:
            subscriber.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in response.received_messages])
            return [m.message.data for m in response.received_messages]
    return []


def test_two_stacks_on_the_shared_emulators_see_none_of_each_others_data(
    shared_emulators: SharedEmulators, emulator_env: EmulatorStack
) -> None:
    a = shared_emulators.stack_for("apart-a", StackConfig(reviewers=False))
    with shared_emulators.stack_for("apart-b", StackConfig(reviewers=False)) as b:
        try:
            a.start()
            assert a.project != b.project and a.emulators is b.emulators is emulator_env
            job_a, job_b = settled_job(a), settled_job(b)
            assert Client(b).get("/status", {"job_id": job_a}).status_code == 404
            assert Client(a).get("/status", {"job_id": job_b}).status_code == 404
            assert job_ids(a.project) == {job_a} and job_ids(b.project) == {job_b}
            assert queue_names(emulator_env, a) == {a.queue_path} and queue_names(emulator_env, b) == {b.queue_path}
            publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
            try:
                mark = uuid.uuid4().hex.encode()
                publisher.publish(a.topic_path, mark).result(timeout=10)
                assert pulled(subscriber, b.subscription_path, timeout_s=3.0) == []
                assert pulled(subscriber, a.subscription_path) == [mark]
            finally:
                subscriber.close()
        finally:
            a.stop()  # releases project a only: b keeps its queue, its jobs and its service
        assert queue_names(emulator_env, a) == set() and job_ids(a.project) == set()
        assert queue_names(emulator_env, b) == {b.queue_path} and job_ids(b.project) == {job_b}
        assert Client(b).status(job_b)["state"] == "sent"


def test_a_dead_shared_emulator_makes_the_next_ready_start_a_working_set(
    shared_emulators: SharedEmulators, emulator_env: EmulatorStack
) -> None:
    dead = emulator_env.pubsub
    assert dead.pgid is not None
    os.killpg(dead.pgid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while dead.is_running() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not dead.is_running()

    fresh = shared_emulators.ready()
    assert fresh is not emulator_env and all(e.is_running() for e in fresh.emulators)
    assert all(not e.is_running() for e in emulator_env.emulators)  # the old set is stopped, none leaks
    with shared_emulators.stack_for("revived", StackConfig(reviewers=False)) as stack:
        assert stack.emulators is fresh
        settled_job(stack)
