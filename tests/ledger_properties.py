"""The property every MailboxLedger must have, shared by the memory, Firestore and PostgreSQL tests:
whatever the interleaving of concurrent reservations, the admitted ones never exceed a budget."""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from hypothesis import strategies as st

from safesend.core.mailbox_budget import DAY_S, MINUTE_S, Refusal, Reservation
from safesend.core.mailboxes import Mailbox, MailboxLimits
from safesend.core.ports import MailboxLedger

START = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
# Small limits so that a short run meets every one of them.
TIGHT = Mailbox(
    "tight",
    "tight@example.com",
    token_secret="t",
    limits=MailboxLimits(units_per_minute=520, messages_per_day=12, recipients_per_day=25, recipients_per_message=4),
    safety_share=0.8,
)


@dataclass(frozen=True)
class Call:
    gap_s: float  # after the previous call (a shared clock that only moves forward)
    units: int
    recipients: int
    penalty: str | None = None  # instead of a reservation: penalise(kind)


calls = st.lists(
    st.builds(
        Call,
        gap_s=st.one_of(st.floats(0, 3), st.floats(0, 40), st.sampled_from([3600.0, 6 * 3600.0, 20 * 3600.0])),
        units=st.sampled_from([100, 100, 100, 5, 2]),
        recipients=st.integers(0, 5),
        penalty=st.sampled_from([None] * 12 + ["rate"]),
    ),
    min_size=1,
    max_size=60,
)


def run_interleaved(ledger: MailboxLedger, mailbox: Mailbox, script: list[Call], threads: int) -> list[Reservation]:
    """`threads` workers take the calls in order, each at the clock's time when taken; every admitted
    reservation is returned (their order is whatever the interleaving made it)."""
    work: queue.Queue[tuple[Call, datetime]] = queue.Queue()
    at = START
    for call in script:
        at += timedelta(seconds=call.gap_s)
        work.put((call, at))
    admitted: list[Reservation] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker() -> None:
        while True:
            try:
                call, now = work.get_nowait()
            except queue.Empty:
                return
            try:
                if call.penalty:
                    ledger.penalise(mailbox, call.penalty, now)
                    continue
                outcome = ledger.reserve(mailbox, call.units, call.recipients, now)
            except BaseException as exc:  # noqa: BLE001 - reported below, in the test's thread
                errors.append(exc)
                return
            if isinstance(outcome, Reservation):
                with lock:
                    admitted.append(outcome)
            else:
                assert isinstance(outcome, Refusal)

    workers = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join(timeout=120)
    assert not any(t.is_alive() for t in workers), "a ledger call hung"
    assert not errors, errors
    return admitted


def assert_within_budget(admitted: list[Reservation], mailbox: Mailbox) -> None:
    """Every moving minute holds at most the units limit, every rolling 24 h at most the safety share
    of the daily message and recipient limits, and no message more recipients than allowed."""
    limits = mailbox.limits
    day_messages = mailbox.day_allowance(limits.messages_per_day)
    day_recipients = mailbox.day_allowance(limits.recipients_per_day)
    for last in admitted:
        minute = [r for r in admitted if last.at - timedelta(seconds=MINUTE_S) < r.at <= last.at]
        day = [r for r in admitted if last.at - timedelta(seconds=DAY_S) < r.at <= last.at and r.recipients]
        assert last.recipients <= limits.recipients_per_message
        assert sum(r.units for r in minute) <= (limits.units_per_minute or 0), minute
        assert len(day) <= (day_messages or 0)
        assert sum(r.recipients for r in day) <= (day_recipients or 0)
