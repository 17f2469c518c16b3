"""Issue 9: callbacks and API keys on the real entry points (local stack with auth on), and the HTTP
notifier against real sockets: only allowed addresses are ever connected to, every POST is signed."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from devstack.chaos import find_gunicorn_worker
from devstack.receiver import RecordingReceiver, gzip_bomb
from devstack.stack import LocalStack
from safesend.adapters.callback_http import HttpNotifier
from safesend.adapters.chat_webhooks import chat_webhook
from safesend.core.auth import SIGNATURE_HEADER, verify_signature
from safesend.core.callbacks import CallbackPolicy
from tests.emulator_fixtures import SharedEmulators
from tests.integration.test_stack import SETTLED, Client

pytestmark = pytest.mark.integration


# --------------------------------------------------------------------------- the notifier alone
@pytest.fixture
def receiver() -> Iterator[RecordingReceiver]:
    with RecordingReceiver() as running:
        yield running


def test_a_notice_is_one_signed_post_with_the_exact_body(receiver):
    secret = b"s" * 32
    notifier = HttpNotifier(CallbackPolicy(frozenset({"127.0.0.1"}), allow_http=True), secret)
    body = json.dumps({"state": "sent", "job_id": "j"}).encode()
    result = notifier.post(f"{receiver.url}/webhook-waiting/7", body)
    assert result.ok and result.status == 200
    (got,) = receiver.received
    assert got.body == body and got.path == "/webhook-waiting/7"
    verify_signature(got.headers[SIGNATURE_HEADER], secret, got.body, time.time(), 60)


def test_a_host_that_resolves_to_a_private_address_is_never_connected_to(receiver):
    """SSRF: `localhost` is on the allowlist here, but its address is loopback: refused before connecting."""
    port = receiver.url.rsplit(":", 1)[1]
    notifier = HttpNotifier(CallbackPolicy(frozenset({"localhost"})), b"s" * 32)
    result = notifier.post(f"https://localhost:{port}/x", b"{}")
    assert not result.ok and result.status is None
    assert receiver.received == [] and receiver.refused == []


def test_a_refusal_is_reported_with_its_status(receiver):
    receiver.refuse_next(1, 404)
    notifier = HttpNotifier(CallbackPolicy(frozenset({"127.0.0.1"}), allow_http=True), b"s" * 32)
    result = notifier.post(f"{receiver.url}/x", b"{}")
    assert (result.ok, result.status) == (False, 404)


def test_a_retry_after_answer_is_reported_with_its_wait(receiver):
    receiver.refuse_next(1, 429, retry_after=120)
    notifier = HttpNotifier(CallbackPolicy(frozenset({"127.0.0.1"}), allow_http=True), b"s" * 32)
    result = notifier.post(f"{receiver.url}/x", b"{}")
    assert (result.ok, result.status, result.retry_after_s) == (False, 429, 120.0)
    webhook = chat_webhook(f"{receiver.url}/chat")
    receiver.refuse_next(1, 429, retry_after=30)
    result = webhook.deliver({"kind": "chat", "thread": "j", "payload": {"text": "x"}})
    assert (result.ok, result.status, result.retry_after_s) == (False, 429, 30.0)


# --------------------------------------------------------------------------- on the stack
@pytest.fixture(scope="module")
def stack(shared_emulators: SharedEmulators) -> Iterator[LocalStack]:
    with shared_emulators.stack_for("callbacks") as running:  # auth on: the API key of this run
        yield running


@pytest.fixture
def n8n(stack) -> Client:
    return Client(stack)


def notices(receiver: RecordingReceiver, path: str, count: int = 1, timeout_s: float = 30) -> list[dict]:
    got = receiver.wait_for(lambda items: len([r for r in items if r.path == path]) >= count, timeout_s)
    return [r.json() for r in got if r.path == path]


def callback_states(n8n: Client, job_id: str, until: list[str], timeout_s: float = 30) -> list[str]:
    """The job's callback states once they equal `until`, or as they stand when `timeout_s` runs out."""
    deadline = time.monotonic() + timeout_s
    while True:
        states = [c["state"] for c in n8n.status(job_id)["callbacks"]]
        if states == until or time.monotonic() >= deadline:
            return states
        time.sleep(0.25)


def test_without_the_api_key_the_local_stack_answers_401(stack, n8n):
    """Issue 9.6: the local stack runs with auth on by default, so a missing key shows up locally."""
    response = requests.post(f"{stack.url}/send", json=n8n.job(), timeout=10)
    assert response.status_code == 401 and "API key" in response.json()["message"]
    wrong = requests.post(
        f"{stack.url}/send", json=n8n.job(), timeout=10, headers={"Authorization": f"Bearer {stack.api_key[:-1]}x"}
    )
    assert wrong.status_code == 401


