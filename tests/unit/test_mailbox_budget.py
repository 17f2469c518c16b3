"""The mailbox budget (safesend.core.mailbox_budget) and the in-memory ledger: admission, refusals that
teach (AIMD, exhausted), snapshots, and the property that no interleaving exceeds a budget."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devstack.memory_ledger import InMemoryMailboxLedger
from safesend.core import mailbox_budget
from safesend.core.mailbox_budget import Budget, Refusal, Reservation
from safesend.core.mailboxes import PRESETS, Mailbox, MailboxLimits
from tests.ledger_properties import START, TIGHT, Call, assert_within_budget, calls, run_interleaved
from tests.props import examples

WORKSPACE = Mailbox("shop", "shop@example.com", token_secret="t", limits=PRESETS["workspace"])


def at(seconds: float):
    return START + timedelta(seconds=seconds)


def test_sends_within_the_minute_are_admitted_then_refused_until_the_window_frees():
    budget = Budget()
    for i in range(60):  # 60 x 100 units = the 6,000 units of the minute
        assert isinstance(mailbox_budget.reserve(budget, WORKSPACE, 100, 1, at(i * 0.5)), Reservation)
    refused = mailbox_budget.reserve(budget, WORKSPACE, 100, 1, at(30))
    assert isinstance(refused, Refusal) and refused.reason == "rate"
    # The first send (t=0, 1-s bucket) leaves the moving minute at t=61 plus the margin for its
    # arrival at Gmail after the reservation (ARRIVAL_MARGIN_S): never earlier.
    assert refused.next_free_at == at(61 + mailbox_budget.ARRIVAL_MARGIN_S)
    assert isinstance(mailbox_budget.reserve(budget, WORKSPACE, 100, 1, refused.next_free_at), Reservation)


def test_reads_count_in_the_minute_but_not_in_the_day():
    budget = Budget()
    assert isinstance(mailbox_budget.reserve(budget, WORKSPACE, 5, 0, at(0)), Reservation)
    shown = mailbox_budget.snapshot(budget, WORKSPACE, at(1))
    assert (shown.minute_used, shown.day_messages, shown.day_recipients) == (5, 0, 0)


def test_the_day_stops_at_the_safety_share_and_frees_on_the_rolling_window():
    mailbox = Mailbox("m", "m@example.com", token_secret="t", limits=MailboxLimits(None, 20, None))
    budget = Budget()
    sent = 0
    for i in range(25):
        if isinstance(mailbox_budget.reserve(budget, mailbox, 100, 1, at(i * 3600 / 25)), Reservation):
            sent += 1
    assert sent == 19  # floor(0.95 x 20): a little before Gmail's limit, never at it
    refused = mailbox_budget.reserve(budget, mailbox, 100, 1, at(3600))
    assert isinstance(refused, Refusal) and refused.reason == "day_messages"
    assert refused.next_free_at == at(24 * 3600 + 600)  # the first 10-min bucket leaves the day
    assert isinstance(mailbox_budget.reserve(budget, mailbox, 100, 1, refused.next_free_at), Reservation)


def test_recipients_per_day_and_per_message():
    mailbox = Mailbox("m", "m@example.com", token_secret="t", limits=MailboxLimits(None, None, 100))
    budget = Budget()
    assert isinstance(mailbox_budget.reserve(budget, mailbox, 100, 90, at(0)), Reservation)
    refused = mailbox_budget.reserve(budget, mailbox, 100, 10, at(1))  # 100 > floor(0.95 x 100)
    assert isinstance(refused, Refusal) and refused.reason == "day_recipients"
    never = mailbox_budget.reserve(budget, mailbox, 100, 101, at(2))
    assert never == Refusal(None, "too_many_recipients")


def test_a_rate_refusal_halves_the_rate_for_everyone_then_it_grows_back_by_a_tenth_a_minute():
    budget = Budget()
    mailbox_budget.penalise(budget, WORKSPACE, "rate", at(0))
    assert mailbox_budget.admitted_rate(budget, WORKSPACE, budget.clock) == 3000
    for i in range(20):  # the other calls in flight when the incident began: the same incident
        mailbox_budget.penalise(budget, WORKSPACE, "rate", at(i * 0.2))
    assert mailbox_budget.admitted_rate(budget, WORKSPACE, budget.clock) == 3000
    mailbox_budget.penalise(budget, WORKSPACE, "rate", at(6))  # a new incident
    assert mailbox_budget.admitted_rate(budget, WORKSPACE, budget.clock) == 1500
    shown = mailbox_budget.snapshot(budget, WORKSPACE, at(7))
    assert (shown.state, shown.minute_limit, shown.minute_configured) == ("slowed", 1500, 6000)
    for i in range(15):
        assert isinstance(mailbox_budget.reserve(budget, WORKSPACE, 100, 1, at(7 + i * 0.1)), Reservation)
    assert mailbox_budget.reserve(budget, WORKSPACE, 100, 1, at(9)).reason == "rate"  # type: ignore[union-attr]
    assert mailbox_budget.snapshot(budget, WORKSPACE, at(6 + 60 * 2)).minute_limit == 2700  # +600 a full minute
    assert mailbox_budget.snapshot(budget, WORKSPACE, at(6 + 60 * 8)).state == "ok"


def test_the_rate_never_falls_below_one_send():
    budget = Budget()
    for i in range(30):
        mailbox_budget.penalise(budget, WORKSPACE, "rate", at(i * 10))
    assert mailbox_budget.admitted_rate(budget, WORKSPACE, budget.clock) == 300  # 5% of 6,000 >= 100


def test_a_daily_limit_refusal_exhausts_sends_until_gmails_time_or_24h_reads_go_on():
    budget = Budget()
    mailbox_budget.penalise(budget, WORKSPACE, "daily", at(0), until=at(7200))
    refused = mailbox_budget.reserve(budget, WORKSPACE, 100, 1, at(10))
    assert refused == Refusal(at(7200), "exhausted")
    assert isinstance(mailbox_budget.reserve(budget, WORKSPACE, 5, 0, at(11)), Reservation)
    shown = mailbox_budget.snapshot(budget, WORKSPACE, at(12))
    assert (shown.state, shown.exhausted_until, shown.next_free_at) == ("exhausted", at(7200), at(7200))
    assert isinstance(mailbox_budget.reserve(budget, WORKSPACE, 100, 1, at(7200)), Reservation)
    other = Budget()
    mailbox_budget.penalise(other, WORKSPACE, "daily", at(0))
    assert mailbox_budget.reserve(other, WORKSPACE, 100, 1, at(1)) == Refusal(at(24 * 3600), "exhausted")


def test_time_never_goes_backward_within_one_mailbox():
    budget = Budget()
    mailbox_budget.reserve(budget, WORKSPACE, 100, 1, at(100))
    late = mailbox_budget.reserve(budget, WORKSPACE, 100, 1, at(50))  # a skewed instance
    assert isinstance(late, Reservation) and late.at == at(100)


def test_an_unlimited_mailbox_admits_everything_and_shows_no_limits():
    today = Mailbox("default", "", limits=PRESETS["unlimited"], any_sender=True)
    budget = Budget()
    assert all(isinstance(mailbox_budget.reserve(budget, today, 100, 3, at(0)), Reservation) for _ in range(500))
    shown = mailbox_budget.snapshot(budget, today, at(0))
    assert (shown.state, shown.minute_limit, shown.day_messages_limit, shown.next_free_at) == ("ok", None, None, None)


def test_the_stored_budget_is_bounded_in_size_and_round_trips():
    budget = Budget()
    for i in range(5000):  # two days of one reservation every 35 s
        mailbox_budget.reserve(budget, WORKSPACE, 5, 1, at(i * 35))
    assert len(budget.minute) <= 61 and len(budget.day) <= 145
    assert len(budget.to_json()) < 8000
    assert Budget.from_json(budget.to_json()) == budget


def test_a_damaged_budget_is_an_error_never_an_empty_one():
    for text in ('{"clock": 1}', "[]", '{"clock":0,"minute":[["x",1]],"day":[],"rate":null,"rate_at":0,'):
        try:
            Budget.from_json(text)
        except ValueError as exc:
            assert "damaged" in str(exc) or "Expecting" in str(exc)
        else:
            raise AssertionError(f"accepted {text!r}")


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=calls, threads=st.integers(1, 8))
def test_no_interleaving_of_reservations_exceeds_the_budget_in_memory(script: list[Call], threads: int):
    admitted = run_interleaved(InMemoryMailboxLedger(), TIGHT, script, threads)
    assert_within_budget(admitted, TIGHT)


def test_the_in_memory_ledger_penalises_and_shows_a_mailbox():
    ledger = InMemoryMailboxLedger()
    assert isinstance(ledger.reserve(WORKSPACE, 100, 1, at(0)), Reservation)
    ledger.penalise(WORKSPACE, "daily", at(1))
    assert ledger.reserve(WORKSPACE, 100, 1, at(2)) == Refusal(at(1 + 24 * 3600), "exhausted")
    shown = ledger.snapshot(WORKSPACE, at(3))
    assert (shown.state, shown.minute_used, shown.day_messages) == ("exhausted", 100, 1)


def test_the_simulator_charges_the_units_the_budget_counts():
    """devstack's simulator runs without safesend on its path, so it declares the costs too: the same."""
    from devstack.gmail_quota import METHOD_UNITS

    assert METHOD_UNITS == mailbox_budget.METHOD_UNITS


