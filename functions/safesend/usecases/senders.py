"""The sender mailboxes as the service uses them: one Gmail client per mailbox, built lazily once per
instance, every Gmail call admitted by the shared budget first (issue 24).

Why here and not in the service: the service orchestrates jobs; which mailbox a job goes to, which
Gmail client carries its calls and whether the shared ledger admits them is one job of its own.
The decisions are pure (mailbox_budget, pacing); this class only reads the clock and calls the
ledger and the clients.

Unconfigured (no SAFESEND_MAILBOXES_*), there is one mailbox, today's, with no limits: no ledger call
is made on any path, so a send keeps today's latency. Gmail's daily-limit refusal still teaches the
ledger (when one is built) so that the mailbox's jobs wait instead of failing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from ..core.classify import RefusalKind, refusal_kind
from ..core.errors import MailboxNotConfiguredError, MailboxUnavailableError, StoreUnavailableError
from ..core.mailbox_budget import DAILY, METHOD_UNITS, RATE, MailboxSnapshot, Refusal, Reservation
from ..core.mailbox_search import MailboxSearch, mailbox_search
from ..core.mailboxes import DEFAULT_MAILBOX_ID, Mailbox, MailboxDirectory
from ..core.model import Accepted, Failure, HistoryPage, Job, MailboxHit
from ..core.pacing import choose_mailbox, may_move
from ..core.ports import MailboxLedger, Mailer
from ..logs import log

# What one read is reserved as before it is made (mailbox_budget.METHOD_UNITS): a search lists
# (5) and reads the one copy it normally finds (5); a change-log read is one page (2).
SEARCH_UNITS = METHOD_UNITS["list"] + METHOD_UNITS["get"]


def recipients_of(job: Job) -> int:
    """The recipients one send of this job counts against the mailbox's daily recipient limit."""
    payload = job.payload
    return max(1, sum(len(payload.get(kind) or []) for kind in ("to", "cc", "bcc")))


class BudgetedMailer:
    """A mailbox's Gmail client whose reads are admitted by the shared ledger first; a refused read
    raises MailboxUnavailableError (the check is deferred: the task or the sweeper comes back).
    Sends pass straight through: the service reserved them before claiming the attempt."""

    def __init__(self, mailer: Mailer, mailbox: Mailbox, ledger: MailboxLedger, clock: Callable[[], datetime]):
        self._mailer = mailer
        self._mailbox = mailbox
        self._ledger = ledger
        self._clock = clock

    def _admit(self, units: int) -> None:
        try:
            verdict = self._ledger.reserve(self._mailbox, units, 0, self._clock())
        except StoreUnavailableError as exc:
            raise MailboxUnavailableError(f"mailbox {self._mailbox.id}: budget unreadable ({exc})") from exc
        if isinstance(verdict, Refusal):
            raise MailboxUnavailableError(
                f"mailbox {self._mailbox.id}: no read budget before {verdict.next_free_at} ({verdict.reason})"
            )

    def send(self, raw: bytes) -> Accepted | Failure:
        return self._mailer.send(raw)

    def find_by_message_id(self, message_id: str) -> Sequence[MailboxHit]:
        self._admit(SEARCH_UNITS)
        return self._mailer.find_by_message_id(message_id)

    def stored_message_id(self, gmail_id: str) -> str | None:
        self._admit(METHOD_UNITS["get"])
        return self._mailer.stored_message_id(gmail_id)

    def current_history_id(self) -> str:
        self._admit(METHOD_UNITS["profile"])
        return self._mailer.current_history_id()

    def added_since(self, start_history_id: str, max_pages: int = 5) -> HistoryPage:
        self._admit(METHOD_UNITS["history"])
        page = self._mailer.added_since(start_history_id, max_pages)
        if page.pages > 1:  # the further pages were read: count them (best effort, already spent)
            self._ledger.reserve(self._mailbox, METHOD_UNITS["history"] * (page.pages - 1), 0, self._clock())
        return page

    def message_ids_of(self, gmail_ids: Sequence[str]) -> dict[str, str]:
        if gmail_ids:
            self._admit(METHOD_UNITS["get"] * len(set(gmail_ids)))
        return self._mailer.message_ids_of(gmail_ids)


