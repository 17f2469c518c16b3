"""The never-silent properties of test_service_properties.py, once more for a Microsoft 365 mailbox:
Graph's answers (graph_classify) and its copy names (a 202 carries no id: GraphMailer names the
earliest copy of a Message-ID `graph-first:<id>`), over the same fake mailbox and the unchanged service."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from safesend.adapters.graph_mailer import first_copy_id, named_copies
from safesend.core.classify import TransportErrorKind, classify_transport
from safesend.core.graph_classify import classify_graph
from safesend.core.states import State
from tests.props import examples
from tests.unit.conftest import make_world

ACCEPT = "accept"
DROPPED_202 = ("accept", classify_transport(TransportErrorKind.TIMEOUT, "202 lost"))
LOST_BEFORE_GRAPH = classify_transport(TransportErrorKind.DISCONNECTED_AFTER_WRITE, "never arrived")
THROTTLED = classify_graph(429, "ApplicationThrottled", retry_after_s=5.0)
REFUSED = classify_graph(400, "ErrorInvalidRecipients")
UNAVAILABLE_ACCEPTED = ("accept", classify_graph(503, "ServiceUnavailable", retry_after_s=5.0))
UNAVAILABLE = classify_graph(503, "ServiceUnavailable", retry_after_s=5.0)

outcomes = st.sampled_from(
    [ACCEPT, DROPPED_202, LOST_BEFORE_GRAPH, THROTTLED, REFUSED, UNAVAILABLE_ACCEPTED, UNAVAILABLE]
)


def names_of_all_copies(world, message_id: str) -> list[str]:
    items = [
        {"id": e["gmail_id"], "internetMessageId": e["message_id"], "createdDateTime": e["at"].isoformat()}
        for e in world.mailbox.effects
        if e["message_id"] == message_id
    ]
    return sorted(h.gmail_id for h in named_copies(items))


@settings(max_examples=examples(200), deadline=None)
@given(
    script=st.lists(outcomes, min_size=1, max_size=6),
    channel=st.sampled_from(["receipts", "payments"]),
    duplicates=st.integers(min_value=0, max_value=3),
)
def test_every_graph_outcome_script_settles_with_an_honest_mailbox(script, channel, duplicates):
    world = make_world(script=list(script), provider="graph")
    request = world.request(channel=channel)
    job, _ = world.service.submit(request)
    for _ in range(duplicates):
        again, replayed = world.service.submit(request)
        assert replayed and again.id == job.id
    world.run_until_settled(job.id)
    final = world.store.get(job.id)
    copies = world.effects(job.id)

    assert final.state in (State.SENT, State.REVIEW, State.FAILED)
    assert copies <= 1, "a second copy was sent"
    if final.state is State.SENT:
        assert copies == 1 and final.known_copies == [first_copy_id(final.message_id)]
        assert final.verified is True and final.next_check_at is None
    if final.state is State.FAILED:
        assert copies == 0 and final.review_reason == "permanent_error"
    if final.state is State.REVIEW:
        assert copies == 0 and final.review_reason in ("ambiguous", "max_attempts")
    assert world.mailer.sends == final.attempts
    assert final.attempts - script.count(THROTTLED) <= 3


@settings(max_examples=examples(200), deadline=None)
@given(script=st.lists(outcomes, min_size=1, max_size=6), duplicates=st.integers(min_value=0, max_value=2))
def test_past_the_window_every_graph_duplicate_reaches_a_human(script, duplicates):
    world = make_world(script=list(script), index_lag_s=400, provider="graph")
    request = world.request(channel="receipts")
    job, _ = world.service.submit(request)
    for _ in range(duplicates):
        world.service.submit(request)
    world.run_until_settled(job.id)
    final = world.store.get(job.id)
    copies = world.effects(job.id)

    assert final.state in (State.SENT, State.REVIEW, State.FAILED)
    assert final.next_check_at is None, "something is still due"
    if copies > 1:
        assert (final.state, final.review_reason) == (State.REVIEW, "duplicate")
        assert sorted(final.known_copies) == names_of_all_copies(world, final.message_id)
    if final.state is State.SENT:
        assert copies == 1 and final.verified is True
    if final.state is State.FAILED:
        assert copies == 0


def test_a_202_is_verified_only_when_sent_items_shows_the_copy():
    """A 202 is a draft handed to transport (learn.microsoft.com/graph/outlook-things-to-know-about-send-mail):
    the job is `sent` at once (the caller hears it), verified once the mailbox shows the one copy."""
    world = make_world(provider="graph")
    job, _ = world.service.submit(world.request())
    assert job.state is State.SENT and job.verified is False and job.next_check_at is not None
    world.run_until_settled(job.id)
    final = world.store.get(job.id)
    assert final.state is State.SENT and final.verified is True and final.checks == 1
    assert world.mailer.sends == 1


def test_a_202_that_never_reaches_sent_items_reaches_a_person():
    world = make_world(provider="graph")
    job, _ = world.service.submit(world.request())
    world.mailbox.effects.clear()  # transport refused the draft after the 202 (an NDR): nothing sent
    world.run_until_settled(job.id)
    final = world.store.get(job.id)
    assert (final.state, final.review_reason) == (State.REVIEW, "unverified")
    assert world.mailer.sends == 1 and world.publisher.items, "no review item published"


def test_a_dropped_202_whose_draft_waits_past_the_window_is_never_resent():
    """Transport moves a sendMail draft to Sent Items late (throttling): the search of Drafts sees the
    copy, so the retry channel never resends past the window; it is verified once in Sent Items."""
    world = make_world(script=[DROPPED_202], index_lag_s=400, provider="graph")  # Sent Items after 400 s
    world.mailer.drafts_shown = True
    job, _ = world.service.submit(world.request(channel="receipts"))
    world.run_until_settled(job.id)
    final = world.store.get(job.id)
    assert world.mailer.sends == 1 and world.effects(job.id) == 1
    assert final.state is State.SENT and final.verified is True
    assert final.known_copies == [first_copy_id(final.message_id)]


def test_a_draft_that_never_reaches_sent_items_reaches_a_person():
    world = make_world(script=[DROPPED_202], index_lag_s=100_000, provider="graph")  # stuck in Drafts
    world.mailer.drafts_shown = True
    job, _ = world.service.submit(world.request(channel="receipts"))
    world.run_until_settled(job.id)
    final = world.store.get(job.id)
    assert world.mailer.sends == 1
    assert (final.state, final.review_reason) == (State.REVIEW, "unverified")
