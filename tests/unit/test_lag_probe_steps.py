"""A lag probe's whole state is its task's step (index_lag.Probe.step), which reconcile reads from a
request body: a step that is malformed, or that names an accept the job never had, must neither crash
reconcile nor write a lag (a made-up "accepted in 1970" would record a lag past the horizon, raise
the mailbox's window to it and tell the reviewers of an incident that never happened)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from safesend.core import index_lag
from safesend.core.classify import classify_http
from tests.unit.conftest import make_world
from tests.unit.test_http_api import call
from tests.unit.test_signals import open_api

HORIZON_S = 1800.0
REFUSED = classify_http(400, "invalidArgument")  # refused for good: the job fails, never accepted


@pytest.mark.parametrize(
    "step",
    [
        "lag-" + "9" * 20 + "-0-s",  # past datetime's range: OverflowError/OSError/ValueError before
        "lag-²-0-s",  # str.isdigit() says yes, int() says no
        "lag-1000-²-s",
        "lag-1000-0-ss",  # a kind twice
        "lag-1000-0-hs",  # not an order a probe writes
        "lag-1000-" + "9" * 400 + "-s",
    ],
)
def test_a_malformed_probe_step_is_no_probe(step: str) -> None:
    assert index_lag.parse_step(step) is None
    assert not index_lag.is_probe_step(step)


def test_the_steps_a_probe_writes_still_parse() -> None:
    world = make_world()
    probe = index_lag.first_probe(world.clock(), history=True)
    assert index_lag.parse_step(probe.step) == index_lag.Probe(
        probe.accepted_at.replace(microsecond=probe.accepted_at.microsecond // 1000 * 1000), 0, probe.pending
    )
    later = index_lag.next_probe(probe, ["history"], world.clock(), HORIZON_S)
    assert later is not None and index_lag.parse_step(later.step) is not None


def _accepted_job(world):  # type: ignore[no-untyped-def]
    job, _ = world.service.submit(world.request())
    world.scheduler.tasks.clear()
    return job


@pytest.mark.parametrize("accepted_ms", [1000, None])
def test_a_probe_naming_an_accept_outside_the_jobs_life_records_nothing(accepted_ms: int | None) -> None:
    world = make_world(index_lag_s=1.0)
    job = _accepted_job(world)
    world.clock.advance(10.0)
    if accepted_ms is None:  # an accept in the future
        accepted_ms = int((world.clock() + timedelta(hours=1)).timestamp() * 1000)
    assert world.service.lag.probe(job.id, f"lag-{accepted_ms}-0-s") == "lag_probe_unknown"
    assert world.service.store.mailbox_lags() == {}
    assert world.publisher.items == [] and world.scheduler.tasks == {}


def test_a_probe_for_a_job_never_accepted_records_nothing() -> None:
    world = make_world(index_lag_s=1.0, script=[REFUSED])
    job, _ = world.service.submit(world.request())
    assert job.provider_ref is None
    world.scheduler.tasks.clear()
    published = list(world.publisher.items)  # the failed job's own review item
    world.clock.advance(HORIZON_S + 10)
    step = index_lag.first_probe(job.created_at, history=False).step
    assert world.service.lag.probe(job.id, step) == "lag_probe_unknown"
    assert world.service.store.mailbox_lags() == {} and world.publisher.items == published


def test_reconcile_answers_a_hostile_step_without_a_crash() -> None:
    world = make_world()
    api = open_api(world)
    job = _accepted_job(world)
    status, body, _ = call(api.reconcile, body={"job_id": job.id, "step": "lag-" + "9" * 20 + "-0-s"})
    assert status == 200 and body["job_id"] == job.id
