"""Issue 20.3, the pure rules: a mailbox's observed index lag kept in a bounded window, its p50/p99/max,
the raise of its effective unknown window (once, never above the horizon), and the probe's steps."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

from safesend.core import index_lag
from safesend.core.lifecycle import Timing, apply_mailbox_check, new_job, start_attempt
from safesend.core.policy import ChannelPolicy, OnUnknown
from safesend.core.states import State

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
WINDOW, HORIZON = 3.0, 10.0


def test_stats_are_nearest_rank_over_the_kept_window():
    assert index_lag.stats([]) == {"count": 0, "p50_s": None, "p99_s": None, "max_s": None}
    samples = [float(n) for n in range(1, 101)]
    assert index_lag.stats(samples) == {"count": 100, "p50_s": 50.0, "p99_s": 99.0, "max_s": 100.0}
    record: dict | None = None
    for n in range(index_lag.KEEP + 50):
        record, _ = index_lag.observe(record, "m", "history", float(n), T0, WINDOW, HORIZON)
    assert record is not None and len(record["history_s"]) == index_lag.KEEP
    assert record["history_s"][0] == 50.0  # the oldest went first


def test_a_lag_past_the_window_raises_it_once_to_twice_the_lag_and_never_past_the_horizon():
    record, raised = index_lag.observe(None, "m", "search", 1.0, T0, WINDOW, HORIZON)
    assert raised is None and index_lag.effective_window_s(WINDOW, record, HORIZON) == WINDOW
    record, raised = index_lag.observe(record, "m", "search", 4.0, T0, WINDOW, HORIZON)
    assert raised == index_lag.Raise("m", WINDOW, 8.0, 4.0, False)
    assert index_lag.effective_window_s(WINDOW, record, HORIZON) == 8.0 and record["raised_at"] == T0
    for lag in (4.5, 6.0, 7.9):  # below the raised window: no second raise, no second notice
        record, raised = index_lag.observe(record, "m", "search", lag, T0, WINDOW, HORIZON)
        assert raised is None
    record, raised = index_lag.observe(record, "m", "search", 8.5, T0, WINDOW, HORIZON)
    assert raised is not None and raised.window_s == HORIZON  # capped at the horizon
    record, raised = index_lag.observe(record, "m", "search", 9.5, T0, WINDOW, HORIZON)
    assert raised is None  # already at the horizon: nothing left to raise
    # The change log's lag is kept and shown, but never moves the window (the search decides "not found").
    _, raised = index_lag.observe(None, "m", "history", 50.0, T0, WINDOW, HORIZON)
    assert raised is None


def test_a_lag_beyond_the_horizon_is_told_once():
    record, raised = index_lag.observe(None, "m", "search", HORIZON, T0, WINDOW, HORIZON, beyond_horizon=True)
    assert raised == index_lag.Raise("m", WINDOW, HORIZON, HORIZON, True)
    assert record["beyond_horizon_at"] == T0
    _, again = index_lag.observe(record, "m", "search", HORIZON, T0, WINDOW, HORIZON, beyond_horizon=True)
    assert again is None


def test_the_effective_window_is_the_larger_of_the_configured_and_the_raised_one_up_to_the_horizon():
    assert index_lag.effective_window_s(WINDOW, {"window_s": 2.0}, HORIZON) == WINDOW
    assert index_lag.effective_window_s(WINDOW, {"window_s": 50.0}, HORIZON) == HORIZON
    assert index_lag.effective_window_s(WINDOW, None, HORIZON) == WINDOW
    policy = ChannelPolicy(name="receipts", on_unknown=OnUnknown.RETRY)
    assert index_lag.effective_policy(policy, WINDOW, WINDOW) is policy
    assert index_lag.effective_policy(policy, WINDOW, 8.0).unknown_window_s == 8.0


def test_the_lifecycle_waits_for_the_effective_window_before_a_resend():
    timing = Timing(lease_s=5, index_lag_s=1, unknown_window_s=WINDOW, recheck_s=1, verify_horizon_s=HORIZON)
    policy = ChannelPolicy(name="receipts", on_unknown=OnUnknown.RETRY)
    sending = start_attempt(new_job("a" * 32, "k", "<m@x>", "receipts", {}, "h", T0), T0, "o", timing)
    unknown = sending.copy()
    unknown.state = State.UNKNOWN
    at = T0 + timedelta(seconds=5)  # past the configured 3 s window, inside a raised 8 s one
    assert apply_mailbox_check(unknown, [], at, "o", policy, timing).state is State.SENDING  # resent
    raised = index_lag.effective_policy(policy, WINDOW, 8.0)
    waiting = apply_mailbox_check(unknown, [], at, "o", raised, timing)
    assert waiting.state is State.UNKNOWN and waiting.next_check_at == at + timedelta(seconds=1)


def test_probe_steps_carry_the_probe_and_end_at_the_horizon():
    probe = index_lag.first_probe(T0, history=True)
    assert index_lag.parse_step(probe.step) == probe and index_lag.is_probe_step(probe.step)
    assert not index_lag.is_probe_step("a1-c0-123") and not index_lag.is_probe_step("lag-1-2-x")
    looks = [probe]
    while (following := index_lag.next_probe(looks[-1], [], looks[-1].look_at(HORIZON), HORIZON)) is not None:
        looks.append(following)
        assert len(looks) <= index_lag.MAX_PROBES
    times = [(p.look_at(HORIZON) - T0).total_seconds() for p in looks]
    assert times[0] == index_lag.PROBE_FIRST_S and times[-1] == HORIZON
    gaps = [b / a for a, b in itertools.pairwise(times[:-1])]
    assert all(g <= index_lag.PROBE_GROWTH + 1e-4 for g in gaps)  # each look within 25 % of the last
    searched = index_lag.next_probe(probe, ["search"], T0, HORIZON)
    assert searched is not None and searched.pending == ("history",)
    assert index_lag.next_probe(probe, ["search", "history"], T0, HORIZON) is None
