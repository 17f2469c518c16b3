"""states: the job state machine allows exactly the transitions its module docstring lists."""

from __future__ import annotations

import itertools

import pytest

from safesend.core.errors import IllegalTransitionError
from safesend.core.states import (
    HUMAN_STATES,
    SETTLED_STATES,
    SWEPT_STATES,
    TERMINAL_STATES,
    State,
    can_transition,
    check_transition,
)

# Written from the docstring of safesend/core/states.py, by hand, NOT derived from ALLOWED_TRANSITIONS:
#   pending    -> sending, cancelled
#   sending    -> sent, retry_wait, queued, failed, unknown, review
#   queued     -> sending, retry_wait, sent, review (never failed: pacing alone fails nothing)
#   retry_wait -> sending, sent, review, failed, cancelled
#   unknown    -> unknown, sent, sending, review
#   sent       -> review
#   failed     -> review, sending, sent, cancelled
#   review     -> sending, sent, cancelled
#   cancelled  -> review (a copy landed after all); nothing is ever sent for it
EXPECTED: set[tuple[str, str]] = {
    ("pending", "sending"),
    ("pending", "cancelled"),
    ("sending", "sent"),
    ("sending", "retry_wait"),
    ("sending", "failed"),
    ("sending", "unknown"),
    ("sending", "review"),
    ("sending", "queued"),
    ("queued", "sending"),
    ("queued", "retry_wait"),
    ("queued", "sent"),
    ("queued", "review"),
    ("retry_wait", "sending"),
    ("retry_wait", "sent"),
    ("retry_wait", "review"),
    ("retry_wait", "failed"),
    ("retry_wait", "cancelled"),
    ("unknown", "unknown"),
    ("unknown", "sent"),
    ("unknown", "sending"),
    ("unknown", "review"),
    ("sent", "review"),
    ("failed", "review"),
    ("failed", "sending"),
    ("failed", "sent"),
    ("failed", "cancelled"),
    ("review", "sending"),
    ("review", "sent"),
    ("review", "cancelled"),
    ("cancelled", "review"),
}
ALL_STATE_NAMES = {"pending", "sending", "sent", "retry_wait", "queued", "unknown", "review", "failed", "cancelled"}
ALL_PAIRS = list(itertools.product(State, State))


def test_state_enum_has_exactly_the_documented_states():
    assert {s.value for s in State} == ALL_STATE_NAMES


def test_expected_table_only_names_real_states():
    assert {s for pair in EXPECTED for s in pair} <= ALL_STATE_NAMES


@pytest.mark.parametrize("source,target", ALL_PAIRS, ids=[f"{s.value}->{t.value}" for s, t in ALL_PAIRS])
def test_can_transition_is_true_exactly_for_documented_pairs(source, target):
    assert can_transition(source, target) is ((source.value, target.value) in EXPECTED)


@pytest.mark.parametrize("source,target", ALL_PAIRS, ids=[f"{s.value}->{t.value}" for s, t in ALL_PAIRS])
def test_check_transition_raises_exactly_for_undocumented_pairs(source, target):
    if (source.value, target.value) in EXPECTED:
        assert check_transition(source, target) is None
    else:
        with pytest.raises(IllegalTransitionError) as info:
            check_transition(source, target)
        assert (info.value.source, info.value.target) == (source.value, target.value)


def test_number_of_allowed_transitions_matches_the_documented_list():
    assert sum(can_transition(s, t) for s, t in ALL_PAIRS) == len(EXPECTED) == 30


def test_a_sent_job_moves_again_only_to_reach_a_human():
    """New evidence (a second copy, a late accept) goes to review; a sent job is never resent."""
    assert {t.value for t in State if can_transition(State.SENT, t)} == {"review"}


def test_only_a_reviewer_decision_sends_a_job_that_needed_a_human():
    """review/failed -> sending exists for the reviewer's `resend` (after a fresh mailbox check)."""
    assert {s.value for s in State if can_transition(s, State.SENDING)} == {
        "pending",
        "retry_wait",
        "queued",
        "unknown",
        "review",
        "failed",
    }


def test_a_queued_job_never_fails_and_never_needs_a_human_for_pacing_alone():
    """Issue 24: a queued job waits for its mailbox's turn; only a copy found (a late 200) moves it
    to review, never the waiting itself."""
    assert {t.value for t in State if can_transition(State.QUEUED, t)} == {"sending", "retry_wait", "sent", "review"}
    assert not can_transition(State.QUEUED, State.FAILED)
    assert State.QUEUED not in SETTLED_STATES and State.QUEUED in SWEPT_STATES


def test_a_cancelled_job_is_never_sent_and_moves_only_to_reach_a_human():
    """Issue 18.4: a copy that lands after a cancel reaches a person; nothing is sent for it."""
    assert {t.value for t in State if can_transition(State.CANCELLED, t)} == {"review"}
    with pytest.raises(IllegalTransitionError):
        check_transition(State.CANCELLED, State.SENDING)


def test_no_state_is_terminal_every_one_can_still_reach_a_human():
    assert frozenset() == TERMINAL_STATES


def test_settled_states_are_the_final_answers_a_caller_gets():
    assert {s.value for s in SETTLED_STATES} == {"sent", "failed", "review", "cancelled"}


def test_every_state_has_an_exit():
    for source in State:
        assert any(can_transition(source, t) for t in State), source


def test_nothing_returns_to_pending():
    """review -> pending led nowhere (nothing picks a pending job up): a human's resend is a
    decision on the review job itself, never a silent park in pending."""
    assert not any(can_transition(s, State.PENDING) for s in State)


def test_human_states_are_review_and_failed():
    assert {s.value for s in HUMAN_STATES} == {"review", "failed"}


def test_swept_states_are_the_ones_with_a_due_time():
    assert [s.value for s in SWEPT_STATES] == [
        "sending",
        "queued",
        "unknown",
        "retry_wait",
        "sent",
        "review",
        "failed",
        "cancelled",
    ]
    assert len(set(SWEPT_STATES)) == len(SWEPT_STATES)
    # A fresh pending job is never due; a sent one is while unverified, a cancelled one while an
    # attempt may still land (issue 18.4).
    assert State.PENDING not in SWEPT_STATES


def test_state_str_is_its_value():
    assert str(State.RETRY_WAIT) == "retry_wait"
    assert State("unknown") is State.UNKNOWN
