"""Issue 25 over fakes: the messengers. Callbacks end on the truth, reviewer notices are never lost
and never stale, decisions each get their line, and what callers read is true and masked."""

from __future__ import annotations

import json
import logging
import time
from datetime import timedelta
from email.utils import formatdate
from typing import Any

import pytest
from flask import Flask

from safesend.adapters.chat_webhooks import RoutingNotifier
from safesend.bootstrap.runtime import Runtime
from safesend.config import Settings
from safesend.core.auth import SIGNATURE_HEADER, Authenticator, AuthPolicy, sign
from safesend.core.callbacks import MAX_RETRY_AFTER_S, parse_retry_after
from safesend.core.classify import TransportErrorKind, classify_transport
from safesend.core.errors import RequestValidationError, StoreUnavailableError
from safesend.core.lifecycle import MAX_NOTE_CHARS, current_review_id, record_outcome
from safesend.core.model import Accepted, Delivery
from safesend.core.notify import ReviewerTargets
from safesend.core.states import State
from safesend.core.validation import parse_send_request
from safesend.entrypoints.console import ReviewConsole
from safesend.entrypoints.http_api import HttpApi
from safesend.entrypoints.views import job_view
from tests.unit.conftest import CALLBACKS, make_world
from tests.unit.test_console import decide as console_decide
from tests.unit.test_console import dev_auth, review_job
from tests.unit.test_reviewers import ALL_TARGETS, CHAT_AND_SLACK, _raw_of, in_review

HOOK = "https://n8n.example.com/webhook-waiting/77"
HOOK_2 = "https://n8n.example.com/webhook-waiting/78"
TIMEOUT = classify_transport(TransportErrorKind.TIMEOUT, "read timed out")
DOWN = Delivery(False, None, "connect_refused")


class FlakyReceiver:
    """A notifier whose destinations are down while `down(notice)` says so; records what landed."""

    def __init__(self, down: Any) -> None:
        self.down = down
        self.landed: list[tuple[str, dict[str, Any]]] = []
        self.tries = 0

    def can_deliver(self, notice: Any) -> bool:
        return True

    def deadline_s(self, notice: Any) -> float:
        return 10.0

    def deliver(self, notice: Any) -> Delivery:
        self.tries += 1
        if self.down(notice):
            return DOWN
        self.landed.append((notice.get("url") or notice["kind"], dict(notice["payload"])))
        return Delivery(True, 200)

    def states_at(self, url: str) -> list[str]:
        return [p["state"] for where, p in self.landed if where == url]


# --------------------------------------------------------------------------- 1. order
def test_an_older_sent_notice_never_lands_after_the_newer_review_one():
    """The receiver is down while the job is sent, then found duplicate: the workflow ends on review."""
    world = make_world(script=[("accept", TIMEOUT)], index_lag_s=400)
    came_back: dict[str, Any] = {}

    def down(notice: Any) -> bool:
        job = world.store.all()[0]
        if job.state is State.REVIEW and "at" not in came_back:
            came_back["at"] = world.clock() + timedelta(seconds=5)
        return "at" not in came_back or world.clock() < came_back["at"]

    receiver = FlakyReceiver(down)
    world.service.notifier = receiver
    job, _ = world.service.submit(world.request(callback_url=HOOK))
    world.run_until_settled(job.id, max_steps=400)
    final = world.store.get(job.id)
    assert final.state is State.REVIEW and final.review_reason == "duplicate"
    assert receiver.states_at(HOOK) == ["review"]  # the stale `sent` was superseded, never sent after
    superseded = [n for n in final.notices if (n["last_error"] or "").startswith("superseded by")]
    assert superseded and superseded[0]["payload"]["state"] == "sent"


# --------------------------------------------------------------------------- 2. replay callbacks
def test_a_replay_whose_callback_cannot_be_stored_is_a_503_with_retry_after():
    world = make_world()
    settings = Settings(project="demo", default_from="Shop <shop@example.com>")
    secret = b"0123456789abcdef0123456789abcdef"
    auth = Authenticator(AuthPolicy(secret, frozenset(), frozenset()), None, time.time)
    api = HttpApi(lambda: Runtime(settings, world.service.policies, world.service, auth, CALLBACKS))
    body = {"dedup_key": "c:o:1", "channel": "receipts", "to": "a@example.com", "subject": "s", "text": "t"}

    def post(payload: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str]]:
        data = json.dumps(payload)
        headers = {SIGNATURE_HEADER: sign(secret, int(time.time()), data.encode())}
        with Flask(__name__).test_request_context(
            "/x", method="POST", data=data, headers=headers, content_type="application/json"
        ):
            from flask import request

            answer, status, response_headers = api.send(request)
            return status, answer, response_headers

    assert post(body)[0] == 200

    def store_down(job: Any, expected_version: int) -> Any:
        raise StoreUnavailableError("down")

    world.store.compare_and_set = store_down  # type: ignore[method-assign]
    status, answer, headers = post({**body, "callback_url": HOOK})
    assert status == 503 and int(headers["Retry-After"]) > 0
    assert answer["error"] == "callback_not_registered"


