"""The sweeper at volume: a backlog in one state never starves the others, and one sweep never
outruns its time budget by more than one send attempt."""

from __future__ import annotations

from safesend.core.classify import TransportErrorKind, classify_http, classify_transport
from safesend.core.errors import StoreUnavailableError
from safesend.core.states import State
from tests.unit.conftest import make_world

TIMEOUT = classify_transport(TransportErrorKind.TIMEOUT, "read timed out")
REFUSED = classify_transport(TransportErrorKind.CONNECT_REFUSED)
HTTP_429 = classify_http(429, "rateLimitExceeded")


def test_a_steady_backlog_in_an_early_state_never_starves_a_later_one():
    """UNKNOWN is swept before RETRY_WAIT: a stream of new due UNKNOWN jobs, each search slow, that
    fills every sweep's budget must still leave the RETRY_WAIT job its turn."""
    world = make_world(index_lag_s=0)
    world.service.request_budget_s = 0.5  # no in-request retry: the refused job waits in RETRY_WAIT
    world.mailer.script = [REFUSED]
    waiting, _ = world.service.submit(world.request(key="c:e:waiting"))
    assert waiting.state is State.RETRY_WAIT
    world.mailer.on_search = lambda: world.clock.advance(1.0)  # each mailbox check takes a second
    for sweep in range(5):
        world.mailer.script = [TIMEOUT] * 20
        for i in range(20):  # more due UNKNOWN jobs than one budget can check
            world.service.submit(world.request(key=f"c:e:{sweep}-{i}"))
        world.clock.advance(91)
        report = world.service.sweep(batch=5, budget_s=10.0)
        assert report.stopped_early
        if world.store.get(waiting.id).attempts > 1:
            break
    assert world.store.get(waiting.id).attempts > 1, "the RETRY_WAIT job was never swept"


def test_a_resend_inside_a_sweep_ends_within_the_sweeps_budget_plus_one_attempt():
    """The function's timeout (infra: 120 s) is only 30 s above the sweep budget (90 s): a resend the
    sweep starts just before its deadline must not spend the whole request budget (40 s) on quick
    retries, or the instance is killed before the sweep's record is written."""
    world = make_world(index_lag_s=0)
    world.mailer.script = [TIMEOUT]
    job, _ = world.service.submit(world.request())
    assert job.state is State.UNKNOWN
    world.clock.advance(301)  # past the unknown window: a resend is due
    world.mailer.script = [HTTP_429] * 5
    world.mailer.on_send = lambda: world.clock.advance(world.service.send_timeout_s)  # each attempt hangs
    start = world.clock.monotonic()
    report = world.service.sweep(budget_s=5.0)
    elapsed = world.clock.monotonic() - start
    assert report.actions == {"resent": 1} and world.mailer.sends == 2  # the submit's, then one resend
    assert elapsed <= 5.0 + world.service.send_timeout_s
    assert world.store.get(job.id).state is State.RETRY_WAIT  # the next sweep or task tries again
    assert world.store.last_sweep() is not None


def test_the_budget_other_states_leave_unused_goes_to_the_backlog_oldest_first():
    """The fair shares are a floor, not a cap: with every other state empty, one state's backlog
    gets the whole budget, in due order."""
    world = make_world(index_lag_s=0)
    world.mailer.script = [TIMEOUT] * 30
    ids = []
    for i in range(30):
        ids.append(world.service.submit(world.request(key=f"c:e:{i}"))[0].id)
        world.clock.advance(1)  # due one after the other
    world.clock.advance(91)
    world.mailer.on_search = lambda: world.clock.advance(1.0)
    report = world.service.sweep(batch=4, budget_s=20.0)
    assert report.stopped_early and report.examined == 20
    assert [world.store.get(i).checks for i in ids] == [1] * 20 + [0] * 10


def test_the_sweep_record_is_written_when_the_open_review_read_fails(monkeypatch):
    """/health reads the sweep record: one failed read of the oldest review item must not leave it
    stale (the dead man's switch on /health would call a sweeping service late)."""
    world = make_world()

    def unavailable(limit: int) -> list:
        raise StoreUnavailableError("deadline exceeded")

    monkeypatch.setattr(world.store, "find_open_reviews", unavailable)
    report = world.service.sweep()
    record = world.store.last_sweep()
    assert record is not None and record["oldest_review_s"] is None
    assert report.errors == 1 and record["errors"] == 1
