"""Issue 8 end to end: the reproductions, on the real entry points with every emulator, the Gmail
simulator and the fault relay. The acceptance log (the simulator's effects) is the truth.

This stack uses a Message-ID domain of 35 characters (`notifications.mail.example-shop.com`), the
length that used to fold the header and turn every send into a 500 (8.4), and a verification
horizon of 8 s so a second copy is looked for within the test.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from google.cloud import pubsub_v1

from devstack.stack import LocalStack, StackConfig
from tests.emulator_fixtures import SharedEmulators
from tests.integration.test_stack import SETTLED, Client, pull_review_item

pytestmark = [pytest.mark.integration, pytest.mark.functions_out_of_process]
DOMAIN = "notifications.mail.example-shop.com"


@pytest.fixture(scope="module")
def stack(shared_emulators: SharedEmulators) -> Iterator[LocalStack]:
    config = StackConfig()
    # The change log off: these reproductions are about the search path (with it, the 8.1 copy is
    # found in seconds and no resend happens at all: tests/integration/test_history_stack.py).
    config.service_env = {
        **config.service_env,
        "SAFESEND_MESSAGE_ID_DOMAIN": DOMAIN,
        "SAFESEND_VERIFY_HORIZON_S": "8",
        "SAFESEND_HISTORY_CHECK_S": "0",
    }
    with shared_emulators.stack_for("never-silent", config) as running:
        yield running


@pytest.fixture(autouse=True)
def clean(stack: LocalStack) -> Iterator[None]:
    stack.relay.set_mode("forward-and-respond")
    stack.sim.set_index_lag(0.5)
    yield
    stack.relay.set_mode("forward-and-respond")
    stack.sim.set_index_lag(0.5)


@pytest.fixture
def n8n(stack: LocalStack) -> Client:
    return Client(stack)


@pytest.fixture
def subscriber(stack: LocalStack, monkeypatch) -> Iterator[Any]:
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", stack.emulators.pubsub.host)
    client = pubsub_v1.SubscriberClient()
    yield client
    client.close()


def wait_verified_or_review(n8n: Client, job_id: str, timeout_s: float = 45) -> dict[str, Any]:
    """Until the job is settled with nothing left to check (verification included)."""
    deadline = time.monotonic() + timeout_s
    while True:
        view = n8n.wait_for(job_id, SETTLED, timeout_s=max(1.0, deadline - time.monotonic()), sweep=True)
        if view["next_check_at"] is None and (view["state"] != "sent" or view["verified"] is not None):
            return view
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} still has a check due after {timeout_s}s: {view}")
        time.sleep(0.5)


def test_a_long_message_id_domain_sends(n8n):
    """8.4: before the fix every job on this domain answered 500 and nothing reached Gmail."""
    response = n8n.send(n8n.job())
    assert response.status_code == 200, response.text
    assert response.json()["message_id"].endswith(f"@{DOMAIN}>")
    assert response.json()["verified"] is True
    assert n8n.effects(response.json()["message_id"]) == 1


def test_past_the_window_a_resent_copy_is_found_and_reaches_a_human(n8n, stack, subscriber):
    """8.1 reproduction: index lag 4 s > window 3 s, Gmail accepts and answers 503 once.
    Before: `sent`, attempts 2, two copies, no review item."""
    stack.sim.set_index_lag(4)
    stack.relay.set_mode("forward-then-5xx", count=1)
    response = n8n.send(n8n.job())
    assert response.status_code == 202 and response.json()["state"] == "unknown"
    job_id = response.json()["job_id"]
    view = wait_verified_or_review(n8n, job_id)
    assert n8n.effects(view["message_id"]) == 2 and view["attempts"] == 2
    assert (view["state"], view["review_reason"]) == ("review", "duplicate")
    item = pull_review_item(subscriber, stack.subscription_path, job_id)
    assert item["attributes"]["reason"] == "duplicate" and len(item["data"]["known_copies"]) == 2


def test_inside_the_window_a_resend_is_verified_with_one_copy(n8n, stack):
    stack.relay.set_mode("fail-before-forward", count=1)  # never reached Gmail: we cannot know that
    response = n8n.send(n8n.job())
    assert response.status_code == 202
    view = wait_verified_or_review(n8n, response.json()["job_id"])
    assert (view["state"], view["verified"], view["attempts"]) == ("sent", True, 2)
    kinds = [e["kind"] for e in n8n.status(view["job_id"])["events"]]
    assert kinds.count("verification_checked") == 2 and kinds[-1] == "verified"
    assert n8n.effects(view["message_id"]) == 1


def test_a_trickled_answer_is_cut_at_the_send_deadline(n8n, stack):
    """8.3: a server dribbling its answer kept a send open far past its timeout."""
    stack.relay.set_mode("trickle-response", count=1, delay_s=0.4)
    started = time.monotonic()
    response = n8n.send(n8n.job())
    elapsed = time.monotonic() - started
    assert response.status_code == 202 and response.json()["last_error"]["code"] == "timeout"
    assert elapsed < 2 + 1.5, f"the send took {elapsed:.1f} s with a 2 s deadline"
    view = wait_verified_or_review(n8n, response.json()["job_id"])
    assert (view["state"], view["attempts"]) == ("sent", 1)
    assert n8n.effects(view["message_id"]) == 1


def test_rate_limits_do_not_burn_the_job(n8n, stack):
    """8.13: three quick 429s used to end the job `failed` (422) for ever."""
    stack.relay.set_mode("429-before-forward", count=3)
    body = n8n.job()
    response = n8n.send(body)
    assert response.status_code == 202 and response.json()["state"] == "retry_wait", response.text
    assert int(response.headers["Retry-After"]) >= 1
    view = wait_verified_or_review(n8n, response.json()["job_id"])
    assert (view["state"], view["verified"], view["attempts"]) == ("sent", True, 4)
    assert n8n.send(body).status_code == 200
    assert n8n.effects(view["message_id"]) == 1


@pytest.mark.parametrize(
    "field, value",
    [
        ("subject", "=?utf-8?q?hi=0D=0ABcc:_evil@attacker.example?="),
        ("subject", "=?utf-8?q?hi=0D=0A=0D=0Abody?="),
        ("subject", "=?utf-8?q?a=00b?="),
        ("to", ['"=?utf-8?q?x=0D=0ABcc:_e@evil.example?=" <ann@example.com>']),
    ],
)
def test_encoded_word_injection_is_400_and_nothing_is_stored_or_sent(n8n, field, value):
    """8.9: an encoded word decoded into a separate Bcc header (or ended the header block)."""
    body = n8n.job(**{field: value})
    before = len(n8n.stack.sim.effects())
    response = n8n.send(body)
    assert response.status_code == 400 and field in response.json()["fields"], response.text
    from tests.integration.test_stack import job_id_of

    missing = n8n.get("/status", {"job_id": job_id_of(body)})
    assert missing.status_code == 404
    assert len(n8n.stack.sim.effects()) == before