# --------------------------------------------------------------------------- 3. never given up
def test_a_reviewer_notice_is_retried_past_the_horizon_and_raised_as_overdue(caplog):
    world, job = in_review()
    chat_up = {"up": False}
    world.service.notifier = FlakyReceiver(lambda n: n["kind"] == "chat" and not chat_up["up"])
    world.service.notify(job.id, current_review_id(job))
    for _ in range(60):  # two hours of sweeps with Chat down
        world.clock.advance(120)
        with caplog.at_level(logging.ERROR, logger="safesend"):
            world.service.sweep()
    card = next(n for n in world.store.get(job.id).notices if n["kind"] == "chat")
    assert card["gave_up_at"] is None and card["overdue_at"] is not None
    assert 10 <= card["tries"] <= 40  # capped backoff (<= 300 s), not a hammer, not given up
    overdue = [r for r in caplog.records if getattr(r, "fields", {}).get("event") == "reviewer_notice_overdue"]
    assert overdue and overdue[0].fields["notice_id"] == card["id"]
    chat_up["up"] = True
    world.clock.advance(301)
    world.service.sweep()
    card = next(n for n in world.store.get(job.id).notices if n["kind"] == "chat")
    assert card["delivered_at"] is not None


# --------------------------------------------------------------------------- 4. one line per decision
def test_a_second_decision_on_the_same_entry_gets_its_own_line():
    world, job = in_review()
    review_id = current_review_id(job)
    world.service.notify(job.id, review_id)
    world.mailbox.accept(_raw_of(world, job))  # the copy turns up: the resend is refused
    world.clock.advance(60)
    assert world.service.decide(job.id, review_id, "resend", "ann@example.com").result == "refused_copy_found"
    world.service.decide(job.id, review_id, "mark_sent", "bob@example.com", "it went out")
    world.run_until_settled(job.id)
    lines = [p["text"] for p in world.notifier.bodies_for("chat") if "cardsV2" not in p]
    assert len(lines) == 2 and lines[0].startswith("resend refused") and lines[1].startswith("marked sent")
    assert len([p for p in world.notifier.bodies_for("slack") if "blocks" not in p]) == 2


# --------------------------------------------------------------------------- 5. no stale card
def test_a_card_still_pending_when_its_entry_is_answered_goes_out_marked_answered_and_first():
    world, job = in_review()
    chat_up = {"up": False}
    receiver = FlakyReceiver(lambda n: not chat_up["up"])
    world.service.notifier = receiver
    world.service.notify(job.id, current_review_id(job))
    world.clock.advance(3)
    world.service.decide(job.id, current_review_id(job), "cancel", "ann@example.com", "wrong customer")
    chat_up["up"] = True
    world.run_until_settled(job.id)
    chat = [p for where, p in receiver.landed if where == "chat"]
    assert len(chat) == 2
    card, line = chat
    assert card["cardsV2"][0]["card"]["header"]["title"].startswith("Answered: cancelled by a***@example.com")
    assert line["text"].startswith("cancelled by a***@example.com")
    slack = [p for where, p in receiver.landed if where == "slack"]
    assert slack[0]["blocks"][0]["text"]["text"].startswith("*Answered:* cancelled")


# --------------------------------------------------------------------------- 6, 7. the reviewers' email
def test_a_redelivered_item_after_new_evidence_replays_the_email():
    world, job = in_review(reviewers=ALL_TARGETS)
    review_id = current_review_id(job)
    world.service.notify(job.id, review_id)
    world.mailbox.accept(_raw_of(world, job))
    world.clock.advance(60)
    world.service.decide(job.id, review_id, "resend", "ann@example.com")  # refused: adds the found copy
    assert world.service.notify(job.id, review_id)[1] == "notified"  # Pub/Sub redelivers
    emails = [e for e in world.mailbox.effects if e["message_id"] != job.message_id]
    assert len(emails) == 1


