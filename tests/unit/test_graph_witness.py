"""A copy known only from an answer that names no stored copy (a Graph 202) is never `verified` until
the mailbox shows it, whichever path settles the job: here, a 202 for an attempt the sweeper had
taken over, recorded while the next attempt was in flight, which is then refused."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from safesend.adapters.graph_mailer import first_copy_id
from safesend.core import lifecycle
from safesend.core.model import Accepted, Bucket, Failure
from safesend.core.policy import ChannelPolicies
from safesend.core.states import State
from tests.unit.conftest import POLICIES, TIMING

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
MID = "<job-1@mail.example.com>"


def test_a_late_202_settled_on_after_a_refused_attempt_is_verified_only_by_the_mailbox():
    policy = ChannelPolicies.from_mapping(POLICIES).get("receipts")
    job = lifecycle.new_job("j1", "k1", MID, "receipts", {"to": ["ann@example.com"]}, "h", T0)
    first = lifecycle.start_attempt(job, T0, "w1", TIMING)
    now = T0 + timedelta(seconds=TIMING.lease_s + 1)
    unknown = lifecycle.expire_lease(first, now, policy, TIMING)
    now = T0 + timedelta(seconds=TIMING.unknown_window_s + 1)
    second = lifecycle.apply_mailbox_check(unknown, [], now, "w2", policy, TIMING)
    assert second.state is State.SENDING and second.maybe_landed == 2
    late = lifecycle.record_outcome(
        second, Accepted(first_copy_id(MID), stored=False), "w1", now, policy, TIMING, lambda a, b: b
    )
    assert late.known_copies == [first_copy_id(MID)] and late.state is State.SENDING
    throttled = Failure(Bucket.NOT_ACCEPTED, True, "graph_429", "", 429, 5.0)
    settled = lifecycle.record_outcome(late, throttled, "w2", now, policy, TIMING, lambda a, b: b)
    assert settled.state is State.SENT and settled.maybe_landed == 1
    assert settled.verified is False and settled.next_check_at is not None