class SenderMailboxes:
    """The configured mailboxes, their shared ledger and their Gmail clients.

    `default_mailer` returns the settings' mailer (the service's own `mailer`, which local crash
    points may wrap); it carries the unconfigured default mailbox. `build_mailer` makes the client of
    a configured mailbox, once per instance, on its first call.
    """

    def __init__(
        self,
        directory: MailboxDirectory,
        ledger: MailboxLedger | None,
        default_mailer: Callable[[], Mailer],
        build_mailer: Callable[[Mailbox], Mailer] | None = None,
        clock: Callable[[], datetime] | None = None,
    ):
        self.directory = directory
        self.ledger = ledger
        self._default_mailer = default_mailer
        self._build_mailer = build_mailer
        self._clock = clock
        self._mailers: dict[str, Mailer] = {}
        self._lock = threading.Lock()
        # Unpaced mailboxes this instance saw Gmail refuse for the daily limit, and until when: their
        # sends ask the ledger while it holds (no ledger call otherwise: today's latency).
        self._exhausted: dict[str, datetime] = {}

    def set_clock(self, clock: Callable[[], datetime]) -> None:
        self._clock = clock

    def now(self) -> datetime:
        assert self._clock is not None  # noqa: S101 - the service sets its clock when it takes this
        return self._clock()

    # ------------------------------------------------------------ mailboxes
    def paced(self, mailbox: Mailbox) -> bool:
        """Calls of this mailbox are admitted by the ledger (it has limits, and a ledger exists)."""
        return self.ledger is not None and not mailbox.limits.unlimited

    def current(self, job: Job) -> Mailbox:
        """The mailbox the job is bound to: its last one, or today's (`default`) for a job stored before
        mailboxes were configured, while configured. A job whose mailbox is not configured (any more):
        its pool's first (it may move only while nothing of it may have landed: see gone())."""
        bound = job.mailboxes[-1] if job.mailboxes else DEFAULT_MAILBOX_ID
        if bound in self.directory.ids():
            return self.directory.get(bound)
        return self.candidates(job)[0]

    def search_for(self, job: Job) -> MailboxSearch:
        """How reviewers find the job's copies: by its current mailbox's kind (issue 22). A job whose
        mailbox cannot be told (a directory that no longer resolves it) gets Gmail's search."""
        try:
            mailbox = self.current(job)
        except Exception:  # noqa: BLE001 - a link label must never fail a review or a page
            return mailbox_search("gmail", job.message_id)
        return mailbox_search(mailbox.kind, job.message_id, mailbox.user_id if mailbox.kind == "graph" else None)

    def gone(self, job: Job) -> str | None:
        """The mailbox that may hold a copy of `job` when it is no longer configured, else None.

        A job moves only while none of its attempts may have landed (pacing.may_move), so every copy
        that may exist is in the mailbox it was last bound to (today's one mailbox, `default`, for a
        job stored before mailboxes were configured). Searching another one would prove nothing."""
        if job.maybe_landed == 0 and not job.known_copies:
            return None
        holder = job.mailboxes[-1] if job.mailboxes else DEFAULT_MAILBOX_ID
        return None if holder in self.directory.ids() else holder

    def candidates(self, job: Job) -> list[Mailbox]:
        try:
            return self.directory.candidates(job.channel, job.payload.get("from"))
        except Exception:  # noqa: BLE001 - stored before today's pools: any mailbox of its pool
            ids = self.directory.pools.for_job(job.channel, None)
            return [self.directory.get(i) for i in ids]

    def bound(self, job: Job) -> list[Mailbox]:
        """Every mailbox the job was ever bound to (the current one last): a check searches them all.
        MailboxNotConfiguredError when the one that may hold its copy is no longer configured."""
        holder = self.gone(job)
        if holder is not None:
            raise MailboxNotConfiguredError(f"mailbox {holder} may hold a copy of job {job.id} but is not configured")
        known = [self.directory.get(i) for i in job.mailboxes if i in self.directory.ids()]
        current = self.current(job)
        return [m for m in known if m.id != current.id] + [current]

    def choose(self, candidates: Sequence[Mailbox]) -> Mailbox:
        """The mailbox a new job is bound to: the least used of its pool (pacing.choose_mailbox), the
        first when there is only one or when the budgets cannot be read."""
        paced = [m for m in candidates if self.paced(m)]
        if len(candidates) == 1 or len(paced) != len(candidates):
            return candidates[0]
        snapshots = self.snapshots(candidates)
        if len(snapshots) != len(candidates):
            return candidates[0]
        chosen = choose_mailbox([snapshots[m.id] for m in candidates])
        return self.directory.get(chosen)

    def snapshots(self, mailboxes: Sequence[Mailbox]) -> dict[str, MailboxSnapshot]:
        """Each mailbox's budget now; one that cannot be read is left out (never shown as ok)."""
        out: dict[str, MailboxSnapshot] = {}
        if self.ledger is None:
            return out
        for mailbox in mailboxes:
            try:
                out[mailbox.id] = self.ledger.snapshot(mailbox, self.now())
            except (StoreUnavailableError, ValueError) as exc:
                log(logging.WARNING, "mailbox budget unreadable", mailbox=mailbox.id, error=str(exc)[:200])
        return out

    # -------------------------------------------------------------- clients
    def mailer(self, mailbox: Mailbox) -> Mailer:
        """The mailbox's Gmail client (reads admitted by the ledger when it is paced)."""
        if mailbox.id == DEFAULT_MAILBOX_ID or self._build_mailer is None:
            raw = self._default_mailer()
        else:
            with self._lock:
                if mailbox.id not in self._mailers:
                    self._mailers[mailbox.id] = self._build_mailer(mailbox)
                raw = self._mailers[mailbox.id]
        if self.ledger is not None and self.paced(mailbox):
            return BudgetedMailer(raw, mailbox, self.ledger, self.now)
        return raw

    # --------------------------------------------------------------- budget
    def reserve_send(self, job: Job, turn: bool = False) -> tuple[Mailbox, Refusal | None]:
        """Admit the attempt of `job` just claimed: on its mailbox, or (while none of its attempts may
        have landed) on another of its pool that has budget. Returns the mailbox that admitted it, or
        the one to wait at with its refusal (the one that frees first). An unpaced mailbox is admitted
        without a ledger call, except on a queued job's `turn` or while this instance knows of a daily
        limit Gmail reported: then the ledger says whether it still holds (new jobs wait behind it
        instead of meeting Gmail's refusal again). A ledger that cannot be read admits nothing
        (StoreUnavailableError propagates: the attempt is retried later, nothing was sent)."""
        current = self.current(job)
        if self.ledger is None or not (self.paced(current) or turn or self._known_exhausted(current)):
            return current, None
        recipients = recipients_of(job)
        units = METHOD_UNITS["send"] if self.paced(current) else 0
        verdict = self.ledger.reserve(current, units, recipients, self.now(), behind_turns=not turn)
        if isinstance(verdict, Reservation):
            return current, None
        refusals: list[tuple[Mailbox, Refusal]] = [(current, verdict)]
        # `maybe_landed` already counts the attempt claimed for this send, which has not been made.
        if may_move(_before_attempt(job)) and not job.known_copies:
            others = [m for m in self.candidates(job) if m.id != current.id and self.paced(m)]
            snapshots = self.snapshots(others)
            while others:
                usable = [snapshots[m.id] for m in others if m.id in snapshots]
                if not usable:
                    break
                pick = self.directory.get(choose_mailbox(usable))
                others = [m for m in others if m.id != pick.id]
                other = self.ledger.reserve(pick, METHOD_UNITS["send"], recipients, self.now(), behind_turns=True)
                if isinstance(other, Reservation):
                    return pick, None
                refusals.append((pick, other))
        far = datetime.max.replace(tzinfo=self.now().tzinfo)
        return min(refusals, key=lambda pair: pair[1].next_free_at or far)

    def _known_exhausted(self, mailbox: Mailbox) -> bool:
        """This instance saw Gmail refuse `mailbox` for its daily limit and the mark still holds."""
        until = self._exhausted.get(mailbox.id)
        if until is None:
            return False
        if until > self.now():
            return True
        self._exhausted.pop(mailbox.id, None)
        return False

    def turn(self, mailbox: Mailbox, not_before: datetime | None) -> datetime:
        """The job's turn at `mailbox` (its next try and its honest Retry-After): after every job
        queued there before it (the ledger's turns, shared by every instance), no earlier than
        `not_before`. A ledger that cannot be read: `not_before` (or a day, without one)."""
        now = self.now()
        floor = not_before or now + timedelta(hours=24)
        if self.ledger is None:
            return max(floor, now)
        try:
            return max(self.ledger.book_turn(mailbox, floor, now), now)
        except (StoreUnavailableError, ValueError) as exc:
            log(logging.WARNING, "mailbox turn not booked", mailbox=mailbox.id, error=str(exc)[:200])
            return max(floor, now)

    def learn(self, mailbox: Mailbox, failure: Failure) -> tuple[datetime | None, bool]:
        """Teach the ledger a Gmail refusal: a rate refusal slows the mailbox for every instance, a
        daily-limit refusal exhausts it until Gmail's time (else 24 h); a ledger that cannot be told
        of it still has the job wait that long (StoreUnavailableError is raised for a rate refusal).
        Returns (until when the job should wait, or None if this is no pacing refusal; whether a new
        incident began)."""
        kind = refusal_kind(failure)
        if self.ledger is None or kind not in (RefusalKind.RATE_LIMIT, RefusalKind.DAILY_LIMIT):
            return None, False
        if kind is RefusalKind.RATE_LIMIT and not self.paced(mailbox):
            return None, False  # today's path: backoff toward the retry horizon
        now = self.now()
        if kind is RefusalKind.DAILY_LIMIT:
            until = now + timedelta(seconds=failure.retry_after_s or 24 * 3600.0)
            try:
                began = self.ledger.penalise(mailbox, DAILY, now, until)
            except (StoreUnavailableError, ValueError) as exc:
                # Hours away, past the retry horizon: its jobs still wait for Gmail's time, never fail.
                log(logging.ERROR, "mailbox exhausted; ledger not told", mailbox=mailbox.id, error=str(exc)[:200])
                began = False
            if not self.paced(mailbox):
                self._exhausted[mailbox.id] = max(until, self._exhausted.get(mailbox.id, until))
            return until, began
        began = self.ledger.penalise(mailbox, RATE, now)
        snapshot = self.snapshots([mailbox]).get(mailbox.id)
        wait_s = failure.retry_after_s or 1.0
        next_free = snapshot.next_free_at if snapshot and snapshot.next_free_at else now + timedelta(seconds=wait_s)
        return max(next_free, now + timedelta(seconds=wait_s)), began


def _before_attempt(job: Job) -> Job:
    """The job as it was before the attempt now claimed: `maybe_landed` without that attempt."""
    earlier = job.copy()
    earlier.maybe_landed = max(0, job.maybe_landed - 1)
    return earlier
