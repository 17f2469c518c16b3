"""A job in doubt whose mailbox was removed from the configuration (issue: the pool's first mailbox
was searched instead, blind to the copy, and the job resent from another mailbox).

The mailbox that may hold a copy is the only place the copy can be found: once it is no longer
configured, nothing may settle the job from another mailbox's search, and nothing may resend it. A
person is told at once, with the reason.
"""

from __future__ import annotations

from typing import Any

import pytest

from safesend.core.classify import TransportErrorKind, classify_transport
from safesend.core.errors import MailboxUnavailableError
from safesend.core.lifecycle import ReviewReason, current_review_id
from safesend.core.mailboxes import MailboxDirectory
from safesend.core.states import State
from safesend.usecases.senders import SenderMailboxes
from tests.fakes import FakeMailbox, FakeMailer
from tests.unit.test_service_pacing import PoolWorld, pool_config

TIMEOUT = classify_transport(TransportErrorKind.TIMEOUT)


def _reconfigure(pool: PoolWorld, config: dict[str, Any] | None) -> None:
    """A new deployment: the same store and mailboxes, another mailbox configuration."""
    directory = MailboxDirectory.from_mapping(config) if config else MailboxDirectory.default("shop@example.com")
    service = pool.service
    service.senders = SenderMailboxes(
        directory, pool.ledger, lambda: service.mailer, lambda mailbox: pool.mailers[mailbox.id], pool.world.clock
    )
    service.lag.senders = service.senders


def _pool(config: dict[str, Any] | None, **world: Any) -> PoolWorld:
    """A PoolWorld with a fake Gmail for every mailbox a test may configure later."""
    pool = PoolWorld(config, **world)
    for name in ("shop", "shop2"):  # every mailbox a test may configure later has its own fake Gmail
        if name not in pool.boxes:
            pool.boxes[name] = FakeMailbox(pool.world.clock, index_lag_s=pool.world.mailbox.index_lag_s)
            pool.mailers[name] = FakeMailer(pool.boxes[name])
    return pool


def _play(pool: PoolWorld, job_id: str, max_steps: int = 40) -> None:
    """Cloud Tasks and the sweeper: each due time, one advance."""
    for _ in range(max_steps):
        job = pool.world.store.get(job_id)
        if job.next_check_at is None:
            return
        pool.world.clock.advance(max((job.next_check_at - pool.world.clock()).total_seconds(), 0) + 0.001)
        pool.service.advance(job_id)
    raise AssertionError("the job never stopped being due")


def _doubtful_job(pool: PoolWorld, channel: str = "receipts") -> tuple[str, str]:
    """A job whose one attempt landed while its caller saw a timeout; returns (job id, its mailbox)."""
    job, _ = pool.service.submit(pool.world.request(channel=channel))
    mailbox = job.mailboxes[-1]
    assert job.state is State.UNKNOWN and pool.sent_by(mailbox) == 1
    return job.id, mailbox


@pytest.mark.parametrize("channel", ["receipts", "payments"])
def test_a_job_in_doubt_whose_mailbox_was_removed_goes_to_a_person_never_searched_or_resent_elsewhere(channel):
    pool = _pool(pool_config(per_minute=60_000, per_day=1000, ids=("shop",)))
    pool.mailers["shop"].script = [("accept", TIMEOUT)]
    job_id, _ = _doubtful_job(pool, channel)
    _reconfigure(pool, pool_config(per_minute=60_000, per_day=1000, ids=("shop2",)))  # shop retired
    _play(pool, job_id)
    job = pool.world.store.get(job_id)
    assert pool.sent_by("shop2") == 0 and pool.mailers["shop2"].searches == 0  # never resent, never searched there
    assert (job.state, job.review_reason) == (State.REVIEW, ReviewReason.AMBIGUOUS)
    assert job.last_error["code"] == "mailbox_not_configured" and "shop" in job.last_error["detail"]
    assert [a["reason"] for _, a in pool.world.publisher.items] == [ReviewReason.AMBIGUOUS]
    # A person's resend cannot go out blind either: the decision waits until the mailbox is back.
    with pytest.raises(MailboxUnavailableError):
        pool.service.decide(job_id, current_review_id(job), "resend", "ann@example.com")
    assert pool.sent_by("shop2") == 0


