"""Issue 10 over fakes: review items reach the reviewers' channels once; decisions come back safely."""

from __future__ import annotations

import threading

import pytest

from safesend.core.classify import TransportErrorKind, classify_http, classify_transport
from safesend.core.errors import (
    DecisionConflictError,
    DecisionNotAllowedError,
    RequestValidationError,
    StaleReviewError,
)
from safesend.core.lifecycle import allowed_decisions, current_review_id
from safesend.core.model import Delivery
from safesend.core.notify import ReviewerTargets
from safesend.core.states import State
from tests.unit.conftest import make_world

TIMEOUT = classify_transport(TransportErrorKind.TIMEOUT, "read timed out")
HTTP_400 = classify_http(400, "invalidArgument")
CHAT_AND_SLACK = ReviewerTargets(
    frozenset({"chat", "slack"}), console_url="https://review.example.com", notify_timeout_s=600
)
ALL_TARGETS = ReviewerTargets(
    frozenset({"chat", "slack", "email"}),
    email_to="reviewers@example.com",
    email_channel="review-notifications",
    console_url="https://review.example.com",
    notify_timeout_s=600,
)


def in_review(reviewers=CHAT_AND_SLACK, script=None, channel="payments", **kwargs):
    """A payments job whose only attempt timed out (never reached Gmail): review, ambiguous. Its review
    item is published but not pushed to notify: each test plays the push subscription itself."""
    world = make_world(script=script or [TIMEOUT], reviewers=reviewers, **kwargs)
    world.pushed = 10**9
    job, _ = world.service.submit(world.request(channel=channel))
    for _ in range(20):  # until it is in review and its item published (run_until_settled would republish)
        job = world.store.get(job.id)
        if job.state is State.REVIEW and job.review_published_at is not None:
            break
        world.clock.advance(max(0.0, (job.next_check_at - world.clock()).total_seconds()) + 0.001)
        world.service.advance(job.id)
    assert (job.state, job.review_reason) == (State.REVIEW, "ambiguous")
    return world, job


def posted(world, kind: str) -> list[dict]:
    return world.notifier.bodies_for(kind)


# --------------------------------------------------------------------------- notify
def test_a_review_item_reaches_chat_and_slack_once_despite_redelivery():
    world, job = in_review()
    review_id = current_review_id(job)
    for _ in range(3):  # Pub/Sub redelivers; a second notify instance gets the same message
        _, action = world.service.notify(job.id, review_id)
        assert action == "notified"
    (card,) = posted(world, "chat")
    (slack,) = posted(world, "slack")
    assert card["cardsV2"][0]["cardId"] == review_id.replace(":", "-")
    text = str(card) + str(slack)
    assert "a***@example.com" in text and "ann@example.com" not in text and "Thanks for your order" not in text
    assert "https://review.example.com/review/items/" + job.id in text
    assert world.store.get(job.id).review_notified_entry == job.review_entries


def test_a_webhook_that_fails_twice_is_retried_by_the_outbox_and_posted_once():
    world, job = in_review()
    world.notifier.script = [Delivery(False, 503), Delivery(True, 200), Delivery(False, 500)]  # chat, slack, chat
    world.service.notify(job.id, current_review_id(job))
    world.run_until_settled(job.id)
    assert len(posted(world, "chat")) == 3 and len(posted(world, "slack")) == 1
    notices = {n["kind"]: n for n in world.store.get(job.id).notices}
    assert notices["chat"]["delivered_at"] is not None and notices["chat"]["tries"] == 3


def test_two_notify_instances_at_once_post_each_notice_once():
    world, job = in_review()
    review_id = current_review_id(job)
    barrier = threading.Barrier(2)

    def run() -> None:
        barrier.wait(timeout=5)
        world.service.notify(job.id, review_id)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    world.run_until_settled(job.id)
    assert len(posted(world, "chat")) == 1 and len(posted(world, "slack")) == 1


def test_a_stale_item_notifies_nobody():
    world, job = in_review()
    assert world.service.notify(job.id, f"{job.id}:99")[1] == "stale"
    assert world.notifier.posts == []


def test_reviewers_get_an_email_through_the_safe_send_path_once():
    world, job = in_review(reviewers=ALL_TARGETS)
    review_id = current_review_id(job)
    world.service.notify(job.id, review_id)
    world.service.notify(job.id, review_id)  # redelivery: the same dedup key replays
    emails = [e for e in world.mailbox.effects if e["message_id"] != job.message_id]
    assert len(emails) == 1
    email_job = world.store.get(next(j.id for j in world.store.all() if j.dedup_key == f"review:{review_id}"))
    assert email_job.channel == "review-notifications" and email_job.state is State.SENT


def test_an_item_never_notified_is_published_again_by_the_sweeper():
    world, job = in_review()
    assert len(world.publisher.items) == 1
    world.clock.advance(601)  # the notify function never took it up (dead-lettered)
    world.service.sweep()
    items = world.publisher.items
    assert len(items) == 2 and items[0][1]["review_id"] == items[1][1]["review_id"]
    world.service.notify(job.id, items[1][1]["review_id"])
    world.clock.advance(601)
    world.service.sweep()
    assert len(world.publisher.items) == 2  # notified now: not published again


