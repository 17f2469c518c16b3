"""Issue 18, points 1-6 over fakes: six paths around the guarantee that ended silent, stuck or with
an avoidable second copy. Each test names the point it reproduces."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from devstack.memory_store import InMemoryJobStore
from safesend.core.classify import TransportErrorKind, classify_http, classify_transport
from safesend.core.errors import ConcurrentUpdateError, SchedulerError
from safesend.core.lifecycle import current_review_id, new_job
from safesend.core.model import Delivery, Job
from safesend.core.notify import ReviewerTargets
from safesend.core.states import State
from tests.unit.conftest import make_world

TIMEOUT = classify_transport(TransportErrorKind.TIMEOUT, "read timed out")
HTTP_429 = classify_http(429, "rateLimitExceeded")
HOOK = "https://n8n.example.com/webhook-waiting/77"
CHAT_AND_SLACK = ReviewerTargets(
    frozenset({"chat", "slack"}), console_url="https://review.example.com", notify_timeout_s=600
)


def step_to_next_due(world, job_id: str) -> Job:
    job = world.store.get(job_id)
    world.clock.advance(max(0.0, (job.next_check_at - world.clock()).total_seconds()) + 0.001)
    world.service.advance(job_id)
    return world.store.get(job_id)


def until(world, job_id: str, done, steps: int = 40) -> Job:
    for _ in range(steps):
        job = world.store.get(job_id)
        if done(job):
            return job
        step_to_next_due(world, job_id)
    raise AssertionError(f"condition not reached: {world.store.get(job_id).state}")


# --------------------------------------------------------------------------- point 1
def test_mark_sent_after_two_attempts_keeps_the_job_under_verification_until_the_horizon():
    """Index lag (700 s) past the window (300 s), inside the horizon (1800 s). Two dropped answers;
    the reviewer marks the job sent when the search shows one copy. Before: `sent`, verified, no check."""
    world = make_world(script=[("accept", TIMEOUT), ("accept", TIMEOUT)], index_lag_s=700)
    job, _ = world.service.submit(world.request(channel="payments"))
    job = until(world, job.id, lambda j: j.state is State.REVIEW)
    outcome = world.service.decide(job.id, current_review_id(job), "resend", "ann@example.com")
    assert outcome.result == "resent"
    job = until(world, job.id, lambda j: j.state is State.REVIEW)
    assert job.maybe_landed == 2 and job.review_reason == "ambiguous"
    world.clock.advance(760 - (world.clock() - job.created_at).total_seconds())  # copy 1 searchable, copy 2 not
    outcome = world.service.decide(job.id, current_review_id(job), "mark_sent", "ann@example.com", "one copy")
    assert outcome.result == "marked_sent" and len(outcome.copies) == 1
    marked = world.store.get(job.id)
    assert (marked.state, marked.verified) == (State.SENT, False)
    assert marked.next_check_at is not None and marked.verify_until is not None
    world.run_until_settled(job.id)
    final = world.store.get(job.id)
    assert world.effects(job.id) == 2
    assert (final.state, final.review_reason) == (State.REVIEW, "duplicate")
    assert world.publisher.items[-1][1]["reason"] == "duplicate"


def _acknowledged_duplicate(world, third_copy: bool) -> Job:
    """A duplicate in review (two copies known, a third attempt may have landed), acknowledged."""
    raw = b"Message-ID: <dup-1@mail.example.com>\r\nSubject: x\r\n\r\nhi\r\n"
    copies = [world.mailbox.accept(raw).gmail_id for _ in range(2)]
    job = new_job(
        "dup00000000000000000000000000001", "dup:1", "<dup-1@mail.example.com>", "receipts", {}, "h", world.clock()
    )
    job.state, job.review_reason, job.review_entries = State.REVIEW, "duplicate", 1
    job.attempts = job.maybe_landed = 3
    job.known_copies, job.last_attempt_at = copies, world.clock()
    world.store.claim_or_get(job)
    outcome = world.service.decide(job.id, current_review_id(job), "acknowledge", "ann@example.com")
    assert outcome.result == "acknowledged"
    acknowledged = world.store.get(job.id)
    assert (acknowledged.state, acknowledged.verified) == (State.SENT, False)
    assert acknowledged.next_check_at is not None, "no verification although a third attempt may land"
    if third_copy:
        world.mailbox.accept(raw)
    world.run_until_settled(job.id)
    return world.store.get(job.id)


def test_an_acknowledged_duplicate_is_watched_to_the_horizon_without_raising_the_seen_copies_again():
    world = make_world(index_lag_s=0)
    final = _acknowledged_duplicate(world, third_copy=False)
    assert (final.state, final.next_check_at, final.review_entries) == (State.SENT, None, 1)
    assert [e["kind"] for e in final.events][-1] == "verification_ended"


def test_a_copy_beyond_the_acknowledged_ones_reaches_a_person():
    world = make_world(index_lag_s=0)
    final = _acknowledged_duplicate(world, third_copy=True)
    assert (final.state, final.review_reason, final.review_entries) == (State.REVIEW, "duplicate", 2)
    assert len(final.known_copies) == 3


# --------------------------------------------------------------------------- point 2
def _race_notify_into_publish(world) -> None:
    """Notify's first write lands before the publisher marks the item published (Pub/Sub push is fast)."""
    publish = world.publisher.publish

    def publish_then_notify(item: dict[str, Any], attributes: dict[str, str]) -> str:
        message_id = publish(item, attributes)
        world.service.notify(attributes["job_id"], attributes["review_id"])
        return message_id

    world.publisher.publish = publish_then_notify


