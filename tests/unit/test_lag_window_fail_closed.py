"""The raised unknown window is what keeps a job in doubt from being resent while the index lags;
an instance that cannot read the lag records must not fall back to the (smaller) configured window
and resend into a duplicate. It answers "try again" instead (reconcile: 503, Cloud Tasks retries),
unless it read the records within RECORDS_STALE_S (a raise is never undone, so those still hold)."""

from __future__ import annotations

from typing import Any

import pytest

from safesend.core.classify import TransportErrorKind, classify_transport
from safesend.core.errors import StoreUnavailableError
from safesend.core.states import State
from safesend.usecases import lag_watch
from safesend.usecases.lag_watch import LagWatch
from tests.unit.conftest import World, make_world

TIMEOUT = classify_transport(TransportErrorKind.TIMEOUT, "read timed out")
WINDOW_S = 300.0


class LagRecordsDown:
    """The store, except that the lag records cannot be listed (their query fails, the jobs' reads work)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.down = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def mailbox_lags(self) -> dict[str, dict[str, Any]]:
        if self.down:
            raise StoreUnavailableError("lag records: query failed")
        return dict(self._inner.mailbox_lags())


def _fresh_instance(world: World, store: Any) -> None:
    """Another instance, started after the raise: it has never read the lag records."""
    s = world.service
    s.lag = LagWatch(store, s.senders, None, None, s.timing, s.clock, s.monotonic)


def test_an_instance_that_cannot_read_the_raised_window_does_not_resend() -> None:
    world = make_world(index_lag_s=400.0, script=[("accept", TIMEOUT)])
    world.service.lag.record("default", "search", 450.0, world.clock())  # raised to 900 s
    store = LagRecordsDown(world.service.store)
    _fresh_instance(world, store)
    job, _ = world.service.submit(world.request())
    assert job.state is State.UNKNOWN and world.mailbox.count(job.message_id) == 1
    world.clock.advance(WINDOW_S + 30)  # past the configured window, the copy not yet indexed
    with pytest.raises(StoreUnavailableError):
        world.service.advance(job.id)
    assert world.mailbox.count(job.message_id) == 1  # not resent on the configured window
    store.down = False
    world.clock.advance(lag_watch.RECORDS_TTL_S)
    settled, _ = world.service.advance(job.id)
    assert settled is not None and world.mailbox.count(job.message_id) == 1


def test_records_read_lately_still_hold_through_a_short_outage() -> None:
    world = make_world()
    world.service.lag.record("default", "search", 450.0, world.clock())
    store = LagRecordsDown(world.service.store)
    store.down = False
    _fresh_instance(world, store)
    job, _ = world.service.submit(world.request())
    policy = world.service.policies.for_job(job.channel)
    assert world.service.lag.policy_for(job, policy).unknown_window_s == 900.0
    store.down = True
    world.clock.advance(lag_watch.RECORDS_TTL_S)
    assert world.service.lag.policy_for(job, policy).unknown_window_s == 900.0  # the last known
    world.clock.advance(lag_watch.RECORDS_STALE_S)
    with pytest.raises(StoreUnavailableError):
        world.service.lag.policy_for(job, policy)
