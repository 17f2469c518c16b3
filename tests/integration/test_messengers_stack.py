"""Issue 25 on the local stack: the messengers against the fake Google Chat / Slack webhooks and a
callback receiver (devstack/receiver.py) that goes down and comes back.

  1   an old `sent` notice never lands after the newer `review` one: the receiver ends on the truth
  3   a Chat webhook down past the callback horizon: retried, logged `reviewer_notice_overdue`, and
      exactly one card arrives once it is back
  10  a slow receiver and webhook while sweeps and reconcile calls race the deliverer: one post each

The stack's callback horizon is short here (CALLBACK_HORIZON_S), and a `sent` job is verified
within VERIFY_HORIZON_S, so a second copy makes it a duplicate in review within seconds.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from devstack.receiver import RecordingReceiver
from devstack.stack import LocalStack, StackConfig
from tests.emulator_fixtures import SharedEmulators
from tests.integration.test_stack import SETTLED, Client

pytestmark = [pytest.mark.integration, pytest.mark.functions_out_of_process]

CALLBACK_HORIZON_S = 10
VERIFY_HORIZON_S = 5


@pytest.fixture(scope="module")
def stack(shared_emulators: SharedEmulators) -> Iterator[LocalStack]:
    config = StackConfig()
    config.service_env = {
        **config.service_env,
        "SAFESEND_CALLBACK_HORIZON_S": str(CALLBACK_HORIZON_S),
        "SAFESEND_VERIFY_HORIZON_S": str(VERIFY_HORIZON_S),
    }
    with shared_emulators.stack_for("messengers", config) as running:
        yield running


@pytest.fixture
def n8n(stack: LocalStack) -> Client:
    return Client(stack)


@pytest.fixture
def receiver() -> Iterator[RecordingReceiver]:
    with RecordingReceiver() as running:
        yield running


@pytest.fixture
def webhooks(stack: LocalStack) -> Iterator[None]:
    """Each test leaves the shared fake webhooks up and quick."""
    yield
    for hook in (stack.chat, stack.slack):
        assert hook is not None
        hook.set_outage(None)
        hook.set_delay(0)


def landed(receiver: RecordingReceiver, path: str) -> list[dict]:
    return [r.json() for r in receiver.for_path(path)]


def second_copy(message_id: str) -> bytes:
    return (
        f"From: a@example.com\r\nTo: b@example.com\r\nSubject: x\r\nMessage-ID: {message_id}\r\n\r\nbody\r\n".encode()
    )


def test_an_old_sent_notice_never_lands_after_the_newer_review_one(stack, n8n, receiver):
    """Point 1: the receiver is down while the job is `sent`, then a second copy makes it a duplicate
    in review; the receiver comes back. It hears `review` only: the stale `sent` was superseded."""
    receiver.set_outage(503)
    stack.relay.set_mode("fail-before-forward", count=1)  # in doubt, resent after the window: verified later
    response = n8n.send(n8n.job(callback_url=f"{receiver.url}/wait/order"), timeout=60)
    job_id, message_id = response.json()["job_id"], response.json()["message_id"]
    view = n8n.wait_for(job_id, {"sent"}, timeout_s=30, sweep=True)
    assert view["verified"] is False
    assert stack.sim is not None
    stack.sim.insert_message(second_copy(message_id))  # the duplicate the verification will see
    view = n8n.wait_for(job_id, {"review"}, timeout_s=40, sweep=True)
    assert view["review_reason"] == "duplicate"
    time.sleep(1.5)  # the `sent` notice's next try (1, 2, 4 ... s) is due while the receiver is back
    receiver.set_outage(None)
    receiver.wait_for(lambda got: any(r.path == "/wait/order" for r in got), timeout_s=30)
    time.sleep(9)  # room for a stale `sent` to arrive after it (its backoff is at most 8 s here)
    states = [n["state"] for n in landed(receiver, "/wait/order")]
    assert states == ["review"], states
    final = n8n.status(job_id)
    assert final["state"] == "review"
    callbacks = [(c["outcome"], c["state"]) for c in final["callbacks"] if c["kind"] == "callback"]
    assert callbacks == [("sent", "given_up"), ("review", "delivered")]
    stale = next(c for c in final["callbacks"] if c["kind"] == "callback" and c["outcome"] == "sent")
    assert stale["last_error"].startswith("superseded by")


def test_a_chat_webhook_down_past_the_horizon_is_retried_raised_and_posts_one_card(stack, n8n, webhooks):
    """Point 3: Chat refuses every post for longer than the callback horizon. The card is never
    given up: it is logged `reviewer_notice_overdue` (for alerts), and lands once when Chat is back."""
    assert stack.chat is not None and stack.functions is not None
    stack.chat.set_outage(503)
    stack.relay.set_mode("fail-before-forward", count=1)  # a payments job in doubt: review
    job_id = n8n.send(n8n.job(channel="payments")).json()["job_id"]
    n8n.wait_for(job_id, {"review"}, timeout_s=45)
    log_path = stack.functions.log_path
    overdue = wait_for_log(log_path, "reviewer_notice_overdue", job_id, timeout_s=CALLBACK_HORIZON_S + 30)
    assert overdue["kind"] == "chat" and overdue["notice_id"].endswith(":chat")
    refused = [r for r in stack.chat.refused if job_id in r.body.decode()]
    assert len(refused) >= 4 and refused[-1].at - refused[0].at >= CALLBACK_HORIZON_S
    chat = next(c for c in n8n.status(job_id)["callbacks"] if c["notice_id"].endswith(":chat"))
    assert chat["state"] == "pending"
    stack.chat.set_outage(None)
    stack.chat.wait_for(lambda got: any(job_id in r.body.decode() for r in got), timeout_s=45)
    time.sleep(2)
    cards = [r for r in stack.chat.received if job_id in r.body.decode()]
    assert len(cards) == 1
    chat = next(c for c in n8n.status(job_id)["callbacks"] if c["notice_id"].endswith(":chat"))
    assert chat["state"] == "delivered"


def test_no_second_deliverer_posts_while_the_first_is_within_its_deadline(stack, n8n, receiver, webhooks):
    """Point 10: four executions of one job wait for callbacks at a receiver that answers in 2.5 s
    (a pass of 10 s), and the Chat / Slack webhooks answer in 3 s, while sweeps and reconcile calls
    hammer the job: every URL hears once, each webhook gets one card."""
    assert stack.chat is not None and stack.slack is not None
    receiver.set_delay(2.5)
    stack.chat.set_delay(3)
    stack.slack.set_delay(3)
    stack.relay.set_mode("fail-before-forward", count=1)
    body = n8n.job(channel="payments")
    urls = [f"{receiver.url}/wait/hold-{n}" for n in range(4)]
    job_id = n8n.send({**body, "callback_url": urls[0]}).json()["job_id"]
    for url in urls[1:]:
        n8n.send({**body, "callback_url": url})
    stop = threading.Event()
    calls = race_the_deliverer(stack, job_id, stop)
    try:
        n8n.wait_for(job_id, {"review"}, timeout_s=45)
        receiver.wait_for(lambda got: {r.path for r in got} >= {u.rsplit(receiver.url, 1)[1] for u in urls}, 60)
        stack.chat.wait_for(lambda got: any(job_id in r.body.decode() for r in got), timeout_s=45)
        stack.slack.wait_for(lambda got: any(job_id in r.body.decode() for r in got), timeout_s=45)
        time.sleep(4)  # a second deliverer would post within its own pass
    finally:
        stop.set()
        made = calls.result(timeout=60)
    assert made >= 10
    for url in urls:
        assert [n["state"] for n in landed(receiver, url.rsplit(receiver.url, 1)[1])] == ["review"]
    assert len([r for r in stack.chat.received if job_id in r.body.decode()]) == 1
    assert len([r for r in stack.slack.received if job_id in r.body.decode()]) == 1
    view = n8n.status(job_id)
    assert view["state"] in SETTLED and all(c["tries"] == 1 for c in view["callbacks"])


def race_the_deliverer(stack: LocalStack, job_id: str, stop: threading.Event) -> Future[int]:
    """Sweeps and reconcile calls for this job, two at a time every 0.3 s, until `stop` (bounded)."""

    def one(path: str, body: dict) -> None:
        with contextlib.suppress(requests.RequestException):  # a busy worker: the next call races again
            requests.post(f"{stack.url}{path}", json=body, headers=stack.internal_headers(), timeout=40)

    def loop() -> int:
        made = 0
        deadline = time.monotonic() + 120
        with ThreadPoolExecutor(max_workers=4) as pool:
            while not stop.is_set() and time.monotonic() < deadline:
                pool.submit(one, "/sweep", {})
                pool.submit(one, "/reconcile", {"job_id": job_id})
                made += 2
                stop.wait(0.3)
        return made

    return ThreadPoolExecutor(max_workers=1).submit(loop)


def wait_for_log(path: Path, event: str, job_id: str, timeout_s: float) -> dict:
    """The first structured log line of `event` for `job_id` in the functions' log (bounded wait)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if event in line and job_id in line:
                try:
                    return json.loads(line)
                except ValueError:
                    continue
        time.sleep(0.5)
    raise AssertionError(f"no {event} log for {job_id} within {timeout_s}s ({path})")