def test_notify_winning_the_race_against_the_publisher_leaves_no_due_time_behind():
    world = make_world(script=[TIMEOUT], reviewers=CHAT_AND_SLACK)
    _race_notify_into_publish(world)
    job, _ = world.service.submit(world.request(channel="payments"))
    until(world, job.id, lambda j: j.state is State.REVIEW)
    for _ in range(3):
        world.clock.advance(700)
        world.service.sweep()
    final = world.store.get(job.id)
    assert final.review_notified_entry == final.review_entries
    assert final.next_check_at is None, "a due time nothing clears"
    assert len(world.publisher.items) == 1
    assert world.store.find_due(State.REVIEW, world.clock() + timedelta(days=1), 10) == []


def _stuck_review_job(index: int, at) -> Job:
    """Published and notified, but left due: what the race above made before the fix."""
    job = new_job(f"stuck{index:05d}", f"stuck:{index}", f"<s{index}@x>", "payments", {}, "h", at)
    job.state = State.REVIEW
    job.review_reason = "ambiguous"
    job.review_entries = job.review_notified_entry = 1
    job.review_published_at = at
    job.next_check_at = at
    return job


def test_the_sweeper_gets_past_thousands_of_due_jobs_it_cannot_advance():
    world = make_world(reviewers=CHAT_AND_SLACK)
    old = world.clock() - timedelta(hours=1)
    for i in range(3000):
        world.store.claim_or_get(_stuck_review_job(i, old))
    target = _stuck_review_job(99999, world.clock())
    target.id, target.review_notified_entry, target.review_published_at = "zz-needs-publish", 0, None
    world.store.claim_or_get(target)
    world.clock.advance(1)
    report = world.service.sweep(batch=50)
    assert [a["job_id"] for _, a in world.publisher.items] == ["zz-needs-publish"]
    assert report.examined >= 3001


class _CallbacksOnly:
    """A deliverer configured for callbacks only (chat and slack are switched off here)."""

    def __init__(self) -> None:
        self.posts: list[str] = []

    def can_deliver(self, notice: Any) -> bool:
        return notice["kind"] == "callback"

    def deliver(self, notice: Any) -> Delivery:
        self.posts.append(notice["id"])
        return Delivery(True, 200)

    def deadline_s(self, notice: Any) -> float:
        return 5.0


def test_the_notice_sweep_gets_past_thousands_of_notices_it_cannot_deliver():
    world = make_world()
    notifier = _CallbacksOnly()
    world.service.notifier = notifier
    old = world.clock() - timedelta(hours=1)
    for i in range(3000):
        job = new_job(f"chat{i:05d}", f"chat:{i}", f"<c{i}@x>", "payments", {}, "h", old)
        job.state, job.verified = State.SENT, True
        job.notices = [
            {"id": f"chat{i}:slack", "kind": "slack", "url": None, "payload": {}, "created_at": old}
            | {"due_at": old, "tries": 0, "delivered_at": None, "gave_up_at": None, "last_error": None}
        ]
        job.notice_due_at = old
        world.store.claim_or_get(job)
    target = new_job("zz-callback", "cb:1", "<cb@x>", "payments", {}, "h", old)
    target.state, target.verified = State.SENT, True
    target.notices = [
        {"id": "zz-callback:n0", "kind": "callback", "url": HOOK, "payload": {"a": 1}, "created_at": old}
        | {"due_at": world.clock(), "tries": 0, "delivered_at": None, "gave_up_at": None, "last_error": None}
    ]
    target.notice_due_at = world.clock()
    world.store.claim_or_get(target)
    world.clock.advance(1)
    world.service.sweep(batch=50)
    assert notifier.posts == ["zz-callback:n0"]


