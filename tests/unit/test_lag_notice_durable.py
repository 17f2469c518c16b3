"""Never silent for the index-lag raise: the raise and its reviewer notice used to be one store write
then one publish, so a publish that failed, or a write whose answer was lost (the record raised, the
writer told an error, its retry seeing the window already raised), left the window raised or the
lag past the horizon recorded with nobody told, for good: the next observation sees nothing to raise.

Now the raise stays in the record as `untold` until its teller confirms the notice went out; one not
confirmed within TELL_LEASE_S is claimed (compare-and-set) and told again, by the next observation
or by the sweep. Still once when all goes well, and once under two instances observing at once."""

from __future__ import annotations

import json
from typing import Any

import pytest

from safesend.core import index_lag
from safesend.core.errors import StoreUnavailableError
from safesend.usecases.lag_watch import LagWatch
from tests.unit.conftest import World, make_world
from tests.unit.test_signals import lines  # noqa: F401 - the fixture

WINDOW_S, HORIZON_S = 300.0, 1800.0


def lag_notices(world: World) -> list[dict[str, str]]:
    return [a for _, a in world.publisher.items if a.get("incident_kind") == "index_lag"]


def events(stream: Any, event: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if f'"event": "{event}"' in line]


def test_a_failed_publish_is_told_again_by_the_sweep_after_the_lease(lines):
    world = make_world()
    world.publisher.fail_next = 1
    world.service.lag.record("default", "search", HORIZON_S + 5, world.clock(), beyond_horizon=True)
    assert lag_notices(world) == []  # the Pub/Sub outage
    world.service.sweep()
    assert lag_notices(world) == []  # within the lease: its teller may still be at it
    world.clock.advance(index_lag.TELL_LEASE_S + 1)
    world.service.sweep()
    [notice] = lag_notices(world)
    assert notice["incident"].endswith(":1")  # beyond the horizon: check recent jobs
    assert len(events(lines, "index_lag_beyond_horizon")) == 2  # the alert's signal, again with it
    world.clock.advance(index_lag.TELL_LEASE_S + 1)
    world.service.sweep()
    assert len(lag_notices(world)) == 1  # confirmed: never again


class LostAnswerStore:
    """The store, except that the first lag write commits and then reports an outage."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.lose = 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def write_mailbox_lag(self, mailbox: str, record: Any, token: Any) -> bool:
        done = self._inner.write_mailbox_lag(mailbox, record, token)
        if self.lose:
            self.lose -= 1
            raise StoreUnavailableError("answer lost after the commit")
        return bool(done)


def test_a_raise_whose_write_answer_was_lost_is_still_told_once() -> None:
    world = make_world()
    store = LostAnswerStore(world.service.store)
    watch = LagWatch(store, world.service.senders, None, world.publisher, world.service.timing, world.clock)  # type: ignore[arg-type]
    with pytest.raises(StoreUnavailableError):  # the probe's task is retried
        watch.record("default", "search", 2 * WINDOW_S, world.clock())
    assert world.service.store.mailbox_lags()["default"]["window_s"] > WINDOW_S  # it did land
    world.clock.advance(5.0)
    watch.record("default", "search", 2 * WINDOW_S, world.clock())  # the retry: nothing new to raise
    world.clock.advance(index_lag.TELL_LEASE_S)
    world.service.sweep()
    [notice] = lag_notices(world)
    assert notice["incident"].endswith(":0")
    world.clock.advance(index_lag.TELL_LEASE_S + 1)
    world.service.sweep()
    assert len(lag_notices(world)) == 1


def test_two_instances_observing_at_once_tell_one_notice() -> None:
    world = make_world()
    a = world.service.lag
    b = LagWatch(world.service.store, world.service.senders, None, world.publisher, world.service.timing, world.clock)
    a.record("default", "search", 2 * WINDOW_S, world.clock())
    b.record("default", "search", 2 * WINDOW_S, world.clock())
    world.clock.advance(index_lag.TELL_LEASE_S + 1)
    b.record("default", "search", 2 * WINDOW_S, world.clock())
    world.service.sweep()
    assert len(lag_notices(world)) == 1
    record = world.service.store.mailbox_lags()["default"]
    assert not any(key.startswith("untold") for key in record)