def test_the_reviewers_email_is_in_the_outbox_and_survives_a_failing_claim():
    world, job = in_review(reviewers=ALL_TARGETS)
    claim = world.store.claim_or_get
    failures = {"left": 3}

    def flaky_claim(draft: Any) -> Any:
        if draft.dedup_key.startswith("review:") and failures["left"]:
            failures["left"] -= 1
            raise StoreUnavailableError("claim lost")
        return claim(draft)

    world.store.claim_or_get = flaky_claim  # type: ignore[method-assign]
    assert world.service.notify(job.id, current_review_id(job))[1] == "notified"
    for _ in range(10):
        world.clock.advance(20)
        world.service.sweep()
    email_notice = next(n for n in world.store.get(job.id).notices if n["kind"] == "email")
    assert email_notice["delivered_at"] is not None and email_notice["tries"] == 4
    emails = [e for e in world.mailbox.effects if e["message_id"] != job.message_id]
    assert len(emails) == 1


# --------------------------------------------------------------------------- 8. reserved keys
@pytest.mark.parametrize(
    "key_fields",
    [{"dedup_key": "review:order_paid:42"}, {"customer_id": "review", "event_type": "order_paid", "order_id": "42"}],
)
def test_the_review_key_space_is_reserved(key_fields):
    body = {"channel": "receipts", "to": "a@example.com", "subject": "s", "text": "t", **key_fields}
    with pytest.raises(RequestValidationError) as info:
        parse_send_request(body, "s@example.com")
    assert "reserved" in info.value.fields["dedup_key"]


# --------------------------------------------------------------------------- 9. no route
class _Poster:
    def __init__(self) -> None:
        self.posts = 0

    def deliver(self, notice: Any) -> Delivery:
        self.posts += 1
        return Delivery(True, 200)

    def deadline_s(self, notice: Any) -> float:
        return 10.0


def test_notices_no_route_can_deliver_are_given_up_with_the_reason():
    world, job = in_review()
    chat = _Poster()
    world.service.notifier = RoutingNotifier({"chat": chat})  # Slack was switched off
    world.service.notify(job.id, current_review_id(job))
    stored = world.store.get(job.id)
    slack = next(n for n in stored.notices if n["kind"] == "slack")
    assert slack["gave_up_at"] is not None and "no slack route" in slack["last_error"]
    assert chat.posts == 1 and stored.notice_due_at is None


# --------------------------------------------------------------------------- 10. the hold
def test_no_second_deliverer_posts_while_the_first_is_within_its_deadline():
    """Five callbacks, each post taking 9.9 s of its 10 s deadline: a sweep during every post (the
    pass outlives the old 30 s hold) posts nothing; each workflow hears once."""
    world = make_world()
    posts: list[str] = []
    hooks = [f"{HOOK}{n}" for n in range(5)]

    class SlowReceiver(FlakyReceiver):
        def deliver(self, notice: Any) -> Delivery:
            posts.append(notice["url"])
            world.clock.advance(9.9)
            world.service.sweep()  # a second deliverer, while this one is within its deadline
            return Delivery(True, 200)

    world.service.notifier = SlowReceiver(lambda n: False)
    world.mailer.script = [("accept", TIMEOUT)]
    job, _ = world.service.submit(world.request(callback_url=hooks[0]))
    for hook in hooks[1:]:
        world.service.submit(world.request(callback_url=hook))
    world.run_until_settled(job.id)
    world.service.sweep()
    assert sorted(posts) == hooks


# --------------------------------------------------------------------------- 11. Retry-After
@pytest.mark.parametrize("kind", ["callback", "chat"])
def test_retry_after_is_honoured_and_bounded(kind):
    if kind == "chat":
        world, job = in_review(reviewers=ReviewerTargets(frozenset({"chat"}), notify_timeout_s=600))
    else:
        world = make_world()
    world.notifier.script = [Delivery(False, 429, retry_after_s=120.0), Delivery(False, 429, retry_after_s=1e6)]
    if kind == "chat":
        world.service.notify(job.id, current_review_id(job))
    else:
        job, _ = world.service.submit(world.request(callback_url=HOOK))
        world.clock.advance(2)
        world.service.advance(job.id)
    (notice,) = world.store.get(job.id).notices
    assert notice["tries"] == 1 and notice["due_at"] == world.clock() + timedelta(seconds=120)
    world.clock.advance(121)
    world.service.advance(job.id)
    (notice,) = world.store.get(job.id).notices
    assert notice["tries"] == 2 and notice["due_at"] == world.clock() + timedelta(seconds=MAX_RETRY_AFTER_S)


def test_retry_after_headers_are_read_as_seconds_or_dates():
    now = 1_800_000_000.0
    assert parse_retry_after("120", now) == 120.0
    assert parse_retry_after(formatdate(now + 90, usegmt=True), now) == pytest.approx(90.0)
    assert parse_retry_after(None, now) is None and parse_retry_after("soon", now) is None


