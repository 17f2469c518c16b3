"""Pacing (safesend.core.pacing): the choice of mailbox in a pool, when a job may move, and Retry-After."""

from __future__ import annotations

import dataclasses
from collections import Counter
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devstack.memory_ledger import InMemoryMailboxLedger
from safesend.core import mailbox_budget
from safesend.core.lifecycle import Timing, new_job, start_attempt
from safesend.core.mailbox_budget import Budget, MailboxSnapshot, Reservation
from safesend.core.mailboxes import PRESETS, Mailbox, MailboxLimits
from safesend.core.pacing import bind, choose_mailbox, may_move, retry_after_s
from tests.ledger_properties import START
from tests.props import examples

DAY = 24 * 3600 + 600  # the day window plus one 10-minute bucket
WORKSPACE = Mailbox("shop", "shop@example.com", token_secret="t", limits=PRESETS["workspace"])


def at(seconds: float):
    return START + timedelta(seconds=seconds)


def shown(mailbox_id: str = "a", **values) -> MailboxSnapshot:
    base = {
        "mailbox": mailbox_id,
        "state": "ok",
        "minute_used": 0,
        "minute_limit": 6000,
        "minute_configured": 6000,
        "day_messages": 0,
        "day_messages_limit": 1900,
        "day_recipients": 0,
        "day_recipients_limit": 9500,
        "next_free_at": None,
        "exhausted_until": None,
    }
    return MailboxSnapshot(**{**base, **values})


def test_least_used_share_of_the_day_first_then_of_the_minute_then_pool_order():
    pool = [
        shown("a", day_messages=100),
        shown("b", day_messages=50, day_messages_limit=1900),
        shown("c", day_messages=10, day_messages_limit=190),  # 5.3 % of its day: more used than b's 2.6 %
    ]
    assert choose_mailbox(pool) == "b"
    assert choose_mailbox([shown("a", minute_used=300), shown("b", minute_used=200)]) == "b"
    assert choose_mailbox([shown("a"), shown("b")]) == "a"


def test_exhausted_mailboxes_are_skipped_while_another_can_send():
    pool = [shown("a", state="exhausted", exhausted_until=at(100)), shown("b", day_messages=1800)]
    assert choose_mailbox(pool) == "b"
    all_out = [
        shown("a", state="exhausted", next_free_at=at(900)),
        shown("b", state="exhausted", next_free_at=at(300)),
    ]
    assert choose_mailbox(all_out) == "b"  # the job waits where a slot frees first


def test_a_bound_job_moves_only_while_none_of_its_attempts_may_have_landed():
    pool = [shown("a", state="exhausted", exhausted_until=at(100)), shown("b")]
    assert choose_mailbox(pool, bound="a", movable=True) == "b"
    assert choose_mailbox(pool, bound="a", movable=False) == "a"
    assert choose_mailbox([shown("a", day_messages=500), shown("b")], bound="a", movable=True) == "a"  # no churn
    with pytest.raises(ValueError):
        choose_mailbox([])


def test_may_move_reads_whether_an_attempt_may_have_landed():
    job = new_job("id1", "c:e:o", "<m@mail.example.com>", "receipts", {"to": ["a@example.com"]}, "h" * 64, START)
    assert may_move(job)  # claimed, nothing sent yet
    attempted = start_attempt(job, START, "owner", Timing())
    assert attempted.maybe_landed == 1 and not may_move(attempted)  # its attempt may have reached Gmail
    assert may_move(dataclasses.replace(attempted, maybe_landed=0))  # every attempt provably refused


def test_binding_records_every_move_so_both_mailboxes_are_searched():
    assert bind([], "a") == ["a"]
    assert bind(["a"], "a") == ["a"]
    assert bind(["a"], "b") == ["a", "b"]  # current last, the earlier one kept
    assert bind(["a", "b"], "a") == ["b", "a"]


def test_retry_after_counts_the_backlog_at_the_admitted_rate():
    full = shown(minute_used=6000, next_free_at=at(20))
    assert retry_after_s(full, ahead=0, now=at(0)) == 20
    assert retry_after_s(full, ahead=59, now=at(0)) == 20 + 59  # 100 units a send at 6,000 a minute: 1 s each
    slowed = shown(minute_limit=3000)
    assert retry_after_s(slowed, ahead=30, now=at(0)) == 60
    assert retry_after_s(shown(), ahead=0, now=at(0)) == 1  # never 0: a Retry-After means "ask later"
    assert retry_after_s(shown(), ahead=10, now=at(0), units_per_job=120) == 12  # reads included


def test_retry_after_past_the_days_allowance_waits_for_the_rolling_window_honestly():
    """The day bench: 1,900 sends (0.95 x 2,000) in the first minutes, then 600 more are queued."""
    mailbox = dataclasses.replace(WORKSPACE, limits=MailboxLimits(None, 2000, None))
    budget = Budget()
    for i in range(1900):
        assert isinstance(mailbox_budget.reserve(budget, mailbox, 100, 1, at(i * 0.1)), Reservation)
    snapshot = mailbox_budget.snapshot(budget, mailbox, at(200))
    assert snapshot.state == "exhausted" and snapshot.day_frees == ((at(DAY), 1900),)
    first = retry_after_s(snapshot, ahead=0, now=at(200))
    assert first == DAY - 200  # when the first 10-min day bucket has left the rolling window: not before
    paced = dataclasses.replace(snapshot, minute_limit=6000)
    assert retry_after_s(paced, ahead=599, now=at(200)) == DAY - 200 + 599  # then one a second
    assert retry_after_s(snapshot, ahead=1900 + 5, now=at(200)) == DAY + 24 * 3600 - 200  # a day later again


def test_retry_after_of_an_exhausted_mailbox_is_its_exhaustion_end():
    snapshot = shown(state="exhausted", exhausted_until=at(3600), next_free_at=at(3600))
    assert retry_after_s(snapshot, ahead=0, now=at(0)) == 3600


@settings(max_examples=examples(25), deadline=None)
@given(
    mailboxes=st.integers(2, 5),
    jobs=st.integers(300, 900),
    gaps=st.lists(st.floats(0.0, 5.0), min_size=1, max_size=20),
)
def test_a_pool_shares_a_long_run_evenly(mailboxes: int, jobs: int, gaps: list[float]):
    """Every job goes to the chosen mailbox; a refused one waits for the next free slot of that
    mailbox. Over the run each mailbox's share of the sends is within 10 % of the others'."""
    limits = MailboxLimits(units_per_minute=1200, messages_per_day=800, recipients_per_day=None)
    pool = [Mailbox(f"m{i}", f"m{i}@example.com", token_secret="t", limits=limits) for i in range(mailboxes)]
    ledger = InMemoryMailboxLedger()
    sent: Counter[str] = Counter()
    now = START
    for index in range(jobs):
        now += timedelta(seconds=gaps[index % len(gaps)])
        for _ in range(10):  # bounded: a job tries at most 10 next-free slots
            snapshots = [ledger.snapshot(m, now) for m in pool]
            chosen = next(m for m in pool if m.id == choose_mailbox(snapshots))
            outcome = ledger.reserve(chosen, 100, 1, now)
            if isinstance(outcome, Reservation):
                sent[chosen.id] += 1
                break
            assert outcome.next_free_at is not None
            now = max(now, outcome.next_free_at)
    counts = [sent[m.id] for m in pool]
    assert sum(counts) == min(jobs, mailboxes * 760)
    mean = sum(counts) / len(counts)
    assert all(abs(count - mean) <= 0.1 * mean for count in counts), counts
