"""End to end: the four functions (functions-framework) + Firestore, Pub/Sub and Cloud Tasks emulators
+ the Gmail simulator behind the fault relay, driven over HTTP like n8n drives production.

Every "how many emails" assertion reads the simulator's acceptance log (Gmail's side),
never a counter of ours. Timings are shortened (send timeout 2 s, index lag 1 s, unknown
window 3 s, lease 5 s) so a full reconcile cycle takes seconds. Crashes are real: the
X-Safesend-Fault header makes the functions worker process exit at that point.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests
from google.cloud import pubsub_v1

from devstack.stack import LocalStack
from tests.emulator_fixtures import SharedEmulators

pytestmark = [pytest.mark.integration, pytest.mark.functions_out_of_process]
SETTLED = {"sent", "review", "failed", "cancelled"}


@pytest.fixture(scope="module")
def stack(shared_emulators: SharedEmulators) -> Iterator[LocalStack]:
    with shared_emulators.stack_for("stack") as running:
        yield running


@pytest.fixture(autouse=True)
def clean_relay(stack: LocalStack) -> Iterator[None]:
    stack.relay.set_mode("forward-and-respond")
    yield
    stack.relay.set_mode("forward-and-respond")


class Client:
    """What n8n's HTTP Request node does, with bounded waits."""

    def __init__(self, stack: LocalStack):
        self.stack = stack
        self.url = stack.url

    def job(self, channel: str = "transactional", **overrides: Any) -> dict[str, Any]:
        return {
            "customer_id": f"cust-{uuid.uuid4().hex[:10]}",
            "event_type": "order_paid",
            "order_id": "1001",
            "channel": channel,
            "to": ["ann@example.com"],
            "subject": "Your receipt",
            "text": "Thanks for your order.",
            **overrides,
        }

    def send(self, body: dict[str, Any], fault: str | None = None, timeout: float = 30) -> requests.Response:
        headers = {**self.stack.caller_headers(), **({"X-Safesend-Fault": fault} if fault else {})}
        return requests.post(f"{self.url}/send", json=body, headers=headers, timeout=timeout)

    def get(self, path: str, params: dict[str, Any]) -> requests.Response:
        return requests.get(f"{self.url}{path}", params=params, headers=self.stack.caller_headers(), timeout=10)

    def status(self, job_id: str) -> dict[str, Any]:
        response = self.get("/status", {"job_id": job_id})
        assert response.status_code == 200, response.text
        return response.json()

    def sweep(self) -> dict[str, Any]:
        response = self._retrying(
            lambda: requests.post(f"{self.url}/sweep", json={}, timeout=60, headers=self.stack.internal_headers())
        )
        assert response.status_code == 200, response.text
        return response.json()

    def wait_for(self, job_id: str, states: set[str], timeout_s: float = 30, sweep: bool = False) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            if sweep:
                self.sweep()
            current = self._retrying(lambda: self.get("/status", {"job_id": job_id}))
            view = current.json() if current.status_code == 200 else {"state": None}
            if view["state"] in states:
                return view
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} still {view.get('state')} after {timeout_s}s: {view}")
            time.sleep(0.5)

    @staticmethod
    def _retrying(call, tries: int = 20):
        """The worker may be restarting after an injected crash: connection errors are retried."""
        for attempt in range(tries):
            try:
                return call()
            except requests.ConnectionError:
                if attempt == tries - 1:
                    raise
                time.sleep(0.5)

    def effects(self, message_id: str) -> int:
        return sum(1 for e in self.stack.sim.effects() if e["message_id"] == message_id)


@pytest.fixture
def n8n(stack: LocalStack) -> Client:
    return Client(stack)


def job_id_of(body: dict[str, Any]) -> str:
    from safesend.core.keys import compose_dedup_key, job_id_for

    return job_id_for(compose_dedup_key(body["customer_id"], body["event_type"], body["order_id"]))


# --------------------------------------------------------------------------- the article's three asserts
def test_retry_with_the_same_key_gives_exactly_one_effect(n8n):
    body = n8n.job()
    first = n8n.send(body)
    assert first.status_code == 200 and first.json()["state"] == "sent"
    for _ in range(4):  # n8n Retry On Fail, or a re-run of the workflow
        again = n8n.send(body)
        assert again.status_code == 200
        assert again.json()["replayed"] is True and again.json()["provider_ref"] == first.json()["provider_ref"]
    assert n8n.effects(first.json()["message_id"]) == 1