def test_the_workflow_hears_sent_after_a_dropped_gmail_response(stack, n8n, receiver):
    stack.relay.set_mode("forward-then-drop-response", count=1, delay_s=4)
    response = n8n.send(n8n.job(callback_url=f"{receiver.url}/wait/1"))
    assert response.status_code == 202 and response.json()["dedup_key"]
    assert "callback" in response.json()["message"]
    (notice,) = notices(receiver, "/wait/1")
    assert notice["state"] == "sent" and notice["job_id"] == response.json()["job_id"]
    got = receiver.for_path("/wait/1")[0]
    verify_signature(got.headers[SIGNATURE_HEADER], stack.callback_secret.encode(), got.body, time.time(), 120)
    assert n8n.effects(notice["message_id"]) == 1


def test_a_payments_job_in_doubt_tells_the_workflow_review(stack, n8n, receiver):
    stack.relay.set_mode("fail-before-forward", count=1)
    response = n8n.send(n8n.job(channel="payments", callback_url=f"{receiver.url}/wait/2"))
    (notice,) = notices(receiver, "/wait/2")
    assert (notice["state"], notice["review_reason"]) == ("review", "ambiguous")
    assert n8n.effects(response.json()["message_id"]) == 0


def test_a_callback_refused_until_the_workflow_waits_is_retried(stack, n8n, receiver):
    receiver.refuse_next(2, 409)  # n8n: the execution has not reached its Wait node yet
    response = n8n.send(n8n.job(callback_url=f"{receiver.url}/wait/3"))
    assert response.status_code == 200
    (notice,) = notices(receiver, "/wait/3", timeout_s=40)
    assert notice["state"] == "sent" and len(receiver.refused) == 2
    assert len({r.body for r in receiver.refused} | {receiver.for_path("/wait/3")[0].body}) == 1  # identical
    view = n8n.wait_for(response.json()["job_id"], SETTLED)
    # the receiver holds the POST before the worker has read the 200 and written `delivered`: wait for it
    assert callback_states(n8n, view["job_id"], until=["delivered"]) == ["delivered"]


def test_two_executions_of_one_key_both_resume_and_one_email_goes_out(stack, n8n, receiver):
    body = n8n.job()
    stack.relay.set_mode("forward-then-drop-response", count=1, delay_s=4)
    first = n8n.send({**body, "callback_url": f"{receiver.url}/wait/4a"})
    second = n8n.send({**body, "callback_url": f"{receiver.url}/wait/4b"})
    assert second.json()["replayed"] is True
    assert notices(receiver, "/wait/4a")[0]["state"] == notices(receiver, "/wait/4b")[0]["state"] == "sent"
    assert n8n.effects(first.json()["message_id"]) == 1


def test_a_callback_to_a_host_off_the_allowlist_is_a_400(stack, n8n):
    response = n8n.send(n8n.job(callback_url="https://attacker.example/x"))
    assert response.status_code == 400 and "allowlist" in response.json()["fields"]["callback_url"]


def test_a_callback_host_answering_a_gzip_bomb_costs_the_worker_no_memory(stack, n8n, receiver):
    """Issue 18.7 on the stack: the receiver answers the notice with ~500 KB of gzip that inflates to
    512 MiB. The worker asks for identity, reads a few KB, counts the 200, and its peak memory stays put."""
    worker = find_gunicorn_worker(stack.functions.pid)
    assert worker is not None
    gzip_bomb()  # built here, before the measurement (the receiver serves it from this process)
    Path(f"/proc/{worker}/clear_refs").write_text("5")  # reset the worker's peak RSS
    before = memory_kb(worker, "VmRSS")
    receiver.bomb_next(1)
    response = n8n.send(n8n.job(callback_url=f"{receiver.url}/wait/bomb"))
    (notice,) = notices(receiver, "/wait/bomb")
    assert notice["state"] == "sent"
    view = n8n.wait_for(response.json()["job_id"], SETTLED)
    assert callback_states(n8n, view["job_id"], until=["delivered"]) == ["delivered"], "bombed notice not recorded"
    assert find_gunicorn_worker(stack.functions.pid) == worker  # not crashed and respawned
    assert (memory_kb(worker, "VmHWM") - before) * 1024 < 128 * (1 << 20)


def memory_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"{field} missing for pid {pid}")


def test_a_receiver_down_with_retry_after_then_back_ends_on_the_jobs_state(stack, n8n, receiver):
    """Issue 25: the receiver answers 503 + Retry-After: 5 three times, then comes back. The tries
    wait as told, and the one notice that lands says what /status says."""
    receiver.refuse_next(3, 503, retry_after=5)
    response = n8n.send(n8n.job(callback_url=f"{receiver.url}/wait/5"))
    (notice,) = notices(receiver, "/wait/5", timeout_s=60)
    refused = [r.at for r in receiver.refused if r.path == "/wait/5"]
    assert len(refused) == 3 and all(b - a >= 4.9 for a, b in itertools.pairwise(refused))
    view = n8n.wait_for(response.json()["job_id"], SETTLED)
    assert notice["state"] == view["state"] and notice["verified"] == view["verified"]