def test_a_job_sent_before_mailboxes_were_configured_is_not_settled_by_the_new_pools_search():
    """Unconfigured, a job has no mailbox id (today's one mailbox); configuring mailboxes later must not
    make its check search the pool's first mailbox and resend from it."""
    pool = _pool(None, ledger=False)
    pool.world.mailer.script = [("accept", TIMEOUT)]
    job, _ = pool.service.submit(pool.world.request())
    assert job.state is State.UNKNOWN and job.mailboxes == [] and pool.world.effects(job.id) == 1
    _reconfigure(pool, pool_config(per_minute=60_000, per_day=1000, ids=("shop",)))
    _play(pool, job.id)
    final = pool.world.store.get(job.id)
    assert pool.sent_by("shop") == 0 and pool.mailers["shop"].searches == 0
    assert final.state is State.REVIEW and final.last_error["code"] == "mailbox_not_configured"


def test_a_sent_job_under_verification_whose_mailbox_was_removed_is_unverified_at_once():
    pool = _pool(pool_config(per_minute=60_000, per_day=1000, ids=("shop", "shop2")))
    pool.mailers["shop"].script = [("accept", TIMEOUT), "accept"]
    pool.mailers["shop2"].script = [("accept", TIMEOUT), "accept"]
    job_id, mailbox = _doubtful_job(pool)
    for box in pool.boxes.values():
        box.index_lag_s = 10**6  # the first copy never shows in search: the job is resent
    for _ in range(10):
        job = pool.world.store.get(job_id)
        if job.state is State.SENT:
            break
        pool.world.clock.advance(max((job.next_check_at - pool.world.clock()).total_seconds(), 0) + 0.001)
        pool.service.advance(job_id)
    job = pool.world.store.get(job_id)
    assert job.state is State.SENT and job.verified is False and job.mailboxes[-1] == mailbox
    other = "shop2" if mailbox == "shop" else "shop"
    _reconfigure(pool, pool_config(per_minute=60_000, per_day=1000, ids=(other,)))
    searches = pool.mailers[other].searches
    _play(pool, job_id)
    final = pool.world.store.get(job_id)
    assert (final.state, final.review_reason) == (State.REVIEW, ReviewReason.UNVERIFIED)
    assert pool.mailers[other].searches == searches


def test_a_job_nothing_of_which_may_have_landed_still_moves_off_a_removed_mailbox():
    """Refused attempts leave nothing behind: such a job is sent from the pool as it is now."""
    refused = classify_transport(TransportErrorKind.CONNECT_REFUSED)
    pool = _pool(pool_config(per_minute=60_000, per_day=1000, ids=("shop",)))
    pool.mailers["shop"].script = [refused] * 3
    job, _ = pool.service.submit(pool.world.request())
    assert job.state is State.RETRY_WAIT and job.maybe_landed == 0
    from tests.fakes import FakeMailer

    pool.boxes["shop2"] = pool.boxes["shop"].__class__(pool.world.clock)
    pool.mailers["shop2"] = FakeMailer(pool.boxes["shop2"])
    _reconfigure(pool, pool_config(per_minute=60_000, per_day=1000, ids=("shop2",)))
    _play(pool, job.id)
    final = pool.world.store.get(job.id)
    assert final.state is State.SENT and pool.sent_by("shop2") == 1 and pool.sent_by("shop") == 0


