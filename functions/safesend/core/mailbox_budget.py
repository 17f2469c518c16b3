"""The budget of one sender mailbox: what Gmail will still take from it, shared by every instance. Pure.

Every Gmail call first reserves its quota units (a send also its message and its recipients) here.
A reservation is admitted only if, with it, the per-minute moving window stays within the admitted
rate AND the rolling 24 h message and recipient counts stay within the safety share of the daily
limits. The ledgers (adapters) keep one `Budget` per mailbox in a shared store and apply these
functions under a compare-and-set or a row lock, so no interleaving of instances exceeds a budget.

Why coarse buckets: the stored budget is one Firestore document (or row) rewritten on every
reservation, so its size must be bounded whatever the traffic: the minute is kept in 1-second
buckets (at most 61) and the day in 10-minute buckets (at most 145). A bucket is counted for as
long as any part of it is inside the window, so the count is never below the exact one: at worst
a slot frees one bucket late (1 s for the minute, 10 min for the day), never early.

Why time never goes backward per mailbox: instances' clocks differ a little, and a reservation made
"earlier" than the latest one seen could read a window already pruned. The budget keeps the latest
time it has seen and evaluates every later call at no earlier time (Reservation.at says which).

Refusals teach (AIMD): a rate refusal from Gmail halves the admitted rate (once per incident: not
again within DECREASE_HOLD_S; never below a floor that still lets one send through); it then grows
back by a tenth of the limit per full minute. A daily
limit refusal marks the mailbox exhausted until the time Gmail gave, else for 24 h; reads go on.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .mailboxes import Mailbox

METHOD_UNITS = {"send": 100, "list": 5, "get": 5, "history": 2, "profile": 1}  # Gmail API quota page
SEND_UNITS = METHOD_UNITS["send"]
MINUTE_S = 60
MINUTE_BUCKET_S = 1
# A call reaches Gmail a little after it was reserved (the ledger's commit, the connection): Gmail's
# window for it ends that much later than ours would. Measured on the local stack with two processes
# (tests/integration/test_pacing_stack.py): up to ~0.5 s under a burst; 2 s keeps Gmail's count under
# the limit at a cost of 2/60 of the rate at the window's edge only.
ARRIVAL_MARGIN_S = 2
MINUTE_SPAN_S = MINUTE_BUCKET_S + MINUTE_S + ARRIVAL_MARGIN_S  # how long a reservation counts in the minute
DAY_S = 24 * 3600
DAY_BUCKET_S = 600
DECREASE = 0.5  # multiplicative decrease of the admitted rate on a rate refusal
INCREASE_SHARE = 0.1  # additive increase per full minute, as a share of the limit
FLOOR_SHARE = 0.05  # the admitted rate never goes below this share of the limit (nor below one send)
# Rate refusals this close after a decrease belong to the same incident (the calls in flight when it
# began), so they do not halve the rate again: one burst of 20 refusals must not drive it to the floor.
DECREASE_HOLD_S = 5.0

RATE, DAILY = "rate", "daily"  # penalise() kinds


@dataclass(frozen=True)
class Reservation:
    """Admitted: the call may be made now. `at` is the time it was counted at."""

    mailbox: str
    units: int
    recipients: int
    at: datetime


@dataclass(frozen=True)
class Refusal:
    """Not now. `next_free_at`: when the same reservation could be admitted (None: never, e.g. more
    recipients than a message may carry). `reason`: rate, day_messages, day_recipients, exhausted,
    too_many_recipients, over_limit."""

    next_free_at: datetime | None
    reason: str


@dataclass(frozen=True)
class MailboxSnapshot:
    """What /mailboxes shows of one mailbox. Limits None: not enforced. `next_free_at`: when one more
    send would be admitted (None with state ok: now)."""

    mailbox: str
    state: str  # ok, slowed, exhausted
    minute_used: int
    minute_limit: int | None  # the admitted rate now (below the configured one while slowed)
    minute_configured: int | None
    day_messages: int
    day_messages_limit: int | None  # the safety share of the daily limit
    day_recipients: int
    day_recipients_limit: int | None
    next_free_at: datetime | None
    exhausted_until: datetime | None
    day_frees: tuple[tuple[datetime, int], ...] = ()  # when the day's counted messages leave the window


@dataclass
class Budget:
    """The stored state of one mailbox's budget (JSON in the ledgers). Times are epoch seconds."""

    clock: float = 0.0
    minute: dict[int, int] = field(default_factory=dict)  # bucket start -> units
    day: dict[int, list[int]] = field(default_factory=dict)  # bucket start -> [messages, recipients]
    rate: float | None = None  # admitted units per minute after refusals; None: the configured limit
    rate_at: float = 0.0
    exhausted_until: float = 0.0
    turn_tail: float = 0.0  # the latest turn given to a queued job (book_turn): the backlog's end
    turns_pending: int = 0  # turns given and not yet sent (reset once the backlog's end has passed)

    def to_json(self) -> str:
        data = {
            "clock": self.clock,
            "minute": [[start, units] for start, units in sorted(self.minute.items())],
            "day": [[start, *counts] for start, counts in sorted(self.day.items())],
            "rate": self.rate,
            "rate_at": self.rate_at,
            "exhausted_until": self.exhausted_until,
            "turn_tail": self.turn_tail,
            "turns_pending": self.turns_pending,
        }
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | None) -> Budget:
        """The stored budget; an absent one is empty. A damaged one raises ValueError (never a guess
        of "nothing used", which could overrun Gmail's limits)."""
        if not text:
            return cls()
        try:
            data: Mapping[str, Any] = json.loads(text)
            return cls(
                clock=float(data["clock"]),
                minute={int(s): int(u) for s, u in data["minute"]},
                day={int(s): [int(m), int(r)] for s, m, r in data["day"]},
                rate=None if data["rate"] is None else float(data["rate"]),
                rate_at=float(data["rate_at"]),
                exhausted_until=float(data["exhausted_until"]),
                turn_tail=float(data.get("turn_tail", 0.0)),
                turns_pending=int(data.get("turns_pending", 0)),
            )
        except (TypeError, KeyError, ValueError) as exc:
            raise ValueError(f"stored mailbox budget is damaged: {exc!r}") from None


