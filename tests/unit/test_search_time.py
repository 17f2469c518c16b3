"""Guarantee 1 is about when Gmail answered the search, not when its answer reached us (review of the
core guarantee): "never resent before a mailbox search has found nothing for the unknown window after
the attempt". A search evaluated just before the window ended whose answer arrived after it (a slow
answer, retries: up to the read deadline) used to count as past the window, and the job was resent
though a copy indexed right at the window's end would have shown to a search made then."""

from __future__ import annotations

from datetime import timedelta

from safesend.core.classify import TransportErrorKind, classify_transport
from safesend.core.states import State
from tests.unit.conftest import TIMING, make_world

SLOW_ANSWER_S = 31.0  # within one read's deadline with a retry (READ_TRIES x read timeout)


def test_a_search_made_inside_the_window_never_allows_a_resend_whatever_its_answer_took():
    lag = TIMING.unknown_window_s - 5  # every copy is searchable within the window: guarantee 1 applies
    world = make_world(script=[("accept", classify_transport(TransportErrorKind.TIMEOUT))], index_lag_s=lag)
    search = world.mailer.find_by_message_id

    def slow_search(message_id):
        hits = search(message_id)  # Gmail evaluates the query now...
        world.clock.advance(SLOW_ANSWER_S)  # ...and its answer arrives this much later
        return hits

    world.mailer.find_by_message_id = slow_search  # type: ignore[method-assign]
    job, _ = world.service.submit(world.request())
    assert job.state is State.UNKNOWN
    world.run_until_settled(job.id)
    final = world.store.get(job.id)
    assert world.effects(job.id) == 1 and world.mailer.sends == 1
    assert final.state is State.SENT and final.verified


def test_the_window_is_still_measured_from_the_attempt_when_searches_are_instant():
    world = make_world(script=[classify_transport(TransportErrorKind.TIMEOUT)])
    job, _ = world.service.submit(world.request())
    world.run_until_settled(job.id)
    final = world.store.get(job.id)
    resent = [e for e in final.events if e["kind"] == "attempt_started"][-1]["at"]
    assert final.state is State.SENT and world.mailer.sends == 2
    assert resent >= job.last_attempt_at + timedelta(seconds=TIMING.unknown_window_s)