# --------------------------------------------------------------------------- point 3
class _CloudTasksNames:
    """Cloud Tasks' rule: a task name is used once (ALREADY_EXISTS, even after the task ran)."""

    def __init__(self) -> None:
        self.accepted: dict[str, Any] = {}
        self.calls = 0

    def schedule_check(self, job_id: str, step: str, at) -> None:
        self.calls += 1
        name = f"{job_id}-{step}"
        if name in self.accepted:
            raise SchedulerError(f"ALREADY_EXISTS {name}")
        self.accepted[name] = at


def test_the_search_fallback_after_a_change_log_404_gets_a_task_of_its_own():
    world = make_world(script=[("accept", TIMEOUT)], history_check_s=5)
    tasks = _CloudTasksNames()
    world.service.scheduler = tasks
    job, _ = world.service.submit(world.request())
    assert job.state is State.UNKNOWN and job.history_start
    world.mailbox.expire_history()
    fallen_back = step_to_next_due(world, job.id)
    assert any(e["kind"] == "history_expired" for e in fallen_back.events)
    assert fallen_back.next_check_at in tasks.accepted.values(), "no task for the search check"
    assert len(set(tasks.accepted)) == len(tasks.accepted) == tasks.calls


# --------------------------------------------------------------------------- point 4
def test_a_copy_landing_after_a_cancel_reaches_a_person():
    """An instance stalls inside its send; the sweeper takes over, a reviewer cancels (no copy yet),
    then the stalled send's 200 arrives."""
    world = make_world(index_lag_s=30)
    stalled = {"done": False}

    def meanwhile() -> None:
        if stalled["done"]:
            return
        stalled["done"] = True
        job_id = world.store.all()[0].id
        world.clock.advance(121)  # the lease runs out while the send hangs
        job = until(world, job_id, lambda j: j.state is State.REVIEW)
        world.service.decide(job_id, current_review_id(job), "cancel", "ann@example.com", "no copy")
        assert world.store.get(job_id).state is State.CANCELLED

    world.mailer.on_send = meanwhile
    job, _ = world.service.submit(world.request(channel="payments", callback_url=HOOK))
    world.run_until_settled(job.id)
    final = world.store.get(job.id)
    assert world.effects(job.id) == 1
    assert (final.state, final.review_reason) == (State.REVIEW, "sent_after_cancel")
    (_, attributes) = world.publisher.items[-1]
    assert attributes["reason"] == "sent_after_cancel"
    assert world.notifier.bodies_for(HOOK)[-1]["state"] == "review"


def test_a_copy_that_becomes_searchable_after_a_cancel_reaches_a_person():
    """The attempt's answer was dropped and the index lags past the window: the reviewer's cancel
    saw nothing. The job is searched again up to the horizon; the copy brings it back to a person."""
    world = make_world(script=[("accept", TIMEOUT)], index_lag_s=700)
    job, _ = world.service.submit(world.request(channel="payments", callback_url=HOOK))
    job = until(world, job.id, lambda j: j.state is State.REVIEW)
    outcome = world.service.decide(job.id, current_review_id(job), "cancel", "ann@example.com", "not there")
    assert outcome.result == "cancelled" and outcome.copies == []
    world.run_until_settled(job.id)
    final = world.store.get(job.id)
    assert world.effects(job.id) == 1
    assert (final.state, final.review_reason) == (State.REVIEW, "sent_after_cancel")
    assert world.publisher.items[-1][1]["reason"] == "sent_after_cancel"
    assert world.notifier.bodies_for(HOOK)[-1]["state"] == "review"


