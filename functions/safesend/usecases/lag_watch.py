"""The index-lag watch (issue 20): measure each sender mailbox's search-index and change-log lag from
sampled accepted sends, keep it in the store, and lift the mailbox's effective unknown window when
the lag passes it. The rules are index_lag.py's; this module does the reads, writes and telling.

Where the measuring runs: off the request path, in Cloud Tasks calls to reconcile, as the job's own
checks do. The accept schedules the first look; each look that does not find the message schedules
the next (index_lag.next_probe: 0.5 s, then 25 % later each time, the last at the verification
horizon). The probe's whole state is its task's step (index_lag.Probe.step), so nothing is stored
per probe and a lost task only loses one sample. Not in the sweep: it runs every few minutes, too
coarse to tell a 2 s lag from a 4 s one. Without a task queue (unit tests, a single process) nothing
is measured.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from ..core import index_lag, signals
from ..core.errors import HistoryExpiredError, PublishError, SchedulerError, StoreUnavailableError
from ..core.index_lag import Probe, Raise
from ..core.lifecycle import Timing
from ..core.model import Job, iso
from ..core.policy import ChannelPolicy
from ..core.ports import CheckScheduler, JobStore, ReviewPublisher
from ..core.signals import emit
from ..logs import log
from .history import copies_in_history
from .senders import SenderMailboxes

MAX_RECORD_TRIES = 5  # compare-and-set rounds of one observation (instances rarely write the same mailbox)
RECORDS_TTL_S = 2.0  # the effective windows are read from the store at most this often per instance
RECORDS_STALE_S = 60.0  # last known windows serve a store outage this long, then reconcile waits for them
INCIDENT_KIND = "index_lag"  # the review item's `incident_kind` attribute: notify tells it as such


class LagWatch:
    def __init__(
        self,
        store: JobStore,
        senders: SenderMailboxes,
        scheduler: CheckScheduler | None,
        publisher: ReviewPublisher | None,
        timing: Timing,
        clock: Callable[[], datetime],
        monotonic: Callable[[], float] = time.monotonic,
    ):
        self.store = store
        self.senders = senders
        self.scheduler = scheduler
        self.publisher = publisher
        self.timing = timing
        self.clock = clock
        self.monotonic = monotonic
        self._records: dict[str, dict[str, Any]] = {}
        self._records_at: float | None = None

    # --------------------------------------------------------------------------- measuring
    def start(self, job: Job) -> None:
        """A sampled accepted send: its first look, off the request path (a task)."""
        if self.scheduler is None or job.provider_ref is None:
            return
        self._schedule(job, index_lag.first_probe(self.clock(), history=bool(job.history_start)))

    def probe(self, job_id: str, step: str) -> str:
        """One look (a reconcile task whose step is a probe's). MailboxUnavailableError and
        StoreUnavailableError pass: the task is tried again."""
        probe = index_lag.parse_step(step)
        job = self.store.get(job_id) if probe is not None else None
        now = self.clock()
        if probe is None or job is None or not index_lag.plausible_probe(probe, job, now):
            return "lag_probe_unknown"
        if self.senders.gone(job) is not None:
            # The mailbox that holds the copy is no longer configured: any other mailbox's search
            # would never find it and report a lag "beyond the horizon" for a mailbox that has none.
            return "lag_probe_mailbox_gone"
        mailbox = self.senders.current(job)
        mailer = self.senders.mailer(mailbox)
        found: list[str] = []
        dropped: list[str] = []
        if "search" in probe.pending and any(
            hit.is_sent and not hit.in_transit for hit in mailer.find_by_message_id(job.message_id)
        ):
            found.append("search")
        if "history" in probe.pending and not job.history_start:
            dropped.append("history")  # no checkpoint to read the change log from
        elif "history" in probe.pending and job.history_start:
            try:
                hits, _ = copies_in_history(mailer, job.history_start, job.message_id)
            except HistoryExpiredError:
                dropped.append("history")
            else:
                if hits:
                    found.append("history")
        elapsed_s = max(0.0, (now - probe.accepted_at).total_seconds())
        for kind in found:
            self.record(mailbox.id, kind, elapsed_s, now)
        following = index_lag.next_probe(probe, [*found, *dropped], now, self.timing.verify_horizon_s)
        if following is not None:
            self._schedule(job, following)
            return "lag_probe_waiting"
        missing = [kind for kind in probe.pending if kind not in found and kind not in dropped]
        for kind in missing:
            self.record(mailbox.id, kind, elapsed_s, now, beyond_horizon=True)
        return "lag_beyond_horizon" if "search" in missing else "lag_measured"

    def record(self, mailbox: str, kind: str, lag_s: float, now: datetime, beyond_horizon: bool = False) -> None:
        """One observation into the mailbox's record (compare-and-set), its signal, and, when it
        raised the window, the signal and the reviewers' one notice."""
        raised: Raise | None = None
        for _ in range(MAX_RECORD_TRIES):
            record, token = self.store.read_mailbox_lag(mailbox)
            changed, raised = index_lag.observe(
                record,
                mailbox,
                kind,
                lag_s,
                now,
                self.timing.unknown_window_s,
                self.timing.verify_horizon_s,
                beyond_horizon,
            )
            if self.store.write_mailbox_lag(mailbox, changed, token):
                self._records[mailbox] = changed
                break
        else:
            raise StoreUnavailableError(f"lag record of {mailbox}: not stored after {MAX_RECORD_TRIES} races")
        emit(
            signals.INDEX_LAG_OBSERVED,
            logging.INFO,
            "index lag observed",
            mailbox=mailbox,
            kind=kind,
            lag_s=round(lag_s, 3),
            beyond_horizon=beyond_horizon,
        )
        if raised is not None:
            self._tell_and_confirm(raised)

    def tell_untold(self) -> int:
        """The sweep's backstop: each raise not confirmed told within TELL_LEASE_S (its publish
        failed, its instance died, its write's answer was lost) is claimed and told again. Returns
        how many. Raises StoreUnavailableError."""
        told = 0
        for mailbox in sorted(self.store.mailbox_lags()):
            record, token = self.store.read_mailbox_lag(mailbox)
            claimed, raised = index_lag.claim_untold(record, mailbox, self.clock())
            if raised is None or not self.store.write_mailbox_lag(mailbox, claimed, token):
                continue  # nothing left untold, or another instance claimed it first
            self._tell_and_confirm(raised)
            told += 1
        return told

    def _tell_and_confirm(self, raised: Raise) -> None:
        """Tell the raise; once its notice is out, take it off the record (else it is told again)."""
        if not self._tell(raised):
            return
        try:
            for _ in range(MAX_RECORD_TRIES):
                record, token = self.store.read_mailbox_lag(raised.mailbox)
                cleared = index_lag.told(record, raised)
                if cleared is None or self.store.write_mailbox_lag(raised.mailbox, cleared, token):
                    return
        except StoreUnavailableError as exc:
            log(logging.WARNING, "index lag notice told, not confirmed: told again later", error=str(exc))

    def _tell(self, raised: Raise) -> bool:
        """The signals and the reviewers' notice; False when the notice could not be published."""
        if raised.beyond_horizon:
            emit(
                signals.INDEX_LAG_BEYOND_HORIZON,
                logging.ERROR,
                "index lag past the verification horizon: a second copy can go unseen",
                mailbox=raised.mailbox,
                lag_s=raised.observed_s,
                horizon_s=self.timing.verify_horizon_s,
            )
        if raised.window_s > raised.previous_s:
            emit(
                signals.INDEX_WINDOW_RAISED,
                logging.WARNING,
                "index lag past the unknown window: the mailbox's window is raised",
                mailbox=raised.mailbox,
                window_s=raised.window_s,
                previous_s=raised.previous_s,
                observed_s=raised.observed_s,
            )
        if self.publisher is None:
            return True
        incident = f"{raised.mailbox}:index_lag:{int(raised.window_s * 1000)}:{int(raised.beyond_horizon)}"
        text = incident_text(raised, self.timing.verify_horizon_s)
        item = {"kind": "index_lag", "incident": incident, "mailbox": raised.mailbox, "message": text}
        attributes = {
            "kind": "mailbox_incident",
            "incident_kind": INCIDENT_KIND,
            "mailbox": raised.mailbox,
            "incident": incident,
        }
        try:
            self.publisher.publish(item, attributes)
        except PublishError as exc:
            log(
                logging.ERROR,
                "index lag incident not published: told again later",
                mailbox=raised.mailbox,
                error=str(exc),
            )
            return False
        return True

    def _schedule(self, job: Job, probe: Probe) -> None:
        assert self.scheduler is not None  # noqa: S101 - start() returns without one
        try:
            self.scheduler.schedule_check(job.id, probe.step, probe.look_at(self.timing.verify_horizon_s))
        except SchedulerError as exc:
            log(logging.WARNING, "index lag probe not scheduled: one sample fewer", job_id=job.id, error=str(exc))

    # ------------------------------------------------------------------- the effective window
    def records(self, fresh: bool = False) -> dict[str, dict[str, Any]]:
        """Every mailbox's lag record, read at most every RECORDS_TTL_S. When the store cannot say,
        the ones read within RECORDS_STALE_S hold (a raise is never undone); else StoreUnavailableError:
        the configured window would be smaller than a raised one, and a resend on it a duplicate."""
        due = self._records_at is None or self.monotonic() - self._records_at >= RECORDS_TTL_S
        if fresh or due:
            try:
                self._records = self.store.mailbox_lags()
                self._records_at = self.monotonic()
            except StoreUnavailableError as exc:
                if fresh or self._records_at is None or self.monotonic() - self._records_at > RECORDS_STALE_S:
                    raise
                log(logging.WARNING, "index lag records unreadable: the last known windows hold", error=str(exc))
        return self._records

    def policy_for(self, job: Job, policy: ChannelPolicy) -> ChannelPolicy:
        """The channel policy with the unknown window of the job's mailboxes (the largest of them)."""
        configured_s = self.timing.window(policy).total_seconds()
        records = self.records()
        raised_s = max(
            (
                index_lag.effective_window_s(configured_s, records.get(m.id), self.timing.verify_horizon_s)
                for m in self.senders.bound(job)
            ),
            default=configured_s,
        )
        return index_lag.effective_policy(policy, configured_s, raised_s)

    def report(self) -> dict[str, Any]:
        """/health's `index_lag`: per mailbox p50/p99/max and count per kind, and its window."""
        return lag_view(self.records(fresh=True), self.timing)


def lag_view(records: Mapping[str, Mapping[str, Any]], timing: Timing) -> dict[str, Any]:
    """Per mailbox: each kind's stats, the effective and configured windows, and `alert` as the
    alerts read it: beyond_horizon, or p99_over_half_window (the search lag's p99), or None."""
    configured_s = timing.unknown_window_s
    view: dict[str, Any] = {}
    for mailbox, record in sorted(records.items()):
        kinds = {kind: index_lag.stats(record.get(index_lag.samples_key(kind)) or []) for kind in index_lag.KINDS}
        window_s = index_lag.effective_window_s(configured_s, record, timing.verify_horizon_s)
        p99 = kinds["search"]["p99_s"]
        alert = None
        if record.get("beyond_horizon_at") is not None:
            alert = "beyond_horizon"
        elif p99 is not None and p99 > configured_s / 2:
            alert = "p99_over_half_window"
        view[mailbox] = {
            **kinds,
            "window_s": window_s,
            "configured_window_s": configured_s,
            "raised_at": iso(record.get("raised_at")),
            "beyond_horizon_at": iso(record.get("beyond_horizon_at")),
            "alert": alert,
        }
    return view


def incident_text(raised: Raise, horizon_s: float) -> str:
    """What the reviewers read, once per raise."""
    if raised.beyond_horizon:
        return (
            f"safesend: Gmail's search index lagged past the verification horizon ({horizon_s:g} s) for mailbox "
            f"{raised.mailbox}. A second copy indexed that late can go unseen: check recent jobs of this "
            "mailbox in the review console and raise SAFESEND_VERIFY_HORIZON_S."
        )
    return (
        f"safesend: Gmail's search index lagged {raised.observed_s:g} s for mailbox {raised.mailbox}, past "
        f"its unknown window ({raised.previous_s:g} s). The window is raised to {raised.window_s:g} s, so jobs "
        "in doubt wait long enough and no duplicate is sent. Nothing to decide; see GET /health."
    )


def incident_text_from(attributes: Mapping[str, Any], horizon_s: float) -> str | None:
    """notify's text for an index-lag incident item (None: not one): from the published item's
    attributes (`incident` = mailbox:index_lag:window_ms:beyond)."""
    if attributes.get("incident_kind") != INCIDENT_KIND:
        return None
    parts = str(attributes.get("incident", "")).rsplit(":", 3)
    if len(parts) != 4 or not parts[2].isdigit():
        return None
    window_s = int(parts[2]) / 1000
    beyond = parts[3] == "1"
    mailbox = str(attributes.get("mailbox") or parts[0])
    if beyond:
        return incident_text(Raise(mailbox, window_s, window_s, horizon_s, True), horizon_s)
    return (
        f"safesend: Gmail's search index lagged past the unknown window of mailbox {mailbox}. Its window is "
        f"raised to {window_s:g} s, so jobs in doubt wait long enough and no duplicate is sent. Nothing to "
        "decide; see GET /health."
    )