# --------------------------------------------------------------------------- 13-15. what people read
def test_the_longest_note_of_four_byte_characters_is_accepted_by_the_console():
    world = make_world()
    auth = dev_auth()
    console = ReviewConsole(lambda: world.service, lambda: auth)
    job_id = review_job(world)
    note = "\U0001f600" * MAX_NOTE_CHARS  # 4 UTF-8 bytes each, 12 once percent-encoded
    _, status, _ = console_decide(console, job_id, "cancel", note=note)
    assert status == 303
    assert world.store.get(job_id).decisions[-1]["note"] == note


def test_after_acknowledge_the_status_says_a_person_accepted_it():
    world = make_world(script=[("accept", TIMEOUT)], index_lag_s=400, reviewers=CHAT_AND_SLACK)
    job, _ = world.service.submit(world.request())
    world.run_until_settled(job.id)
    job = world.store.get(job.id)
    outcome = world.service.decide(job.id, current_review_id(job), "acknowledge", "ann.lee@example.com")
    view = job_view(outcome.job, with_events=True)
    assert "accepted by a person" in view["message"] and "still checks" not in view["message"]
    decisions = [e for e in view["events"] if e["kind"] == "decision"]
    assert decisions and decisions[0]["reviewer"] == "a***@example.com"
    assert "ann.lee@example.com" not in json.dumps(view)


# --------------------------------------------------------------------------- 5b. a replaced entry's card
def test_a_card_of_an_entry_replaced_by_a_newer_one_goes_out_marked_superseded():
    """Chat is down while the job's first entry (ambiguous) is replaced by a second (a late accept):
    the first card, when Chat returns, says it was superseded; only the second one asks."""
    world, job = in_review(reviewers=ALL_TARGETS)
    chat_up = {"up": False}
    receiver = FlakyReceiver(lambda n: not chat_up["up"])
    world.service.notifier = receiver
    claim = world.store.claim_or_get

    def claim_while_up(draft: Any) -> Any:  # the reviewers' email cannot be claimed while Chat is down
        if draft.dedup_key.startswith("review:") and not chat_up["up"]:
            raise StoreUnavailableError("claim lost")
        return claim(draft)

    world.store.claim_or_get = claim_while_up  # type: ignore[method-assign]
    first = current_review_id(job)
    world.service.notify(job.id, first)
    world.clock.advance(3)
    job = world.store.get(job.id)
    policy = world.service.policies.for_job(job.channel)
    late = record_outcome(
        job, Accepted("g-late"), "gone", world.clock(), policy, world.service.timing, world.service.uniform
    )
    job = world.service._cas(job, late)
    second = current_review_id(job)
    assert second != first and job.review_reason == "late_accept"
    world.service.advance(job.id)  # publishes the new entry's item
    world.service.notify(job.id, second)
    chat_up["up"] = True
    for _ in range(12):
        world.clock.advance(30)
        world.service.sweep()
    for kind in ("chat", "slack"):
        cards = [p for where, p in receiver.landed if where == kind]
        assert len(cards) == 2  # one card per entry, in order
        assert cards[0]["text"].endswith("(superseded: a newer review of this job follows; decide on that one)")
        assert "superseded" not in cards[1]["text"] and "late_accept" in cards[1]["text"]
    emails = {n["entry"]: n for n in world.store.get(job.id).notices if n["kind"] == "email"}
    assert emails[first]["marked"] == "superseded" and emails[first]["gave_up_at"] is not None
    assert emails[second]["delivered_at"] is not None


# --------------------------------------------------------------------------- 7b. no notifier, email still goes
def test_the_sweep_delivers_the_reviewers_email_when_no_notifier_is_configured():
    """No callbacks, no Chat/Slack: the reviewers' email is still an outbox notice the sweep delivers."""
    world, job = in_review(
        reviewers=ReviewerTargets(frozenset({"email"}), "reviewers@example.com", "review-notifications")
    )
    world.service.notifier = None
    claim = world.store.claim_or_get
    failures = {"left": 1}

    def flaky_claim(draft: Any) -> Any:
        if draft.dedup_key.startswith("review:") and failures["left"]:
            failures["left"] -= 1
            raise StoreUnavailableError("claim lost")
        return claim(draft)

    world.store.claim_or_get = flaky_claim  # type: ignore[method-assign]
    world.service.notify(job.id, current_review_id(job))
    (notice,) = world.store.get(job.id).notices
    assert notice["kind"] == "email" and notice["delivered_at"] is None
    world.clock.advance(5)
    world.service.sweep()
    (notice,) = world.store.get(job.id).notices
    assert notice["delivered_at"] is not None
    assert len([e for e in world.mailbox.effects if e["message_id"] != job.message_id]) == 1
