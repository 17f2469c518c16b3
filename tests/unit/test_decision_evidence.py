"""A reviewer's mark-sent or acknowledge settles the job with the copies they saw. A copy the
decision's own fresh search finds beyond those (it became searchable, or landed, while the page
was open) was seen by nobody: it must reach a person, never be accepted on their behalf."""

from __future__ import annotations

from safesend.core.lifecycle import current_review_id, new_job
from safesend.core.model import Job
from safesend.core.states import State
from tests.unit.conftest import World, make_world

RAW = b"Message-ID: <seen-1@mail.example.com>\r\nSubject: x\r\n\r\nhi\r\n"


def _in_review(world: World, reason: str, known: list[str], maybe_landed: int) -> Job:
    """A job waiting for a person with `known` copies on its page (what the reviewer sees)."""
    job = new_job(
        "5ee00000000000000000000000000001", "seen:1", "<seen-1@mail.example.com>", "payments", {}, "h", world.clock()
    )
    job.state, job.review_reason, job.review_entries = State.REVIEW, reason, 1
    job.attempts = job.maybe_landed = maybe_landed
    job.known_copies, job.last_attempt_at = list(known), world.clock()
    world.store.claim_or_get(job)
    return job


def test_mark_sent_over_copies_the_page_never_showed_reaches_a_person():
    """The page showed no copy (ambiguous); by the click both attempts have become searchable."""
    world = make_world(index_lag_s=0)
    job = _in_review(world, "ambiguous", [], maybe_landed=2)
    for _ in range(2):
        world.mailbox.accept(RAW)
    outcome = world.service.decide(job.id, current_review_id(job), "mark_sent", "ann@example.com")
    assert outcome.result == "marked_sent"
    after = world.store.get(job.id)
    assert (after.state, after.review_reason, after.review_entries) == (State.REVIEW, "duplicate", 2)
    assert after.decisions[-1]["copies"] == [], "the record says what the reviewer saw, not what the search found"
    assert world.publisher.items[-1][1]["reason"] == "duplicate"


def test_acknowledging_two_copies_does_not_accept_a_third_the_page_never_showed():
    world = make_world(index_lag_s=0)
    seen = [world.mailbox.accept(RAW).gmail_id for _ in range(2)]
    job = _in_review(world, "duplicate", seen, maybe_landed=3)
    world.mailbox.accept(RAW)  # the third attempt's copy, searchable by the time of the click
    world.service.decide(job.id, current_review_id(job), "acknowledge", "ann@example.com")
    after = world.store.get(job.id)
    assert (after.state, after.review_reason, after.review_entries) == (State.REVIEW, "duplicate", 2)
    assert len(after.known_copies) == 3


def test_mark_sent_on_the_one_copy_the_search_finds_still_ends_sent():
    """One copy, seen or not, is no duplicate: the reviewer's word settles the job."""
    world = make_world(index_lag_s=0)
    job = _in_review(world, "ambiguous", [], maybe_landed=1)
    world.mailbox.accept(RAW)
    world.service.decide(job.id, current_review_id(job), "mark_sent", "ann@example.com")
    after = world.store.get(job.id)
    assert (after.state, after.verified, after.review_entries) == (State.SENT, True, 1)


def test_acknowledging_exactly_the_copies_shown_ends_sent():
    world = make_world(index_lag_s=0)
    seen = [world.mailbox.accept(RAW).gmail_id for _ in range(2)]
    job = _in_review(world, "duplicate", seen, maybe_landed=2)
    world.service.decide(job.id, current_review_id(job), "acknowledge", "ann@example.com")
    after = world.store.get(job.id)
    assert (after.state, after.review_entries) == (State.SENT, 1)
    assert after.decisions[-1]["copies"] == seen