def test_dropped_response_gives_no_duplicate_and_ends_sent(n8n, stack):
    stack.relay.set_mode("forward-then-drop-response", count=1, delay_s=6)
    body = n8n.job()
    response = n8n.send(body)
    assert response.status_code == 202 and response.json()["state"] == "unknown"
    view = n8n.wait_for(response.json()["job_id"], SETTLED)  # Cloud Tasks emulator calls reconcile
    assert view["state"] == "sent"
    assert view["provider_ref"]["gmail_id"]
    assert {"found_in_history", "found_in_mailbox"} & {e["kind"] for e in view["events"]}
    assert n8n.effects(view["message_id"]) == 1


def test_ambiguous_job_on_a_review_channel_lands_in_review_and_is_never_resent(n8n, stack, monkeypatch):
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", stack.emulators.pubsub.host)
    subscriber = pubsub_v1.SubscriberClient()
    stack.relay.set_mode("fail-before-forward", count=1)  # Gmail never got it; we cannot know that
    body = n8n.job(channel="payments")
    response = n8n.send(body)
    assert response.status_code == 202 and response.json()["state"] == "unknown"
    job_id = response.json()["job_id"]
    view = n8n.wait_for(job_id, SETTLED)
    assert (view["state"], view["review_reason"]) == ("review", "ambiguous")
    item = pull_review_item(subscriber, stack.subscription_path, job_id)
    assert item["attributes"] == {
        "job_id": job_id,
        "reason": "ambiguous",
        "channel": "payments",
        "review_id": f"{job_id}:1",
    }
    data = item["data"]
    assert data["message_id"] == view["message_id"] and data["recipients"]["to"] == ["ann@example.com"]
    assert data["subject"] == "Your receipt" and "Thanks for your order." not in json.dumps(data)
    assert data["gmail_search_url"].startswith("https://mail.google.com/mail/")
    assert data["history"][0]["kind"] == "attempt_started" and data["last_error"]["bucket"] == "maybe_accepted"
    for _ in range(3):  # time passes, sweeps run, n8n retries: still nothing is sent
        time.sleep(1)
        n8n.sweep()
        assert n8n.send(body).json()["state"] == "review"
    assert n8n.effects(view["message_id"]) == 0
    assert n8n.status(job_id)["attempts"] == 1
    subscriber.close()


def pull_review_item(subscriber, subscription: str, job_id: str, timeout_s: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        response = subscriber.pull(subscription=subscription, max_messages=20, timeout=5)
        if response.received_messages:
            subscriber.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in response.received_messages])
        for received in response.received_messages:
            if received.message.attributes.get("job_id") == job_id:
                return {"data": json.loads(received.message.data), "attributes": dict(received.message.attributes)}
    raise AssertionError(f"no review item for {job_id} within {timeout_s}s")


# --------------------------------------------------------------------------- the relay's fault modes
def test_fail_before_forward_on_a_retry_channel_resends_once_after_the_window(n8n, stack):
    stack.relay.set_mode("fail-before-forward", count=1)
    response = n8n.send(n8n.job())
    assert response.status_code == 202
    view = n8n.wait_for(response.json()["job_id"], SETTLED)
    assert view["state"] == "sent" and view["attempts"] == 2
    assert n8n.effects(view["message_id"]) == 1


def test_connection_closed_after_forward_is_not_silently_resent(n8n, stack):
    stack.relay.set_mode("close-after-forward", count=1)
    response = n8n.send(n8n.job())
    assert response.status_code == 202 and response.json()["last_error"]["code"] == "disconnected_after_write"
    view = n8n.wait_for(response.json()["job_id"], SETTLED)
    assert view["state"] == "sent" and view["attempts"] == 1
    assert n8n.effects(view["message_id"]) == 1


def test_gmail_5xx_is_reconciled_not_retried(n8n, stack):
    stack.relay.set_mode("forward-then-5xx", count=1)
    response = n8n.send(n8n.job())
    assert response.status_code == 202 and response.json()["last_error"]["status"] == 503
    view = n8n.wait_for(response.json()["job_id"], SETTLED)
    assert view["state"] == "sent" and view["attempts"] == 1
    assert n8n.effects(view["message_id"]) == 1


def test_rate_limit_is_retried_within_the_request(n8n, stack):
    stack.relay.set_mode("429-before-forward", count=1)
    response = n8n.send(n8n.job())
    assert response.status_code == 200 and response.json()["attempts"] == 2
    assert n8n.effects(response.json()["message_id"]) == 1


def test_permanent_gmail_refusal_fails_with_422_and_is_replayed(n8n, stack):
    stack.sim.inject_errors(400, count=1, reason="invalidArgument")
    body = n8n.job()
    response = n8n.send(body)
    assert response.status_code == 422 and response.json()["state"] == "failed"
    again = n8n.send(body)
    assert again.status_code == 422 and again.json()["replayed"] is True
    assert n8n.effects(response.json()["message_id"]) == 0


