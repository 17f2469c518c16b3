"""The job state machine, in one place. Every allowed transition is listed; all others are refused.

    pending    -> sending (claimed), cancelled
    sending    -> sent (Gmail said 200), retry_wait (definitely not accepted, retryable),
                  failed (definitely not accepted, permanent or out of attempts),
                  unknown (maybe accepted: timeout, 5xx, dropped response, crash)
    retry_wait -> sending (retry due, mailbox checked first when in doubt), sent / review
                  (the mailbox check found one / several copies), failed, cancelled
    unknown    -> unknown (checked again, index lag), sent (exactly one SENT hit),
                  sending (no hit after the lag window and the channel allows a resend),
                  review (duplicate, ambiguous on a review channel, out of attempts)
    review     -> sent, cancelled, pending (a human settled it)
    sent, failed, cancelled: terminal.
"""

from __future__ import annotations

from enum import Enum

from .errors import IllegalTransitionError


class State(str, Enum):
    PENDING = "pending"
    SENDING = "sending"
    SENT = "sent"
    RETRY_WAIT = "retry_wait"
    UNKNOWN = "unknown"
    REVIEW = "review"
    FAILED = "failed"
    CANCELLED = "cancelled"

    def __str__(self) -> str:
        return self.value


ALLOWED_TRANSITIONS: dict[State, frozenset[State]] = {
    State.PENDING: frozenset({State.SENDING, State.CANCELLED}),
    State.SENDING: frozenset({State.SENT, State.RETRY_WAIT, State.FAILED, State.UNKNOWN}),
    State.RETRY_WAIT: frozenset({State.SENDING, State.SENT, State.REVIEW, State.FAILED, State.CANCELLED}),
    State.UNKNOWN: frozenset({State.UNKNOWN, State.SENT, State.SENDING, State.REVIEW}),
    State.REVIEW: frozenset({State.SENT, State.CANCELLED, State.PENDING}),
    State.SENT: frozenset(),
    State.FAILED: frozenset(),
    State.CANCELLED: frozenset(),
}

TERMINAL_STATES = frozenset(s for s, targets in ALLOWED_TRANSITIONS.items() if not targets)
# States that need a human: entering one publishes a review item.
HUMAN_STATES = frozenset({State.REVIEW, State.FAILED})
# States the sweeper scans by next_check_at.
SWEPT_STATES = (State.SENDING, State.UNKNOWN, State.RETRY_WAIT, State.REVIEW, State.FAILED)


def can_transition(source: State, target: State) -> bool:
    return target in ALLOWED_TRANSITIONS[source]


def check_transition(source: State, target: State) -> None:
    """Raise IllegalTransitionError unless source -> target is listed above."""
    if not can_transition(source, target):
        raise IllegalTransitionError(source.value, target.value)