def test_queued_jobs_get_turns_one_send_interval_apart_after_the_budget_frees():
    """Issue 24: every instance books turns in the same budget, so a backlog is sent in order at the
    mailbox queue's rate and each job's Retry-After (its turn) counts every job before it."""
    budget = Budget()
    interval = 100 * 60 / (6000 * WORKSPACE.safety_share)
    turns = [mailbox_budget.book_turn(budget, WORKSPACE, at(63), at(1)) for _ in range(3)]
    assert turns[0] == at(63)
    assert [(t - turns[0]).total_seconds() for t in turns] == pytest.approx([0, interval, 2 * interval])
    # A new job's send waits behind them (backlog); the queued job's own turn is admitted.
    fresh = mailbox_budget.reserve(budget, WORKSPACE, 100, 1, at(2), behind_turns=True)
    assert isinstance(fresh, Refusal) and fresh.reason == "backlog" and fresh.next_free_at == turns[-1]
    assert isinstance(mailbox_budget.reserve(budget, WORKSPACE, 100, 1, at(63)), Reservation)
    assert budget.turns_pending == 2


def test_a_turn_past_the_days_allowance_waits_for_the_rolling_day():
    budget = Budget()
    small = dataclasses.replace(WORKSPACE, limits=dataclasses.replace(WORKSPACE.limits, messages_per_day=3))
    allowance = small.day_allowance(3)
    for n in range(allowance):
        assert isinstance(mailbox_budget.reserve(budget, small, 100, 1, at(n)), Reservation)
    turn = mailbox_budget.book_turn(budget, small, at(10), at(10))
    assert turn >= at(24 * 3600)  # the first send's slot frees with the rolling day, not in a minute
