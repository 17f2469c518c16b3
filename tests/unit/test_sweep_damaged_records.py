"""Damaged job records at the head of a due query: never advanced, they keep their place for good,
so a store that counted them against a page's limit handed the sweeper empty pages, which it takes
for the end, and every due job behind them waited for ever (store_common.readable_page)."""

from __future__ import annotations

from datetime import timedelta

from safesend.core.classify import TransportErrorKind, classify_transport
from safesend.core.states import State
from tests.unit.conftest import make_world

TIMEOUT = classify_transport(TransportErrorKind.TIMEOUT, "read timed out")
BATCH = 5


def _damage_ahead_of(world, job_id: str, count: int, field: str) -> None:
    """`count` records due before the job, in its state, that cannot be read as jobs."""
    doc = world.store.get(job_id).to_dict()
    due = doc[field] - timedelta(hours=1)
    for i in range(count):
        world.store.put_document(f"damaged{i:025d}", {**doc, "id": f"damaged{i:025d}", field: due, "events": "x"})


def test_more_damaged_due_records_than_a_batch_never_hide_the_due_job_behind_them():
    world = make_world()
    world.mailer.script = [TIMEOUT]
    job, _ = world.service.submit(world.request(key="k:e:behind"))
    assert job.state is State.UNKNOWN
    _damage_ahead_of(world, job.id, BATCH * 3, "next_check_at")
    world.clock.advance(400)  # its check is due, the window is over
    report = world.service.sweep(batch=BATCH)
    assert world.store.get(job.id).state is not State.UNKNOWN
    assert report.examined == 1


def test_a_page_has_the_limit_in_readable_jobs_and_the_next_one_starts_after_them():
    world = make_world()
    ids = []
    for i in range(3):
        world.mailer.script = [TIMEOUT]
        ids.append(world.service.submit(world.request(key=f"k:e:{i}"))[0].id)
        world.clock.advance(1)
    _damage_ahead_of(world, ids[0], BATCH, "next_check_at")
    world.clock.advance(400)
    first = world.store.find_due(State.UNKNOWN, world.clock(), 2)
    after = (first[-1].next_check_at, first[-1].id)
    rest = world.store.find_due(State.UNKNOWN, world.clock(), 2, start_after=after)
    assert [j.id for j in first] + [j.id for j in rest] == ids