def test_configured_as_default_todays_mailbox_still_settles_the_jobs_it_sent():
    """The README's way to configure mailboxes while jobs of today's one mailbox are in doubt: give
    that account the id `default`. Its jobs are searched there and never resent from the pool's first."""
    pool = _pool(None, ledger=False)
    pool.world.mailer.script = [("accept", TIMEOUT)]
    job, _ = pool.service.submit(pool.world.request())
    assert job.state is State.UNKNOWN and job.mailboxes == []
    config = pool_config(per_minute=60_000, per_day=1000, ids=("shop", "default"))
    config["pools"] = {"default": ["shop", "default"]}
    _reconfigure(pool, config)
    _play(pool, job.id)
    final = pool.world.store.get(job.id)
    assert final.state is State.SENT and final.verified and pool.world.effects(job.id) == 1
    assert pool.sent_by("shop") == 0 and pool.mailers["shop"].searches == 0


def test_a_job_stored_before_mailboxes_were_configured_records_the_mailbox_it_moves_to():
    """Nothing of it may have landed, so it may go to any mailbox of its pool: the move is recorded,
    so that a check after a doubtful attempt searches the mailbox that sent it."""
    refused = classify_transport(TransportErrorKind.CONNECT_REFUSED)
    pool = _pool(None)
    pool.world.mailer.script = [refused] * 3
    job, _ = pool.service.submit(pool.world.request())
    assert job.state is State.RETRY_WAIT and job.mailboxes == [] and job.maybe_landed == 0
    _reconfigure(pool, pool_config(per_minute=60_000, per_day=1000, ids=("shop", "shop2")))
    spend = pool.service.senders.directory.get("shop")
    while not hasattr(pool.ledger.reserve(spend, 100, 1, pool.world.clock()), "next_free_at"):
        pass  # shop's minute is spent: the job goes to shop2
    pool.mailers["shop2"].script = [("accept", TIMEOUT)]
    _play(pool, job.id)
    final = pool.world.store.get(job.id)
    assert final.mailboxes[-1] == "shop2" and pool.sent_by("shop2") == 1
    assert final.state is State.SENT and pool.sent_by("shop") == 0


def test_a_job_of_a_pool_mailbox_named_default_is_searched_there_and_never_resent_from_another():
    """A configured mailbox with the id `default` is served by the SAFESEND_GMAIL_* settings and its jobs
    carry no mailbox id; a job of it in doubt used to be searched in, and resent from, the pool's first."""
    pool = _pool(pool_config(per_minute=60_000, per_day=1000, ids=("shop", "default")))
    shop = pool.service.senders.directory.get("shop")
    pool.ledger.reserve(shop, 100, 1, pool.world.clock())  # shop is the busier one: the job goes to default
    pool.world.mailer.script = [("accept", TIMEOUT)]  # default's client: the settings' mailer
    job, _ = pool.service.submit(pool.world.request())
    assert job.state is State.UNKNOWN and pool.world.effects(job.id) == 1
    _play(pool, job.id)
    final = pool.world.store.get(job.id)
    assert final.state is State.SENT and final.verified and pool.world.effects(job.id) == 1
    assert pool.sent_by("shop") == 0 and pool.mailers["shop"].searches == 0


def test_a_lag_probe_of_a_send_from_a_removed_mailbox_measures_no_other_mailbox():
    """A sampled send's lag probes, after its mailbox left the configuration: searching the pool's
    first mailbox instead would never find the copy and, at the horizon, raise a false
    'index lag beyond horizon' alert against a mailbox that sent nothing."""
    pool = _pool(pool_config(ids=("shop", "shop2")), index_lag_s=0)
    job, _ = pool.service.submit(pool.world.request(channel="receipts"))
    assert pool.world.store.get(job.id).mailboxes[-1] == "shop"
    probes = [name for name in pool.world.scheduler.tasks if name.startswith(job.id) and "lag" in name]
    assert probes, "the send is sampled: a probe is scheduled"
    _reconfigure(pool, pool_config(ids=("shop2",)))
    searches = pool.mailers["shop2"].searches
    step = probes[0][33:]
    assert pool.service.lag.probe(job.id, step) == "lag_probe_mailbox_gone"
    assert pool.mailers["shop2"].searches == searches
    assert pool.world.service.store.mailbox_lags() == {}
