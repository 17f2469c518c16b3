"""Property: whatever Gmail and the network do to each attempt, the acceptance log stays honest.

Hypothesis draws a script of attempt outcomes (accepted; accepted but the answer lost;
lost before Gmail; refused for now; refused for good), the channel, and how many
duplicate webhooks arrive, then lets reconcile run to a settled state. Because the
mailbox's index lag (30 s) is shorter than the unknown window (300 s), the service must
never produce a second copy, and what it reports must match what the mailbox holds.

Past that assumption (index lag 400 s > window 300 s, < verification horizon 1800 s) a
retry channel can resend a copy that already landed: then the job must never end `sent`
with two copies; it must end in `review` (duplicate) with a review item saying so.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from safesend.core.classify import TransportErrorKind, classify_http, classify_transport
from safesend.core.states import State
from tests.props import examples
from tests.unit.conftest import make_world

ACCEPT = "accept"
DROPPED_AFTER_ACCEPT = ("accept", classify_transport(TransportErrorKind.TIMEOUT, "answer lost"))
LOST_BEFORE_GMAIL = classify_transport(TransportErrorKind.DISCONNECTED_AFTER_WRITE, "never arrived")
RATE_LIMITED = classify_http(429, "rateLimitExceeded")
REFUSED = classify_http(400, "invalidArgument")
SERVER_ERROR_ACCEPTED = ("accept", classify_http(503, "backendError"))

outcomes = st.sampled_from(
    [ACCEPT, DROPPED_AFTER_ACCEPT, LOST_BEFORE_GMAIL, RATE_LIMITED, REFUSED, SERVER_ERROR_ACCEPTED]
)


@settings(max_examples=examples(300), deadline=None)
@given(
    script=st.lists(outcomes, min_size=1, max_size=6),
    channel=st.sampled_from(["receipts", "payments"]),
    duplicates=st.integers(min_value=0, max_value=3),
    budget=st.sampled_from([0.5, 40.0]),
)
def test_every_outcome_script_settles_with_an_honest_mailbox(script, channel, duplicates, budget):
    world = make_world(script=list(script))
    world.service.request_budget_s = budget
    request = world.request(channel=channel)
    job, _ = world.service.submit(request)
    for _ in range(duplicates):  # n8n retries while we are reconciling
        again, replayed = world.service.submit(request)
        assert replayed and again.id == job.id
    world.run_until_settled(job.id)
    final = world.store.get(job.id)
    copies = world.effects(job.id)

    assert final.state in (State.SENT, State.REVIEW, State.FAILED)
    assert copies <= 1, "a second copy was sent"
    if final.state is State.SENT:
        assert copies == 1 and final.provider_ref["gmail_id"] == world.mailbox.effects[0]["gmail_id"]
        assert final.verified is True and final.next_check_at is None
    if final.state is State.FAILED:
        assert copies == 0 and final.review_reason == "permanent_error"
    if final.state is State.REVIEW:
        assert copies == 0 and final.review_reason in ("ambiguous", "max_attempts")
        assert len(world.publisher.items) == 1
    # Refusals (429...) do not use up attempts: only attempts that may have landed are bounded.
    assert world.mailer.sends == final.attempts
    assert final.attempts - script.count(RATE_LIMITED) <= 3
    kinds = [e["kind"] for e in final.events]
    if channel == "payments" and "outcome_unknown" in kinds:  # never resent after an unknown outcome
        assert "attempt_started" not in kinds[kinds.index("outcome_unknown") :]


@settings(max_examples=examples(300), deadline=None)
@given(
    script=st.lists(outcomes, min_size=1, max_size=6),
    duplicates=st.integers(min_value=0, max_value=2),
    budget=st.sampled_from([0.5, 40.0]),
)
def test_past_the_window_every_duplicate_reaches_a_human(script, duplicates, budget):
    world = make_world(script=list(script), index_lag_s=400)
    world.service.request_budget_s = budget
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
        reasons = [attrs["reason"] for _, attrs in world.publisher.items]
        assert reasons[-1] == "duplicate"
        assert sorted(final.known_copies) == sorted(e["gmail_id"] for e in world.mailbox.effects)
    if final.state is State.SENT:
        assert copies == 1 and final.verified is True
    if final.state is State.FAILED:
        assert copies == 0