# --------------------------------------------------------------------------- decisions
def test_resend_checks_the_mailbox_then_sends_once_and_answers_in_the_thread():
    world, job = in_review()
    review_id = current_review_id(job)
    world.service.notify(job.id, review_id)
    outcome = world.service.decide(job.id, review_id, "resend", "ann@example.com", "customer asked")
    assert (outcome.result, outcome.applied, outcome.job.state) == ("resent", True, State.SENT)
    assert world.effects(job.id) == 1 and world.mailer.searches >= 1
    world.run_until_settled(job.id)
    final = world.store.get(job.id)
    assert final.verified is True  # the first attempt never reached Gmail: the mailbox shows one copy
    assert [d["result"] for d in final.decisions] == ["resent"]
    updates = [n for n in posted(world, "chat") if "cardsV2" not in n]
    assert updates and updates[0]["text"].startswith("resent by a***@example.com")


def test_the_same_decision_twice_has_one_effect():
    world, job = in_review()
    review_id = current_review_id(job)
    first = world.service.decide(job.id, review_id, "resend", "ann@example.com")
    again = world.service.decide(job.id, review_id, "resend", "ann@example.com")
    assert (first.applied, again.applied, again.result) == (True, False, "resent")
    assert world.mailer.sends == 2  # the original attempt and one resend


def test_a_resend_is_refused_when_a_copy_is_in_the_mailbox():
    world, job = in_review()
    raw = _raw_of(world, job)
    world.mailbox.accept(raw)  # the copy turns up after all (a very late index)
    world.clock.advance(60)
    review_id = current_review_id(job)
    outcome = world.service.decide(job.id, review_id, "resend", "ann@example.com")
    assert (outcome.result, outcome.applied, outcome.job.state) == ("refused_copy_found", False, State.REVIEW)
    assert outcome.copies and world.effects(job.id) == 1 and world.mailer.sends == 1
    marked = world.service.decide(job.id, review_id, "mark_sent", "ann@example.com", "it went out")
    assert (marked.result, marked.job.state, marked.job.verified) == ("marked_sent", State.SENT, True)
    assert marked.job.provider_ref["gmail_id"] == world.mailbox.effects[0]["gmail_id"]


def test_a_stale_review_id_is_refused():
    world, job = in_review()
    with pytest.raises(StaleReviewError):
        world.service.decide(job.id, f"{job.id}:0", "cancel", "ann@example.com")


def test_a_second_different_decision_conflicts():
    world, job = in_review()
    review_id = current_review_id(job)
    world.service.decide(job.id, review_id, "cancel", "ann@example.com")
    with pytest.raises((DecisionConflictError, StaleReviewError)):
        world.service.decide(job.id, review_id, "resend", "bob@example.com")
    assert world.store.get(job.id).state is State.CANCELLED and world.mailer.sends == 1


def test_cancel_is_terminal_and_tells_the_workflow():
    world, job = in_review()
    outcome = world.service.decide(job.id, current_review_id(job), "cancel", "ann@example.com", "duplicate order")
    assert outcome.job.state is State.CANCELLED and allowed_decisions(outcome.job) == []


def test_acknowledge_only_answers_a_duplicate():
    world = make_world(script=[("accept", TIMEOUT)], index_lag_s=400, reviewers=CHAT_AND_SLACK)
    job, _ = world.service.submit(world.request())
    world.run_until_settled(job.id)
    job = world.store.get(job.id)
    assert job.review_reason == "duplicate" and allowed_decisions(job) == ["acknowledge"]
    with pytest.raises(DecisionNotAllowedError):
        world.service.decide(job.id, current_review_id(job), "resend", "ann@example.com")
    outcome = world.service.decide(job.id, current_review_id(job), "acknowledge", "ann@example.com")
    assert (outcome.job.state, outcome.job.verified) == (State.SENT, False)


def test_a_failed_job_can_be_resent_after_the_cause_is_fixed():
    world = make_world(script=[HTTP_400, "accept"], reviewers=CHAT_AND_SLACK)
    job, _ = world.service.submit(world.request())
    assert job.state is State.FAILED
    outcome = world.service.decide(job.id, current_review_id(job), "resend", "ann@example.com", "fixed the alias")
    assert outcome.job.state is State.SENT and world.effects(job.id) == 1


@pytest.mark.parametrize("decision, note", [("delete", ""), ("cancel", "x" * 2001)])
def test_bad_decisions_are_400(decision, note):
    world, job = in_review()
    with pytest.raises(RequestValidationError):
        world.service.decide(job.id, current_review_id(job), decision, "ann@example.com", note)


def test_a_reviewer_settling_a_job_calls_the_workflow_back_again():
    world = make_world(script=[TIMEOUT], reviewers=CHAT_AND_SLACK)
    hook = "https://n8n.example.com/webhook-waiting/9"
    job, _ = world.service.submit(world.request(channel="payments", callback_url=hook))
    world.run_until_settled(job.id)
    world.service.decide(job.id, current_review_id(world.store.get(job.id)), "resend", "ann@example.com")
    world.run_until_settled(job.id)
    assert [n["state"] for n in world.notifier.bodies_for(hook)] == ["review", "sent"]


def _raw_of(world, job) -> bytes:
    from safesend.core.mime import build_mime
    from safesend.core.validation import message_from_payload

    return build_mime(message_from_payload(job.payload), job.message_id, job.id, job.created_at)
