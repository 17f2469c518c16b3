"""The job state machine, in one place. Every allowed transition is listed; all others are refused.

    pending    -> sending (claimed), cancelled
    sending    -> sent (Gmail said 200), retry_wait (definitely not accepted, retryable),
                  queued (the mailbox's budget refused the attempt before it was made, or Gmail
                  refused it for rate or for the daily limit: it waits for its mailbox's turn),
                  failed (definitely not accepted: permanent, or refused past the retry horizon),
                  unknown (maybe accepted: timeout, 5xx, dropped response, crash),
                  review (accepted, while another of its attempts is known to have been accepted too)
    retry_wait -> sending (retry due, mailbox checked first when an earlier attempt may have landed),
                  sent / review (the mailbox check found one / several copies), failed, cancelled
    queued     -> sending (its turn: the mailbox's budget admits it; it may move within its pool
                  while none of its attempts may have landed), retry_wait (its turn, but an earlier
                  attempt may have landed: the mailbox is searched again before any resend),
                  sent / review (an earlier attempt's 200 arrived late: one copy / a duplicate).
                  Never failed, never a review item for pacing alone; time queued never counts
                  toward the retry horizon.
    unknown    -> unknown (checked again, index lag), sent (exactly one SENT copy),
                  sending (no copy after the unknown window and the channel allows a resend),
                  review (duplicate, ambiguous on a review channel, out of attempts)
    sent       -> review (verification found a second copy, or a second acceptance arrived late)
    failed     -> review (an attempt we had given up on was accepted after all),
                  sending / sent / cancelled (a reviewer decided: resend, mark sent, cancel)
    review     -> sending (a reviewer resends, after a fresh mailbox check found no copy),
                  sent (a reviewer marks it sent or acknowledges a duplicate), cancelled
    cancelled  -> review (a copy landed after all: an attempt in flight when a reviewer cancelled)
                  Nothing is ever sent for a cancelled job.

`sent`, `failed` and `cancelled` are *settled* (callers get their final answer) but not terminal: a job
that ended `sent` while more than one of its attempts may have landed stays under verification
until the mailbox proves a single copy, and any late evidence of a second copy reaches a human.
"""

from __future__ import annotations

from enum import Enum

from .errors import IllegalTransitionError


class State(str, Enum):
    PENDING = "pending"
    SENDING = "sending"
    SENT = "sent"
    RETRY_WAIT = "retry_wait"
    QUEUED = "queued"
    UNKNOWN = "unknown"
    REVIEW = "review"
    FAILED = "failed"
    CANCELLED = "cancelled"

    def __str__(self) -> str:
        return self.value


ALLOWED_TRANSITIONS: dict[State, frozenset[State]] = {
    State.PENDING: frozenset({State.SENDING, State.CANCELLED}),
    State.SENDING: frozenset({State.SENT, State.RETRY_WAIT, State.QUEUED, State.FAILED, State.UNKNOWN, State.REVIEW}),
    State.QUEUED: frozenset({State.SENDING, State.RETRY_WAIT, State.SENT, State.REVIEW}),
    State.RETRY_WAIT: frozenset({State.SENDING, State.SENT, State.REVIEW, State.FAILED, State.CANCELLED}),
    State.UNKNOWN: frozenset({State.UNKNOWN, State.SENT, State.SENDING, State.REVIEW}),
    State.SENT: frozenset({State.REVIEW}),
    State.FAILED: frozenset({State.REVIEW, State.SENDING, State.SENT, State.CANCELLED}),
    State.REVIEW: frozenset({State.SENDING, State.SENT, State.CANCELLED}),
    State.CANCELLED: frozenset({State.REVIEW}),
}

TERMINAL_STATES = frozenset(s for s, targets in ALLOWED_TRANSITIONS.items() if not targets)
# What a caller may treat as the final answer (HTTP 200/422, or 202 for review).
SETTLED_STATES = frozenset({State.SENT, State.FAILED, State.REVIEW, State.CANCELLED})
# States that need a human: entering one publishes a review item.
HUMAN_STATES = frozenset({State.REVIEW, State.FAILED})
# States the sweeper scans by next_check_at (sent: a verification check is due).
# (cancelled: a search is due while an attempt may still land after a reviewer cancelled.)
SWEPT_STATES = (
    State.SENDING,
    State.QUEUED,
    State.UNKNOWN,
    State.RETRY_WAIT,
    State.SENT,
    State.REVIEW,
    State.FAILED,
    State.CANCELLED,
)


def can_transition(source: State, target: State) -> bool:
    return target in ALLOWED_TRANSITIONS[source]


def check_transition(source: State, target: State) -> None:
    """Raise IllegalTransitionError unless source -> target is listed above."""
    if not can_transition(source, target):
        raise IllegalTransitionError(source.value, target.value)


def states_table() -> str:
    """The README's state table, made from ALLOWED_TRANSITIONS (`python -m safesend.core.states`)."""
    rows = ["| state | may become | settled (the caller's answer) |", "|---|---|---|"]
    for state in State:
        targets = ", ".join(f"`{t.value}`" for t in State if t in ALLOWED_TRANSITIONS[state]) or "nothing: terminal"
        rows.append(f"| `{state.value}` | {targets} | {'yes' if state in SETTLED_STATES else 'no'} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    import sys

    sys.stdout.write(states_table())