def _epoch(moment: datetime) -> float:
    return moment.timestamp() if moment.tzinfo else moment.replace(tzinfo=UTC).timestamp()


def _moment(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def _advance(budget: Budget, now: datetime) -> float:
    """The time to evaluate at (never before the latest seen); drops buckets out of every window."""
    at = max(_epoch(now), budget.clock)
    budget.clock = at
    budget.minute = {s: u for s, u in budget.minute.items() if s + MINUTE_SPAN_S > at}
    budget.day = {s: c for s, c in budget.day.items() if s + DAY_BUCKET_S + DAY_S > at}
    return at


def admitted_rate(budget: Budget, mailbox: Mailbox, at: float) -> float | None:
    """Units per minute admitted now: the limit, or less after a rate refusal (growing back)."""
    limit = mailbox.limits.units_per_minute
    if limit is None:
        return None
    if budget.rate is None:
        return float(limit)
    minutes = math.floor(max(at - budget.rate_at, 0.0) / 60.0)
    return min(float(limit), budget.rate + INCREASE_SHARE * limit * minutes)


def _frees_at(buckets: list[tuple[int, int]], span_s: int, used: int, need: int, allowance: int) -> float | None:
    """When enough of `buckets` (start, amount) has left the window for `need` more to fit."""
    if need > allowance:
        return None
    excess = used + need - allowance
    for start, amount in sorted(buckets):
        excess -= amount
        if excess <= 0:
            return float(start + span_s)
    return None


def _check(budget: Budget, mailbox: Mailbox, units: int, recipients: int, at: float) -> Refusal | None:
    limits = mailbox.limits
    if recipients > limits.recipients_per_message:
        return Refusal(None, "too_many_recipients")
    send = recipients > 0
    if send and budget.exhausted_until > at:
        return Refusal(_moment(budget.exhausted_until), "exhausted")
    rate = admitted_rate(budget, mailbox, at)
    if rate is not None:
        configured = limits.units_per_minute or 0
        if units > configured:
            return Refusal(None, "over_limit")
        used = sum(budget.minute.values())
        if used + units > rate:
            allowance = math.floor(rate)
            frees = _frees_at(list(budget.minute.items()), MINUTE_SPAN_S, used, units, allowance)
            if frees is None:  # the slowed rate is below this call: wait for it to grow back
                minutes = math.ceil((units - rate) / (INCREASE_SHARE * configured))
                frees = max(at, budget.rate_at) + 60.0 * minutes
            return Refusal(_moment(max(frees, at)), RATE)
    if send:
        for index, limit, need, reason in (
            (0, mailbox.day_allowance(limits.messages_per_day), 1, "day_messages"),
            (1, mailbox.day_allowance(limits.recipients_per_day), recipients, "day_recipients"),
        ):
            if limit is None:
                continue
            buckets = [(start, counts[index]) for start, counts in budget.day.items()]
            used = sum(amount for _, amount in buckets)
            if used + need > limit:
                frees = _frees_at(buckets, DAY_BUCKET_S + DAY_S, used, need, limit)
                return Refusal(None if frees is None else _moment(frees), reason)
    return None


def reserve(
    budget: Budget, mailbox: Mailbox, units: int, recipients: int, now: datetime, behind_turns: bool = False
) -> Reservation | Refusal:
    """Admit one Gmail call (a send: `recipients` > 0) and count it in `budget`, or refuse it.
    `behind_turns`: a new job's send, refused while queued jobs still wait for their turns (reason
    `backlog`), so that a backlog is sent in order and its Retry-After estimates hold."""
    if units < 0 or recipients < 0:
        raise ValueError("units and recipients are counts >= 0")
    at = _advance(budget, now)
    if behind_turns and recipients > 0 and budget.turn_tail > at:
        return Refusal(_moment(budget.turn_tail), "backlog")
    refusal = _check(budget, mailbox, units, recipients, at)
    if refusal is not None:
        return refusal
    if recipients > 0 and not behind_turns and budget.turns_pending > 0:
        budget.turns_pending -= 1  # a queued job's turn was sent
    minute_start = math.floor(at / MINUTE_BUCKET_S) * MINUTE_BUCKET_S
    budget.minute[minute_start] = budget.minute.get(minute_start, 0) + units
    if recipients > 0:
        day_start = math.floor(at / DAY_BUCKET_S) * DAY_BUCKET_S
        counts = budget.day.setdefault(day_start, [0, 0])
        counts[0] += 1
        counts[1] += recipients
    return Reservation(mailbox.id, units, recipients, _moment(at))


def turn_interval_s(budget: Budget, mailbox: Mailbox, at: float) -> float:
    """Seconds between two queued sends: one send's units at the admitted rate times the safety
    share (the mailbox queue's dispatch rate, infra/modules/safesend/mailboxes.tf); 0: no rate."""
    rate = admitted_rate(budget, mailbox, at)
    return 0.0 if not rate else SEND_UNITS * 60.0 / (rate * mailbox.safety_share)


def book_turn(budget: Budget, mailbox: Mailbox, not_before: datetime, now: datetime) -> datetime:
    """Give a queued job its turn: one send interval after the last turn given, and no earlier than
    `not_before` (when the budget frees). Every instance books in the same ledger, so turns never
    overlap and a queued job's Retry-After (its turn) accounts for every job queued before it."""
    at = _advance(budget, now)
    if budget.turn_tail <= at:
        budget.turns_pending = 0  # the backlog's end has passed: whatever was not sent was requeued
    interval = turn_interval_s(budget, mailbox, at)
    turn = max(_epoch(not_before), at, budget.turn_tail + interval)
    allowance = mailbox.day_allowance(mailbox.limits.messages_per_day)
    if allowance is not None:  # past the day's allowance: when the rolling day frees this job's slot
        counts = sorted((start, c[0]) for start, c in budget.day.items() if c[0])
        need = sum(c for _, c in counts) + budget.turns_pending + 1 - allowance
        if need > 0:
            freed, day_at = 0, None
            for start, count in counts:
                freed += count
                if freed >= need:
                    day_at = float(start + DAY_BUCKET_S + DAY_S)
                    break
            if day_at is None:  # beyond what today's sends free: a day per further allowance
                day_at = at + DAY_S * math.ceil((need - freed) / allowance)
            turn = max(turn, day_at)
    budget.turns_pending += 1
    budget.turn_tail = turn
    return _moment(turn)


def penalise(budget: Budget, mailbox: Mailbox, kind: str, now: datetime, until: datetime | None = None) -> bool:
    """Learn from a Gmail refusal: `rate` slows the mailbox down (AIMD), `daily` marks it exhausted
    until `until` (Gmail's "Retry after" time) or for 24 h. True when this refusal began a new
    incident (the first decrease of a burst, or exhaustion of a mailbox that was not exhausted):
    reviewers hear of a daily incident once, whichever instance met it first."""
    at = _advance(budget, now)
    if kind == RATE:
        rate = admitted_rate(budget, mailbox, at)
        if rate is None or (budget.rate is not None and at - budget.rate_at < DECREASE_HOLD_S):
            return False
        limit = float(mailbox.limits.units_per_minute or 0)
        floor = min(limit, max(FLOOR_SHARE * limit, float(SEND_UNITS)))
        budget.rate, budget.rate_at = max(floor, rate * DECREASE), at
        return True
    if kind == DAILY:
        began = budget.exhausted_until <= at
        end = _epoch(until) if until is not None else at + DAY_S
        budget.exhausted_until = max(budget.exhausted_until, end)
        return began
    raise ValueError(f"penalise: unknown kind {kind!r}")


def snapshot(budget: Budget, mailbox: Mailbox, now: datetime) -> MailboxSnapshot:
    """The mailbox as /mailboxes shows it, read-only (works on a copy)."""
    copy = Budget.from_json(budget.to_json())
    at = _advance(copy, now)
    limits = mailbox.limits
    rate = admitted_rate(copy, mailbox, at)
    refusal = _check(copy, mailbox, SEND_UNITS if rate is not None else 0, 1, at)
    exhausted = copy.exhausted_until > at or (refusal is not None and refusal.reason.startswith("day_"))
    slowed = rate is not None and rate < (limits.units_per_minute or 0)
    return MailboxSnapshot(
        mailbox=mailbox.id,
        state="exhausted" if exhausted else "slowed" if slowed else "ok",
        minute_used=sum(copy.minute.values()),
        minute_limit=None if rate is None else math.floor(rate),
        minute_configured=limits.units_per_minute,
        day_messages=sum(c[0] for c in copy.day.values()),
        day_messages_limit=mailbox.day_allowance(limits.messages_per_day),
        day_recipients=sum(c[1] for c in copy.day.values()),
        day_recipients_limit=mailbox.day_allowance(limits.recipients_per_day),
        next_free_at=None if refusal is None else refusal.next_free_at,
        exhausted_until=_moment(copy.exhausted_until) if copy.exhausted_until > at else None,
        day_frees=tuple(
            (_moment(start + DAY_BUCKET_S + DAY_S), counts[0])
            for start, counts in sorted(copy.day.items())
            if counts[0]
        ),
    )
