"""Issue 10 notify, end to end on the local stack: a review item travels Pub/Sub -> the notify entry
point (pushed with credentials, at least once) -> one Google Chat card and one Slack message
(fake webhooks that record what they get), despite redelivery and a webhook that is down."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime

import pytest

from devstack.stack import LocalStack
from tests.emulator_fixtures import SharedEmulators
from tests.integration.test_stack import Client

pytestmark = [pytest.mark.integration, pytest.mark.functions_out_of_process]


@pytest.fixture(scope="module")
def stack(shared_emulators: SharedEmulators) -> Iterator[LocalStack]:
    with shared_emulators.stack_for("notify") as running:
        yield running


@pytest.fixture
def n8n(stack) -> Client:
    return Client(stack)


def cards_for(stack: LocalStack, job_id: str) -> list[dict]:
    return [r.json() for r in stack.chat.received if job_id in r.body.decode()]


def slack_for(stack: LocalStack, job_id: str) -> list[dict]:
    return [r.json() for r in stack.slack.received if job_id in r.body.decode()]


def in_review(stack: LocalStack, n8n: Client) -> dict:
    stack.relay.set_mode("fail-before-forward", count=1)  # a payments job whose outcome is unknown
    response = n8n.send(n8n.job(channel="payments"))
    return n8n.wait_for(response.json()["job_id"], {"review"}, timeout_s=45)


def test_one_card_and_one_message_despite_redelivery_and_a_webhook_down_twice(stack, n8n):
    stack.push_relay.duplicate_next(1)  # Pub/Sub delivers the item twice
    stack.chat.refuse_next(2, 503)  # and Google Chat is down for the first two posts
    view = in_review(stack, n8n)
    job_id = view["job_id"]
    stack.chat.wait_for(lambda got: any(job_id in r.body.decode() for r in got), timeout_s=45)
    stack.slack.wait_for(lambda got: any(job_id in r.body.decode() for r in got), timeout_s=20)
    time.sleep(3)  # room for any duplicate to arrive
    (card,) = cards_for(stack, job_id)
    (message,) = slack_for(stack, job_id)
    assert card["cardsV2"][0]["card"]["header"]["title"] == "Review: ambiguous"
    assert "threadKey=" + job_id in next(r.path for r in stack.chat.received if job_id in r.body.decode())
    assert "ann@example.com" not in str(card) + str(message) and "a***@example.com" in str(card)
    assert "Thanks for your order." not in str(card) + str(message)  # no body
    notices = {n["notice_id"].rsplit(":", 1)[1]: n for n in n8n.status(job_id)["callbacks"]}
    assert (notices["chat"]["state"], notices["chat"]["tries"]) == ("delivered", 3)
    assert (notices["slack"]["state"], notices["slack"]["tries"]) == ("delivered", 1)


def test_time_from_review_to_the_chat_card_is_measured(stack, n8n):
    view = in_review(stack, n8n)
    job_id = view["job_id"]
    stack.chat.wait_for(lambda got: any(job_id in r.body.decode() for r in got), timeout_s=30)
    entered = next(
        datetime.fromisoformat(e["at"]) for e in n8n.status(job_id)["events"] if e["kind"] == "entered_review"
    )
    posted = next(r.at for r in stack.chat.received if job_id in r.body.decode())
    latency_s = posted - entered.timestamp()
    print(f"\nreview -> chat card on the local stack: {latency_s:.2f} s")
    assert 0 <= latency_s < 10


def test_a_webhook_429_retry_after_is_waited_for_and_one_card_arrives(stack, n8n):
    """Issue 25: Google Chat answers 429 with Retry-After: 3 twice; the outbox waits as told."""
    stack.chat.refuse_next(2, 429, retry_after=3)
    view = in_review(stack, n8n)
    job_id = view["job_id"]
    stack.chat.wait_for(lambda got: any(job_id in r.body.decode() for r in got), timeout_s=60)
    refused = [r.at for r in stack.chat.refused if job_id in r.body.decode()]
    posted = next(r.at for r in stack.chat.received if job_id in r.body.decode())
    assert len(refused) == 2 and refused[1] - refused[0] >= 2.9 and posted - refused[1] >= 2.9
    time.sleep(2)
    assert len(cards_for(stack, job_id)) == 1