def test_a_cancel_over_a_copy_the_mailbox_shows_reaches_a_person_again():
    """The fault storm's reviewer phase (2026-12-02): an ambiguous attempt went to review, its copy
    became searchable past the verification horizon, a resend was refused (copy found) and the
    reviewer then cancelled with the copy on the page. The job ended `cancelled` with a copy out, and
    the workflow was told `cancelled`. A cancel cannot call a copy back: the job goes straight to
    `review` (`sent_after_cancel`), as when the copy shows up after the cancel."""
    world = make_world(script=[("accept", TIMEOUT)], index_lag_s=700)
    job, _ = world.service.submit(world.request(channel="payments", callback_url=HOOK))
    job = until(world, job.id, lambda j: j.state is State.REVIEW)
    world.clock.advance(world.service.timing.verify_horizon_s + 700)  # searchable, and past the horizon
    review_id = current_review_id(job)
    refused = world.service.decide(job.id, review_id, "resend", "ann@example.com", "send it again")
    assert refused.result == "refused_copy_found" and refused.copies
    outcome = world.service.decide(job.id, review_id, "cancel", "ann@example.com", "cancel it then")
    assert outcome.result == "cancelled" and outcome.copies
    world.run_until_settled(job.id)  # the review item and the callback notice go out
    final = world.store.get(job.id)
    assert world.effects(job.id) == 1
    assert (final.state, final.review_reason) == (State.REVIEW, "sent_after_cancel")
    assert current_review_id(final) != review_id  # a new entry: only acknowledge is offered
    assert world.publisher.items[-1][1]["reason"] == "sent_after_cancel"
    assert world.notifier.bodies_for(HOOK)[-1]["state"] == "review"


def test_a_cancel_with_nothing_in_doubt_ends_the_checks():
    world = make_world(script=[classify_http(400, "invalidArgument")])
    job, _ = world.service.submit(world.request(channel="payments"))
    assert job.state is State.FAILED and job.maybe_landed == 0
    world.service.decide(job.id, current_review_id(job), "cancel", "ann@example.com")
    final = world.store.get(job.id)
    assert (final.state, final.next_check_at) == (State.CANCELLED, None)


# --------------------------------------------------------------------------- point 5
def test_a_quick_retry_settles_on_a_copy_recorded_meanwhile_instead_of_sending_again():
    """The taken-over attempt's late 200 is recorded while the takeover attempt is in flight; that
    attempt gets a 429. Before: the in-request retry sent a second copy at once."""
    world = make_world(script=[classify_transport(TransportErrorKind.TIMEOUT, "x"), HTTP_429], index_lag_s=30)
    first_raw: list[bytes] = []
    send = world.mailer.send

    def recording_send(raw: bytes):
        if not first_raw:
            first_raw.append(raw)
        return send(raw)

    world.mailer.send = recording_send
    job, _ = world.service.submit(world.request())  # attempt 1: Gmail's answer never comes
    assert job.state is State.UNKNOWN and world.effects(job.id) == 0

    def late_200_of_attempt_1() -> None:
        if world.mailer.sends != 2:
            return
        taken_over = world.store.get(job.id)
        accepted = world.mailbox.accept(first_raw[0])
        policy = world.service.policies.for_job(taken_over.channel)
        world.service._record_outcome(taken_over, accepted, "instance-a", policy)

    world.mailer.on_send = late_200_of_attempt_1
    world.run_until_settled(job.id)
    final = world.store.get(job.id)
    assert world.mailer.sends == 2 and world.effects(job.id) == 1
    assert final.state is State.SENT and len(final.known_copies) == 1


# --------------------------------------------------------------------------- point 6
class _MisreportingStore(InMemoryJobStore):
    """Stores the quick retry's move back to `sending`, then reports it as a lost race."""

    def __init__(self) -> None:
        super().__init__()
        self.misreported = 0

    def compare_and_set(self, job: Job, expected_version: int) -> Job:
        stored = super().compare_and_set(job, expected_version)
        if job.state is State.SENDING and job.attempts == 2 and not self.misreported:
            self.misreported += 1
            raise ConcurrentUpdateError(job.id)
        return stored


def test_our_own_landed_write_reported_as_a_lost_race_still_sends_and_never_reaches_review():
    world = make_world(script=[HTTP_429, "accept"])
    store = _MisreportingStore()
    world.store = world.service.store = store
    job, _ = world.service.submit(world.request(channel="payments"))
    assert store.misreported == 1
    assert (job.state, job.attempts, world.mailer.sends) == (State.SENT, 2, 2)
    world.clock.advance(600)
    world.service.sweep()
    assert world.store.get(job.id).state is State.SENT and world.publisher.items == []