# --------------------------------------------------------------------------- duplicates and crashes
def test_ten_concurrent_duplicate_webhooks_give_one_effect(n8n):
    body = n8n.job()
    with ThreadPoolExecutor(max_workers=10) as pool:
        responses = list(pool.map(lambda _: n8n.send(body), range(10)))
    assert all(r.status_code in (200, 202) for r in responses), [r.text for r in responses]
    assert sum(1 for r in responses if r.json()["replayed"] is False) == 1
    view = n8n.wait_for(responses[0].json()["job_id"], SETTLED)
    assert view["state"] == "sent"
    assert n8n.effects(view["message_id"]) == 1


@pytest.mark.parametrize("fault, expected_attempts", [("after_claim", 2), ("after_send", 1)])
def test_a_crash_recovers_through_the_sweeper_with_one_effect(n8n, fault, expected_attempts):
    body = n8n.job()
    with pytest.raises(requests.ConnectionError):
        n8n.send(body, fault=fault)  # the worker process dies mid-request
    job_id = job_id_of(body)
    view = n8n.wait_for(job_id, SETTLED, timeout_s=45, sweep=True)  # Cloud Scheduler's sweeps
    assert view["state"] == "sent" and view["attempts"] == expected_attempts
    kinds = [e["kind"] for e in view["events"]]
    assert "outcome_unknown" in kinds  # recovered from an expired lease, not resent blind
    assert n8n.effects(view["message_id"]) == 1


def test_duplicated_cloud_tasks_delivery_changes_nothing(n8n, stack):
    stack.relay.set_mode("forward-then-drop-response", count=1, delay_s=6)
    response = n8n.send(n8n.job())
    job_id = response.json()["job_id"]
    settled = n8n.wait_for(job_id, SETTLED)
    for step in ("a1-c0", "a1-c0", "a1-c1"):  # at-least-once delivery, and a late stale task
        redelivered = requests.post(
            f"{stack.url}/reconcile",
            json={"job_id": job_id, "step": step},
            timeout=30,
            headers=stack.internal_headers(),
        )
        assert redelivered.status_code == 200 and redelivered.json()["action"] == "nothing_to_do"
    after = n8n.status(job_id)
    assert after["updated_at"] == settled["updated_at"] and after["events"] == settled["events"]
    assert n8n.effects(settled["message_id"]) == 1


def test_two_overlapping_sweeps_do_no_harm(n8n, stack):
    stack.relay.set_mode("fail-before-forward", count=1)
    body = n8n.job()
    job_id = n8n.send(body).json()["job_id"]
    barrier = threading.Barrier(2)

    def sweep() -> dict[str, Any]:
        barrier.wait(timeout=10)
        return n8n.sweep()

    deadline = time.monotonic() + 30
    while n8n.status(job_id)["state"] not in SETTLED and time.monotonic() < deadline:
        with ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(lambda _: sweep(), range(2)))
    view = n8n.status(job_id)
    assert view["state"] == "sent" and view["attempts"] == 2
    assert n8n.effects(view["message_id"]) == 1


# --------------------------------------------------------------------------- the caller's mistakes
def test_invalid_request_is_400_naming_each_field(n8n):
    response = n8n.send({"channel": "transactional", "to": "not-an-address", "subject": "x\ny"})
    assert response.status_code == 400
    fields = response.json()["fields"]
    assert {"to", "subject", "text", "customer_id"} <= set(fields)


def test_unknown_channel_is_400(n8n):
    response = n8n.send(n8n.job(channel="no-such-channel"))
    assert response.status_code == 400 and "channel" in response.json()["fields"]


def test_same_key_with_a_different_payload_is_422(n8n):
    body = n8n.job()
    assert n8n.send(body).status_code == 200
    changed = {**body, "subject": "A different subject"}
    response = n8n.send(changed)
    assert response.status_code == 422 and response.json()["error"] == "payload_mismatch"


def test_status_by_dedup_key_and_unknown_job(n8n, stack):
    body = n8n.job()
    sent = n8n.send(body).json()
    by_key = n8n.get("/status", {k: body[k] for k in ("customer_id", "event_type", "order_id")})
    assert by_key.status_code == 200 and by_key.json()["job_id"] == sent["job_id"]
    assert [e["kind"] for e in by_key.json()["events"]][:2] == ["created", "attempt_started"]
    missing = n8n.get("/status", {"job_id": "0" * 32})
    assert missing.status_code == 404
