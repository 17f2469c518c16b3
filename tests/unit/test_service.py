"""The service over fakes: every path of the article, asserted in the mailbox's acceptance log."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from devstack import crash_points
from safesend.core.classify import TransportErrorKind, classify_http, classify_transport
from safesend.core.errors import PayloadMismatchError, UnknownChannelError
from safesend.core.states import State
from tests.unit.conftest import make_world

TIMEOUT = classify_transport(TransportErrorKind.TIMEOUT, "read timed out")
REFUSED = classify_transport(TransportErrorKind.CONNECT_REFUSED)
HTTP_429 = classify_http(429, "rateLimitExceeded")
HTTP_400 = classify_http(400, "invalidArgument")
HTTP_503 = classify_http(503, "backendError")


def test_happy_path_sends_once_and_replays(world):
    job, replayed = world.service.submit(world.request())
    assert (job.state, replayed, job.attempts) == (State.SENT, False, 1)
    assert job.provider_ref["gmail_id"]
    assert job.stored_message_id == job.message_id
    again, replayed = world.service.submit(world.request())
    assert (again.state, replayed) == (State.SENT, True)
    assert again.provider_ref == job.provider_ref
    assert world.effects(job.id) == 1 and world.mailer.sends == 1


def test_same_key_different_payload_is_refused(world):
    world.service.submit(world.request())
    with pytest.raises(PayloadMismatchError):
        world.service.submit(world.request(subject="Another subject"))
    assert world.mailer.sends == 1


def test_unknown_channel_is_refused_before_anything_is_stored(world):
    with pytest.raises(UnknownChannelError):
        world.service.submit(
            world.request(channel="receipts").__class__(**{**world.request().__dict__, "channel": "nope"})
        )
    assert world.store.all() == []


def test_rate_limit_is_retried_quickly_and_sends_once(world):
    world.mailer.script = [HTTP_429, "accept"]
    job, _ = world.service.submit(world.request())
    assert job.state is State.SENT and job.attempts == 2
    assert world.effects(job.id) == 1
    kinds = [e["kind"] for e in job.events]
    assert kinds.count("attempt_started") == 2 and "attempt_failed" in kinds


def test_rate_limit_beyond_the_budget_waits_for_a_task(world):
    world.service.request_budget_s = 0.5  # no time for an in-request retry
    world.mailer.script = [REFUSED]
    job, _ = world.service.submit(world.request())
    assert job.state is State.RETRY_WAIT
    assert any(name.startswith(job.id) for name in world.scheduler.tasks)
    world.run_until_settled(job.id)
    final = world.store.get(job.id)
    assert final.state is State.SENT and final.attempts == 2
    assert world.effects(job.id) == 1
    assert world.mailer.searches == 0  # every attempt was refused: nothing to ask the mailbox about


def test_permanent_error_fails_and_publishes_a_review_item(world):
    world.mailer.script = [HTTP_400]
    job, _ = world.service.submit(world.request())
    assert job.state is State.FAILED and job.review_reason == "permanent_error"
    assert world.effects(job.id) == 0
    item, attrs = world.publisher.items[0]
    assert attrs == {"job_id": job.id, "reason": "permanent_error", "channel": "receipts", "review_id": f"{job.id}:1"}
    assert item["last_error"]["status"] == 400 and "text" not in item
    assert world.store.get(job.id).review_published_at is not None


def test_three_quick_rate_limits_do_not_burn_the_job(world):
    """Issue 8.13: three 429s used up max_attempts (3) in under 0.5 s and the key replayed 422 for
    ever. Refusals prove nothing landed, so they do not count against the attempts."""
    world.mailer.script = [HTTP_429, HTTP_429, HTTP_429, "accept"]
    job, _ = world.service.submit(world.request())
    assert job.state is State.RETRY_WAIT and job.attempts == 3 and job.maybe_landed == 0
    world.run_until_settled(job.id)
    final = world.store.get(job.id)
    assert (final.state, final.attempts, final.verified) == (State.SENT, 4, True)
    assert world.effects(job.id) == 1 and world.publisher.items == []


@pytest.mark.parametrize("failure", [TIMEOUT, HTTP_503])
def test_dropped_response_is_reconciled_to_sent_without_a_resend(world, failure):
    world.mailer.script = [("accept", failure)]  # Gmail accepted, we never heard
    job, _ = world.service.submit(world.request())
    assert job.state is State.UNKNOWN
    world.run_until_settled(job.id)
    final = world.store.get(job.id)
    assert final.state is State.SENT
    assert final.provider_ref["gmail_id"] == world.mailbox.effects[0]["gmail_id"]
    assert world.mailer.sends == 1 and world.effects(job.id) == 1


def test_not_found_is_inconclusive_until_the_window_passes():
    world = make_world(script=[TIMEOUT, "accept"], index_lag_s=0)
    job, _ = world.service.submit(world.request())
    world.clock.advance(91)
    world.service.advance(job.id)
    checked = world.store.get(job.id)
    assert checked.state is State.UNKNOWN and world.mailer.sends == 1  # inside the window: no resend
    world.run_until_settled(job.id)
    final = world.store.get(job.id)
    assert final.state is State.SENT and final.attempts == 2
    resend = [e for e in final.events if e["kind"] == "attempt_started"][-1]["at"]
    assert (resend - job.last_attempt_at).total_seconds() >= 300
    assert world.effects(job.id) == 1


def test_review_channel_never_resends_an_unknown_outcome():
    world = make_world(script=[TIMEOUT])
    job, _ = world.service.submit(world.request(channel="payments"))
    world.run_until_settled(job.id)
    final = world.store.get(job.id)
    assert final.state is State.REVIEW and final.review_reason == "ambiguous"
    assert world.mailer.sends == 1 and world.effects(job.id) == 0
    item, attrs = world.publisher.items[0]
    assert attrs["reason"] == "ambiguous"
    assert item["gmail_search_url"].endswith("rfc822msgid%3Ajob-" + job.id + "%40mail.example.com")
    assert [h["kind"] for h in item["history"]][:2] == ["attempt_started", "outcome_unknown"]
    for _ in range(3):  # later sweeps leave it alone
        world.clock.advance(600)
        world.service.sweep()
    assert world.mailer.sends == 1 and len(world.publisher.items) == 1


def test_channel_without_policy_defaults_to_review():
    world = make_world(script=[TIMEOUT])
    job, _ = world.service.submit(world.request(channel="plain"))
    world.run_until_settled(job.id)
    assert world.store.get(job.id).state is State.REVIEW and world.mailer.sends == 1


def test_two_copies_in_the_mailbox_go_to_review_as_duplicate(world):
    world.mailer.script = [TIMEOUT]
    job, _ = world.service.submit(world.request())
    raw = b"To: a@example.com\r\nMessage-ID: " + job.message_id.encode() + b"\r\n\r\nx"
    world.mailbox.accept(raw)
    world.mailbox.accept(raw)
    world.run_until_settled(job.id)
    final = world.store.get(job.id)
    assert final.state is State.REVIEW and final.review_reason == "duplicate"
    assert len(world.publisher.items[0][0]["mailbox_hits"]) == 2


def test_unknown_retry_channel_gives_up_into_review_after_max_attempts():
    world = make_world(script=[TIMEOUT, TIMEOUT, TIMEOUT], index_lag_s=0)
    job, _ = world.service.submit(world.request())
    world.run_until_settled(job.id)
    final = world.store.get(job.id)
    assert final.state is State.REVIEW and final.review_reason == "max_attempts"
    assert final.attempts == 3 and world.mailer.sends == 3


class Crash(BaseException):
    """Stands for a killed instance: a BaseException, so no `except Exception` records an outcome."""


def crash(point: str) -> None:
    raise Crash(point)


def submit_and_crash(world, point: str) -> None:
    crash_points.install(world.service, crash)
    with crash_points.armed(point), pytest.raises(Crash):
        world.service.submit(world.request())


@pytest.mark.parametrize("point", ["after_claim", "after_send"])
def test_crash_recovers_through_the_sweeper_with_one_effect(world, point):
    submit_and_crash(world, point)
    stuck = world.store.all()[0]
    assert stuck.state is State.SENDING
    world.clock.advance(121)  # the lease runs out
    for _ in range(12):
        world.service.sweep()
        world.clock.advance(60)
    final = world.store.get(stuck.id)
    assert final.state is State.SENT
    assert world.effects(stuck.id) == 1


def test_duplicate_webhook_during_a_crashed_attempt_does_not_resend(world):
    submit_and_crash(world, "after_send")
    world.clock.advance(121)
    job, replayed = world.service.submit(world.request())
    assert replayed and job.state is State.UNKNOWN
    assert world.mailer.sends == 1


def test_concurrent_duplicate_webhooks_send_once(world):
    barrier = threading.Barrier(10)
    results = []

    def call():
        barrier.wait(timeout=5)
        results.append(world.service.submit(world.request()))

    threads = [threading.Thread(target=call) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert len(results) == 10
    assert world.mailer.sends == 1 and world.effects(results[0][0].id) == 1
    assert sum(1 for _, replayed in results if not replayed) == 1


def test_repeated_and_early_reconcile_calls_change_nothing(world):
    world.mailer.script = [("accept", TIMEOUT)]
    job, _ = world.service.submit(world.request())
    before = world.store.get(job.id)
    for _ in range(3):  # duplicated Cloud Tasks deliveries before the check is due
        _, action = world.service.advance(job.id)
        assert action == "not_due"
    assert world.store.get(job.id).version == before.version
    world.run_until_settled(job.id)
    settled = world.store.get(job.id)
    for _ in range(3):
        _, action = world.service.advance(job.id)
        assert action == "nothing_to_do"
    assert world.store.get(job.id).version == settled.version
    assert world.mailer.sends == 1


def test_overlapping_sweeps_resend_once():
    world = make_world(script=[TIMEOUT, "accept"], index_lag_s=0)
    job, _ = world.service.submit(world.request())
    world.clock.advance(301)
    both_searched = threading.Barrier(2)
    world.mailer.on_search = lambda: both_searched.wait(timeout=5)  # both decide from the same snapshot
    reports = []
    threads = [threading.Thread(target=lambda: reports.append(world.service.sweep())) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert sorted(a for r in reports for a in r.actions) == ["conflict", "resent"]
    final = world.store.get(job.id)
    assert final.state is State.SENT and world.mailer.sends == 2
    assert world.effects(job.id) == 1


def test_review_item_publish_failure_is_retried_by_the_sweeper(world):
    world.publisher.fail_next = 1
    world.mailer.script = [HTTP_400]
    job, _ = world.service.submit(world.request())
    assert world.publisher.items == [] and world.store.get(job.id).review_published_at is None
    world.clock.advance(61)  # the publish hold runs out
    world.service.sweep()
    world.service.sweep()
    assert len(world.publisher.items) == 1
    assert world.store.get(job.id).next_check_at is None


def test_message_id_rewrite_is_detected_and_recorded(world):
    world.mailer.stored_message_id = lambda gmail_id: "<rewritten@mx.google.com>"
    job, _ = world.service.submit(world.request())
    assert job.state is State.SENT and job.stored_message_id == "<rewritten@mx.google.com>"
    assert any(e["kind"] == "message_id_rewritten" for e in job.events)


def test_stored_message_id_is_read_back_for_the_first_send_then_one_in_n():
    world = make_world()
    world.service.verify_message_id_every = 3
    reads = []
    original = world.mailer.stored_message_id
    world.mailer.stored_message_id = lambda gmail_id: reads.append(gmail_id) or original(gmail_id)
    jobs = [world.service.submit(world.request(key=f"c:e:{i}"))[0] for i in range(7)]
    assert [j.stored_message_id is not None for j in jobs] == [True, False, False, True, False, False, True]
    assert len(reads) == 3


def test_one_sweep_drains_more_than_one_batch():
    world = make_world(script=[TIMEOUT] * 5, index_lag_s=0)
    ids = [world.service.submit(world.request(key=f"c:e:{i}"))[0].id for i in range(5)]
    world.clock.advance(91)
    report = world.service.sweep(batch=2)
    assert report.examined == 5 and report.actions == {"checked_unknown": 5}
    assert all(world.store.get(i).checks == 1 for i in ids)


def test_first_mailbox_check_counts_the_index_lag_from_the_attempt_start(world):
    world.mailer.on_send = lambda: world.clock.advance(10)  # the send hangs 10 s before timing out
    world.mailer.script = [TIMEOUT]
    job, _ = world.service.submit(world.request())
    assert job.state is State.UNKNOWN
    assert job.next_check_at == job.last_attempt_at + timedelta(seconds=90)
