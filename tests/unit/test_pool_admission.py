"""Admission of a job's attempt by its pool (review of the core guarantee).

A send no mailbox of its pool can ever admit (more recipients than its limits let one message or one
day carry, a send above its per-minute units): before, the job waited `queued` a day at a time for
ever, with no review item and no failure, a message that could never go out and nobody told. Now it
ends at once: `failed` (nothing went out) with a review item, or `review` when an earlier attempt may
have landed. And the lease of a new job runs from its claim, after the pool's budgets were read."""

from __future__ import annotations

from datetime import timedelta

import pytest

from safesend.core.classify import TransportErrorKind, classify_transport
from safesend.core.errors import StoreUnavailableError
from safesend.core.lifecycle import ReviewReason
from safesend.core.mailboxes import MailboxDirectory
from safesend.core.states import State
from tests.unit.conftest import TIMING
from tests.unit.test_service_pacing import DAILY_429, PoolWorld, pool_config

THREE = ["a@example.com", "b@example.com", "c@example.com"]


def _pool(ids: tuple[str, ...] = ("shop",), **limits: int) -> PoolWorld:
    config = pool_config(per_minute=60_000, per_day=1000, ids=ids)
    config["defaults"]["limits"].update(limits)
    return PoolWorld(config)


@pytest.mark.parametrize("limits", [{"recipients_per_message": 2}, {"recipients_per_day": 2}, {"units_per_minute": 99}])
def test_a_send_its_mailbox_can_never_admit_fails_at_once_with_a_review_item(limits):
    pool = _pool(**limits)
    job, _ = pool.service.submit(pool.world.request(to=THREE))
    assert (job.state, job.review_reason) == (State.FAILED, ReviewReason.PERMANENT_ERROR)
    assert job.last_error["code"] == "mailbox_limit" and job.attempts == 0 and job.maybe_landed == 0
    assert pool.sent_by("shop") == 0
    assert [a["reason"] for _, a in pool.world.publisher.items] == [ReviewReason.PERMANENT_ERROR]


def test_a_send_one_mailbox_of_the_pool_can_admit_moves_there():
    small = pool_config(per_minute=60_000, per_day=1000, ids=("shop", "shop2"))
    small["mailboxes"]["shop"]["limits"] = {"preset": "workspace", "recipients_per_message": 2}
    pool = PoolWorld(small)
    job, _ = pool.service.submit(pool.world.request(to=THREE))
    assert job.state is State.SENT and job.mailboxes[-1] == "shop2" and pool.sent_by("shop2") == 1


def test_a_resend_its_mailbox_can_no_longer_admit_goes_to_review_not_failed():
    """An earlier attempt may have landed: `failed` ("nothing went out") would be a lie."""
    pool = _pool()
    pool.mailers["shop"].script = [classify_transport(TransportErrorKind.TIMEOUT)]
    job, _ = pool.service.submit(pool.world.request(to=THREE))
    assert job.state is State.UNKNOWN
    smaller = pool_config(per_minute=60_000, per_day=1000, ids=("shop",))
    smaller["defaults"]["limits"]["recipients_per_message"] = 2  # the mailbox's limits were lowered since
    pool.service.senders.directory = MailboxDirectory.from_mapping(smaller)
    for _ in range(10):
        current = pool.world.store.get(job.id)
        if current.next_check_at is None or current.state is State.REVIEW:
            break
        pool.world.clock.advance((current.next_check_at - pool.world.clock()).total_seconds() + 0.001)
        pool.service.advance(job.id)
    final = pool.world.store.get(job.id)
    assert (final.state, final.review_reason) == (State.REVIEW, ReviewReason.AMBIGUOUS)
    assert pool.sent_by("shop") == 0 and final.last_error["code"] == "mailbox_limit"


def test_the_lease_starts_when_the_job_is_claimed_not_when_the_request_arrived():
    """Choosing a mailbox reads every budget of the pool (a slow store: seconds each) before the claim.
    A lease counted from the request's arrival would leave the attempt less than its documented lease:
    a live send taken for a dead one by a duplicate webhook or the sweeper."""
    pool = PoolWorld(pool_config(per_minute=60_000, per_day=1000))
    slow = pool.ledger.snapshot

    def snapshot(mailbox, now):
        pool.world.clock.advance(40)  # each budget read of a degraded store
        return slow(mailbox, now)

    pool.ledger.snapshot = snapshot  # type: ignore[method-assign]
    claimed = []
    pool.mailers["shop"].on_send = pool.mailers["shop2"].on_send = lambda: claimed.append(
        next(iter(pool.world.store.all()))
    )
    pool.service.submit(pool.world.request())
    assert claimed and claimed[0].lease_until - claimed[0].claimed_at == timedelta(seconds=TIMING.lease_s)
    assert claimed[0].claimed_at == claimed[0].last_attempt_at >= claimed[0].created_at + timedelta(seconds=80)


def test_unconfigured_after_a_daily_limit_refusal_new_jobs_wait_without_hitting_gmail_again():
    """Today's one mailbox (unpaced: no ledger call on a send) learns Gmail's daily limit in the ledger;
    before, every new job still went to Gmail and was refused again (an account that keeps hitting the
    limit may be suspended). Now this instance asks the ledger while the mark holds, and its new jobs
    wait `queued` behind it; once the mark has passed, sends make no ledger call again."""
    pool = PoolWorld(None)
    pool.world.mailer.script = [DAILY_429]
    first, _ = pool.service.submit(pool.world.request())
    assert first.state is State.QUEUED and pool.world.mailer.sends == 1
    later = [pool.service.submit(pool.world.request(key=f"c:order_paid:{n}"))[0] for n in range(3)]
    assert [j.state for j in later] == [State.QUEUED] * 3 and pool.world.mailer.sends == 1
    assert all(j.queue_eta is not None and j.queue_eta >= first.queue_eta for j in later)
    pool.run_queue()
    assert all(pool.world.store.get(j.id).state is State.SENT for j in [first, *later])
    assert pool.world.mailer.sends == 5  # the refused one, then each job once, after the mark
    assert all(pool.world.effects(j.id) == 1 for j in [first, *later])
    assert pool.world.publisher.items[0][1]["kind"] == "mailbox_incident"
    assert len(pool.world.publisher.items) == 1  # one incident, no review item


def test_a_daily_limit_refusal_met_while_the_ledger_is_down_still_waits_never_fails():
    """The daily limit frees in hours: past the retry horizon at once, the job used to end `failed`,
    with a review item per job, when the ledger could not be told. It waits `queued` for the limit."""
    pool = PoolWorld(pool_config(per_minute=60_000, per_day=1000, ids=("shop",)))
    pool.mailers["shop"].script = [DAILY_429]

    def down(*args, **kwargs):
        raise StoreUnavailableError("ledger down")

    pool.ledger.penalise = down  # type: ignore[method-assign]
    job, _ = pool.service.submit(pool.world.request())
    assert job.state is State.QUEUED and job.queue_reason == "gmail_daily_limit"
    assert job.next_check_at >= pool.world.clock() + timedelta(hours=24) and job.maybe_landed == 0
    assert pool.world.publisher.items == []
