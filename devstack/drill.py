"""The live drill: measure what safesend assumes about Gmail, on a real mailbox (issue 12 item 2).

With real credentials it sends N messages to a sink address the operator names, through safesend's
own GmailMailer, keys (deterministic Message-ID) and MIME, and measures per message:

* the search-index lag: from the send's answer until ``rfc822msgid:`` finds the message;
* the history lag: from the same moment until ``users.history.list`` (from a checkpoint taken
  before the first send) shows it;
* whether the Message-ID Gmail stored is ours (``messages.get`` format=metadata);

then the same for K more messages whose response is deliberately dropped: the request is written
on a fresh connection, the drill waits until the peer's TCP has acknowledged every byte (so Gmail
has the whole request), optionally holds ``--cut-hold-s``, and closes the connection without reading
an answer. The fault relay cannot do this in front of real Gmail (it forwards to plain-HTTP upstreams
only), so the cut is done here, in a OneShotHttp whose exchange stops after the write.

It polls every ``--poll-s`` (1 s) until each message was seen by both or ``--max-wait-s`` passed
("not seen"), and writes a JSON and a Markdown report labelled LIVE with the date and the mailbox kind
(Workspace or consumer). ``--mock`` runs the same code against the local Gmail simulator (labelled
MOCK), which is what tests/integration/test_drill.py does. devstack/DRILL.md says how to run it live.

Credentials come the way the local stack's real-Gmail mode reads them: SAFESEND_GMAIL_CREDENTIALS_FILE
or SAFESEND_GMAIL_CREDENTIALS_JSON (an authorized-user token or a service-account key), plus
SAFESEND_GMAIL_DELEGATED_USER for domain-wide delegation (with neither credential: keyless delegation
through Application Default Credentials, as deployed). SAFESEND_GMAIL_USER names the mailbox ("me").
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import secrets
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

_REPO_ROOT = Path(__file__).resolve().parents[1]
_FUNCTIONS_DIR = _REPO_ROOT / "functions"
if str(_FUNCTIONS_DIR) not in sys.path:
    sys.path.insert(0, str(_FUNCTIONS_DIR))

from safesend.adapters.gmail_mailer import MAX_MESSAGE_IDS_PER_CALL, GmailMailer  # noqa: E402
from safesend.adapters.one_shot_http import (  # noqa: E402
    MIN_PHASE_TIMEOUT_S,
    OneShotHttp,
    TransportError,
)
from safesend.core.classify import TransportErrorKind  # noqa: E402
from safesend.core.errors import HistoryExpiredError, MailboxUnavailableError  # noqa: E402
from safesend.core.keys import is_valid_hostname, job_id_for, message_id_for  # noqa: E402
from safesend.core.mime import OutgoingMessage, build_mime, encode_raw  # noqa: E402
from safesend.core.model import Accepted, Bucket, Failure  # noqa: E402
from safesend.logs import mask_emails  # noqa: E402

__all__ = ["CutAfterWriteHttp", "Drill", "DrillSettings", "main", "render_markdown", "write_report"]

LIVE, MOCK = "LIVE", "MOCK"
ANSWERED, DROPPED = "answered", "dropped"
MAX_MESSAGES = 50  # answered + dropped: a drill, not a load test (100 quota units a send)
MAX_WAIT_S = 1800.0
MIN_POLL_S = 0.05
HISTORY_PAGES = 5  # per poll: 5 x 500 changes since the checkpoint
POLL_WORKERS = 8
ACK_WAIT_S = 5.0  # how long the cut waits for the peer to acknowledge the request's bytes
CONSUMER_DOMAINS = frozenset({"gmail.com", "googlemail.com"})
UNITS = {"send": 100, "list": 5, "get": 5, "history": 2, "profile": 1}  # Gmail quota units per call


class DrillError(Exception):
    """The drill cannot run (no mailbox, bad settings); its message is safe to print."""


@dataclass
class DrillSettings:
    to: str
    count: int = 5  # messages sent normally (their answer is read)
    dropped: int = 2  # messages whose answer is dropped on purpose
    poll_s: float = 1.0
    max_wait_s: float = 300.0  # per message, from its send
    spacing_s: float = 1.0  # between two sends
    cut_hold_s: float = 0.0  # after the request was acknowledged, before the cut
    sender: str | None = None  # From; default SAFESEND_DEFAULT_FROM, else the mailbox's address
    message_id_domain: str | None = None  # default SAFESEND_MESSAGE_ID_DOMAIN, else the From's domain

    def check(self) -> None:
        if not isinstance(self.to, str) or "@" not in self.to:
            raise DrillError("--to must be the sink address (an address you own)")
        if (
            not 0 <= self.count <= MAX_MESSAGES
            or not 0 <= self.dropped <= MAX_MESSAGES
            or not 1 <= self.count + self.dropped <= MAX_MESSAGES
        ):
            raise DrillError(f"between 1 and {MAX_MESSAGES} messages in all")
        if not MIN_POLL_S <= self.poll_s <= 60:
            raise DrillError(f"--poll-s must be within [{MIN_POLL_S}, 60]")
        if not 0 < self.max_wait_s <= MAX_WAIT_S:
            raise DrillError(f"--max-wait-s must be within (0, {MAX_WAIT_S:g}]")
        if not 0 <= self.spacing_s <= 60 or not 0 <= self.cut_hold_s <= 60:
            raise DrillError("--spacing-s and --cut-hold-s must be within [0, 60]")


@dataclass
class Row:
    """One message of the drill and what was measured about it (times in seconds)."""

    n: int
    kind: str
    dedup_key: str
    message_id: str
    sent_at_utc: str = ""
    send_s: float | None = None  # the send call (answered) or until the request was acknowledged (dropped)
    outcome: str = ""  # "accepted", a failure code, or "cut_after_write"
    written: bool = False  # Gmail may have the message (accepted, or the request was written)
    gmail_id: str | None = None
    stored_message_id: str | None = None
    message_id_kept: bool | None = None
    copies: int = 0  # SENT copies the search found (more than one: a duplicate)
    index_lag_s: float | None = None  # seen by the end of the first poll that found it ...
    index_lag_after_s: float | None = None  # ... not yet at the start of the poll before it
    history_lag_s: float | None = None
    history_lag_after_s: float | None = None
    read_errors: int = 0
    _t: float = field(default=0.0, repr=False)  # monotonic time the lags count from

    def public(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if not k.startswith("_")}


class CutAfterWriteHttp(OneShotHttp):
    """A OneShotHttp that writes the request, waits until the peer has acknowledged every byte
    (bounded by ACK_WAIT_S), holds `hold_s`, then closes the connection without reading an answer.

    Connect, TLS and the deadline are OneShotHttp's own. `written_at` (monotonic) is set once the
    request is written and acknowledged; the call always ends in a TransportError.
    """

    def __init__(self, timeout: float = 20.0, hold_s: float = 0.0):
        super().__init__(timeout=timeout, deadline=time.monotonic() + timeout + ACK_WAIT_S + hold_s)
        self.hold_s = hold_s
        self.written_at: float | None = None

    # The base's is a staticmethod; this one needs the instance (hold_s, written_at). Called as
    # self._exchange(...) either way.
    def _exchange(  # type: ignore[override]
        self,
        conn: Any,
        method: str,
        path: str,
        payload: bytes | None,
        headers: dict[str, str],
        deadline: float,
        watchdog: Any,
        limit: int | None = None,
    ) -> Any:
        conn.sock.settimeout(max(deadline - time.monotonic(), MIN_PHASE_TIMEOUT_S))
        try:
            conn.request(method, path, body=payload, headers=headers)
        except Exception as exc:  # partly written: as ambiguous as any send failure
            raise TransportError(TransportErrorKind.DISCONNECTED_AFTER_WRITE, f"drill: write failed: {exc!r}") from exc
        _wait_until_acknowledged(conn.sock, min(ACK_WAIT_S, max(0.0, deadline - time.monotonic())))
        self.written_at = time.monotonic()
        if self.hold_s:
            time.sleep(min(self.hold_s, max(0.0, deadline - time.monotonic())))
        with contextlib.suppress(OSError):
            conn.sock.shutdown(socket.SHUT_RDWR)
        raise TransportError(
            TransportErrorKind.DISCONNECTED_AFTER_WRITE,
            "drill: connection cut after the request was written, answer never read",
        )


def _wait_until_acknowledged(sock: socket.socket, bound_s: float) -> None:
    """Until the kernel's send queue is empty (every byte ACKed by the peer), at most `bound_s`.

    Linux TIOCOUTQ; elsewhere (or if it fails) a fixed short pause instead.
    """
    try:
        import fcntl
        import termios

        def unsent() -> int:
            return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, struct.pack("i", 0)))[0]

        unsent()
    except (ImportError, OSError, AttributeError, ValueError):
        time.sleep(min(0.5, bound_s))
        return
    end = time.monotonic() + bound_s
    while time.monotonic() < end:  # bounded by bound_s
        try:
            if unsent() == 0:
                return
        except OSError:
            return
        time.sleep(0.01)


def _percentiles(values: Sequence[float]) -> dict[str, Any]:
    """n, p50, p90 (nearest rank, as bench/), max."""
    ordered = sorted(values)

    def rank(pct: float) -> float | None:
        if not ordered:
            return None
        return round(ordered[max(1, math.ceil(pct / 100 * len(ordered))) - 1], 3)

    return {"n": len(ordered), "p50": rank(50), "p90": rank(90), "max": rank(100)}


class Drill:
    """One run. `cut_send(raw) -> monotonic time the request was written` performs a dropped send."""

    def __init__(
        self,
        mailer: GmailMailer,
        settings: DrillSettings,
        label: str,
        mailbox_kind: str,
        cut_send: Callable[[bytes], float],
        progress: Callable[[str], None] = lambda line: None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        settings.check()
        if label not in (LIVE, MOCK):
            raise DrillError("label must be LIVE or MOCK")
        self.mailer = mailer
        self.settings = settings
        self.label = label
        self.mailbox_kind = mailbox_kind
        self.cut_send = cut_send
        self.progress = progress
        self.clock = clock
        self.sleep = sleep
        self.run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)
        self.calls = dict.fromkeys(UNITS, 0)
        self.rows: list[Row] = []
        self.mapped: dict[str, str | None] = {}  # gmail id -> stored Message-ID (None: gone)
        self.history_ok = True
        self.history_errors = 0
        self.history_incomplete = 0
        self.notes: list[str] = []
        self._calls_lock = threading.Lock()

    # ------------------------------------------------------------------ run
    def run(self) -> dict[str, Any]:
        s = self.settings
        started_utc = datetime.now(UTC)
        try:
            profile = self._count("profile", self.mailer.profile)
        except MailboxUnavailableError as exc:
            raise DrillError(f"cannot read the mailbox's profile: {exc}") from exc
        mailbox = str(profile.get("emailAddress") or "")
        checkpoint = str(profile.get("historyId") or "")
        sender = s.sender or os.environ.get("SAFESEND_DEFAULT_FROM") or mailbox
        domain = (
            s.message_id_domain
            or os.environ.get("SAFESEND_MESSAGE_ID_DOMAIN")
            or sender.rsplit("@", 1)[-1].rstrip(">").strip().lower()
        )
        if not is_valid_hostname(domain):
            raise DrillError(f"no usable Message-ID domain ({domain!r}): pass --message-id-domain")
        self.progress(
            f"drill {self.run_id} ({self.label}): mailbox {mask_emails(mailbox)}, checkpoint "
            f"historyId {checkpoint}; {s.count} answered + {s.dropped} dropped to {mask_emails(s.to)}"
        )
        plan = [ANSWERED] * s.count + [DROPPED] * s.dropped
        next_send = self.clock()
        next_poll = self.clock()
        # Bounds: a wall-clock budget and a number of loop turns (each turn sends or polls or sleeps).
        budget_end = self.clock() + len(plan) * (s.spacing_s + 30.0) + s.max_wait_s + 60.0
        max_turns = int((budget_end - self.clock()) / min(s.poll_s, max(s.spacing_s, MIN_POLL_S))) * 3 + 100
        with ThreadPoolExecutor(max_workers=POLL_WORKERS, thread_name_prefix="drill-poll") as pool:
            for _ in range(max_turns):
                now = self.clock()
                if now >= budget_end:
                    self.notes.append("the drill's time budget ran out before every message was settled")
                    break
                if plan and now >= next_send:
                    self._send(plan.pop(0), sender, domain)
                    next_send = self.clock() + s.spacing_s
                    continue
                if now >= next_poll:
                    self._poll(pool, checkpoint)
                    next_poll += s.poll_s
                    next_poll = max(next_poll, self.clock())
                if not plan and all(self._settled(row) for row in self.rows):
                    break
                wake = min(next_poll, next_send) if plan else next_poll
                self.sleep(max(0.0, min(wake - self.clock(), s.poll_s)))
        return self._report(started_utc, mailbox, checkpoint, sender, domain)

    def _settled(self, row: Row) -> bool:
        if not row.written:
            return True
        if self.clock() - row._t > self.settings.max_wait_s:
            return True
        history_done = row.history_lag_s is not None or not self.history_ok
        stored_known = row.kind == DROPPED or row.stored_message_id is not None
        return row.index_lag_s is not None and history_done and stored_known

    def _count(self, name: str, call: Callable[[], Any], units: int = 1) -> Any:
        with self._calls_lock:
            self.calls[name] += units
        return call()

    # ----------------------------------------------------------------- send
    def _send(self, kind: str, sender: str, domain: str) -> None:
        n = len(self.rows) + 1
        key = f"drill:{self.run_id}:{n}"
        row = Row(n=n, kind=kind, dedup_key=key, message_id=message_id_for(key, domain))
        message = OutgoingMessage(
            sender=sender,
            to=(self.settings.to,),
            subject=f"safesend drill {self.run_id} #{n} ({kind})",
            text=(
                f"Sent by safesend's drill (devstack/drill.py), run {self.run_id}, message {n}, "
                f"{'answer dropped on purpose' if kind == DROPPED else 'answer read'}. Safe to delete.\n"
            ),
        )
        raw = build_mime(message, row.message_id, job_id_for(key), datetime.now(UTC))
        row.sent_at_utc = datetime.now(UTC).isoformat(timespec="milliseconds")
        started = self.clock()
        if kind == ANSWERED:
            outcome = self._count("send", lambda: self.mailer.send(raw))
            row._t = self.clock()
            row.send_s = round(row._t - started, 3)
            if isinstance(outcome, Accepted):
                row.outcome, row.written, row.gmail_id = "accepted", True, outcome.gmail_id
                self._read_stored_message_id(row)
            else:
                assert isinstance(outcome, Failure)
                row.outcome = outcome.code
                row.written = outcome.bucket is Bucket.MAYBE_ACCEPTED  # then it is looked for like a dropped one
        else:
            try:
                written_at = self._count("send", lambda: self.cut_send(raw))
            except TransportError as exc:  # failed before the request was written: nothing sent
                row._t = self.clock()
                row.outcome = f"not_sent_{exc.kind.value}"
            else:
                row._t = written_at
                row.send_s = round(written_at - started, 3)
                row.outcome, row.written = "cut_after_write", True
        self.rows.append(row)
        self.progress(
            f"#{n} {kind}: {row.outcome}"
            + (f" in {row.send_s:.2f} s" if row.send_s is not None else "")
            + (
                f", Message-ID {'kept' if row.message_id_kept else 'REWRITTEN'}"
                if row.message_id_kept is not None
                else ""
            )
        )

    def _read_stored_message_id(self, row: Row) -> None:
        gmail_id = row.gmail_id
        if gmail_id is None:
            return
        try:
            found = self._count("get", lambda: self.mailer.message_ids_of([gmail_id]), 1)
        except MailboxUnavailableError:
            row.read_errors += 1
            return
        stored = found.get(gmail_id)
        self.mapped[gmail_id] = stored
        if stored is not None:
            row.stored_message_id = stored
            row.message_id_kept = stored == row.message_id

    # ----------------------------------------------------------------- poll
    def _poll(self, pool: ThreadPoolExecutor, checkpoint: str) -> None:
        """One round: the history listing and every pending search, side by side."""
        active = [row for row in self.rows if row.written and self.clock() - row._t <= self.settings.max_wait_s]
        for row in active:  # answered rows whose stored Message-ID could not be read yet
            if row.kind == ANSWERED and row.stored_message_id is None and row.gmail_id:
                self._read_stored_message_id(row)
        searches: list[tuple[Row, float, Future]] = []
        for row in active:
            if row.index_lag_s is None:
                term = row.stored_message_id or row.message_id  # a rewritten id: search what Gmail stored
                searches.append((row, self.clock(), pool.submit(self._search, term)))
        history: tuple[float, Future] | None = None
        if self.history_ok and any(row.history_lag_s is None for row in active):
            answered = {row.gmail_id for row in self.rows if row.gmail_id and row.kind == ANSWERED}
            history = (self.clock(), pool.submit(self._history, checkpoint, answered))
        for row, began, future in searches:
            try:
                hits = future.result()
            except MailboxUnavailableError:
                row.read_errors += 1
                continue
            ended = self.clock()
            sent = [hit for hit in hits if hit.is_sent and not hit.in_transit]  # a Graph draft: not stored yet
            if sent:
                row.copies = len(sent)
                row.index_lag_s = round(ended - row._t, 3)
                if row.gmail_id is None:
                    row.gmail_id = sent[0].gmail_id
                if row.stored_message_id is None:  # found by our own id: stored as ours
                    row.stored_message_id, row.message_id_kept = row.message_id, True
                self.progress(
                    f"#{row.n} {row.kind}: searchable after {row.index_lag_s:.2f} s"
                    + (f" ({row.copies} copies!)" if row.copies > 1 else "")
                )
            else:
                row.index_lag_after_s = round(began - row._t, 3)
        if history is not None:
            began, future = history
            try:
                added = future.result()
            except HistoryExpiredError:
                self.history_ok = False
                self.notes.append("history.list answered 404 for the drill's checkpoint: history lag not measured")
                return
            except MailboxUnavailableError:
                self.history_errors += 1
                return
            ended = self.clock()
            by_message_id = {mid: gid for gid, mid in self.mapped.items() if mid}
            for row in active:
                if row.history_lag_s is not None:
                    continue
                gmail_id = row.gmail_id if row.gmail_id in added else by_message_id.get(row.message_id)
                if gmail_id is not None and gmail_id in added:
                    row.history_lag_s = round(ended - row._t, 3)
                    if row.gmail_id is None:
                        row.gmail_id = gmail_id
                    if row.stored_message_id is None:
                        row.stored_message_id, row.message_id_kept = row.message_id, True
                    self.progress(f"#{row.n} {row.kind}: in the history after {row.history_lag_s:.2f} s")
                else:
                    row.history_lag_after_s = round(began - row._t, 3)

    def _search(self, term: str) -> Sequence[Any]:
        hits = self._count("list", lambda: self.mailer.find_by_message_id(term))
        with self._calls_lock:
            self.calls["get"] += len(hits)  # find_by_message_id reads each hit's labels
        return hits

    def _history(self, checkpoint: str, answered: set[str]) -> set[str]:
        """The gmail ids of SENT messages added since the checkpoint; maps the Message-IDs of new ones
        that are not the answered sends' (whose ids we know), so a dropped one can be recognised."""
        page = self.mailer.added_since(checkpoint, max_pages=HISTORY_PAGES)
        with self._calls_lock:
            self.calls["history"] += page.pages
            if not page.complete:
                self.history_incomplete += 1
        new = [gid for gid in page.gmail_ids() if gid not in self.mapped and gid not in answered]
        for start in range(0, min(len(new), 10 * MAX_MESSAGE_IDS_PER_CALL), MAX_MESSAGE_IDS_PER_CALL):
            chunk = new[start : start + MAX_MESSAGE_IDS_PER_CALL]
            found = self._count("get", functools.partial(self.mailer.message_ids_of, chunk), len(chunk))
            for gid in chunk:
                self.mapped[gid] = found.get(gid)
        return set(page.gmail_ids())

    # --------------------------------------------------------------- report
    def _report(self, started_utc: datetime, mailbox: str, checkpoint: str, sender: str, domain: str) -> dict[str, Any]:
        s = self.settings
        rows = self.rows
        ours = {row.message_id for row in rows} | {row.stored_message_id for row in rows if row.stored_message_id}
        attributed = {row.gmail_id for row in rows if row.gmail_id}
        unattributed = [gid for gid, mid in self.mapped.items() if gid not in attributed and mid not in ours]

        def lags(kind: str | None, name: str) -> dict[str, Any]:
            chosen = [row for row in rows if row.written and (kind is None or row.kind == kind)]
            values = [getattr(row, name) for row in chosen if getattr(row, name) is not None]
            return {**_percentiles(values), "not_seen": len(chosen) - len(values)}

        dropped_written = [row for row in rows if row.kind == DROPPED and row.written]
        summary = {
            "index_lag_s": lags(None, "index_lag_s"),
            "history_lag_s": lags(None, "history_lag_s"),
            "answered": {
                "index_lag_s": lags(ANSWERED, "index_lag_s"),
                "history_lag_s": lags(ANSWERED, "history_lag_s"),
            },
            "dropped": {"index_lag_s": lags(DROPPED, "index_lag_s"), "history_lag_s": lags(DROPPED, "history_lag_s")},
            "message_ids_checked": sum(1 for row in rows if row.message_id_kept is not None),
            "message_ids_rewritten": sum(1 for row in rows if row.message_id_kept is False),
            "dropped_written": len(dropped_written),
            "dropped_landed": sum(
                1 for row in dropped_written if row.index_lag_s is not None or row.history_lag_s is not None
            ),
            "duplicates": sum(1 for row in rows if row.copies > 1),
            "unattributed_sent_messages": len(unattributed),
            "read_errors": sum(row.read_errors for row in rows) + self.history_errors,
            "history_listing_incomplete": self.history_incomplete,
        }
        if unattributed:
            self.notes.append(
                f"{len(unattributed)} SENT message(s) were added during the run whose Message-ID is "
                "none of the drill's: other traffic on the mailbox, or a dropped-response copy "
                "whose Message-ID Gmail rewrote."
            )
        return {
            "label": self.label,
            "date": started_utc.date().isoformat(),
            "started_at": started_utc.isoformat(timespec="seconds"),
            "mailbox_kind": self.mailbox_kind,
            "mailbox": mask_emails(mailbox),
            "sink": mask_emails(s.to),
            "sender": mask_emails(sender),
            "message_id_domain": domain,
            "run_id": self.run_id,
            "checkpoint_history_id": checkpoint,
            "settings": {
                "count": s.count,
                "dropped": s.dropped,
                "poll_s": s.poll_s,
                "max_wait_s": s.max_wait_s,
                "spacing_s": s.spacing_s,
                "cut_hold_s": s.cut_hold_s,
            },
            "summary": summary,
            "quota_units": {
                **{name: count * UNITS[name] for name, count in self.calls.items()},
                "total": sum(count * UNITS[name] for name, count in self.calls.items()),
            },
            "rows": [row.public() for row in rows],
            "notes": self.notes,
        }


# ---------------------------------------------------------------------- report files
def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f} s" if value >= 1 else f"{value * 1000:.0f} ms"


def _lag_cell(seen: float | None, after: float | None) -> str:
    if seen is None:
        return "not seen" + (f" (still not at {_fmt(after)})" if after is not None else "")
    return _fmt(seen) + (f" (not yet at {_fmt(after)})" if after is not None else "")


def render_markdown(report: dict[str, Any]) -> str:
    s, summary = report["settings"], report["summary"]
    provider = "Microsoft Graph" if report.get("provider") == "graph" else "Gmail"
    lines = [
        f"# safesend drill: {report['label']}, {report['date']}, {report['mailbox_kind']} mailbox",
        "",
        f"Run `{report['run_id']}` started {report['started_at']}: mailbox {report['mailbox']}, sink "
        f"{report['sink']}, Message-ID domain `{report['message_id_domain']}`. {s['count']} messages sent "
        f"normally and {s['dropped']} with the response dropped (connection cut once the request was written "
        f"and acknowledged, after {s['cut_hold_s']:g} s more), {s['spacing_s']:g} s apart; polled every "
        f"{s['poll_s']:g} s for up to {s['max_wait_s']:g} s per message. History from historyId "
        f"{report['checkpoint_history_id']} (taken before the first send).",
        "",
        *(
            [
                f"MOCK: the local {provider} simulator with a search-index lag of "
                f"{report['simulator']['index_lag_s']:g} s and a history lag of "
                f"{report['simulator']['history_lag_s']:g} s; these numbers say nothing about {provider}.",
                "",
            ]
            if "simulator" in report
            else []
        ),
        "| lag (send answered or cut -> seen) | n | p50 | p90 | max | not seen |",
        "|---|---|---|---|---|---|",
    ]
    for title, stats in (
        ("search index: `rfc822msgid:` finds it", summary["index_lag_s"]),
        ("history: `history.list` shows it", summary["history_lag_s"]),
        ("  answered sends, search index", summary["answered"]["index_lag_s"]),
        ("  answered sends, history", summary["answered"]["history_lag_s"]),
        ("  dropped responses, search index", summary["dropped"]["index_lag_s"]),
        ("  dropped responses, history", summary["dropped"]["history_lag_s"]),
    ):
        lines.append(
            f"| {title} | {stats['n']} | {_fmt(stats['p50'])} | {_fmt(stats['p90'])} | "
            f"{_fmt(stats['max'])} | {stats['not_seen']} |"
        )
    lines += [
        "",
        f"- Message-ID stored as ours: {summary['message_ids_checked'] - summary['message_ids_rewritten']} of "
        f"{summary['message_ids_checked']} checked; **rewritten: {summary['message_ids_rewritten']}**.",
        f"- Dropped responses: {summary['dropped_landed']} of {summary['dropped_written']} written requests "
        "landed (found in the mailbox).",
        f"- Duplicates (more than one SENT copy of a Message-ID): {summary['duplicates']}.",
        f"- SENT messages added during the run that are not the drill's: {summary['unattributed_sent_messages']}; "
        f"failed reads: {summary['read_errors']}; incomplete history listings: "
        f"{summary['history_listing_incomplete']}.",
        f"- Gmail quota units used: {report['quota_units']['total']} "
        f"({', '.join(f'{k} {v}' for k, v in report['quota_units'].items() if k != 'total' and v)}).",
        "",
        "## Messages",
        "",
        "| # | kind | send | outcome | Gmail id | Message-ID | search-index lag | history lag |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in report["rows"]:
        kept = {True: "ours", False: f"REWRITTEN to `{row['stored_message_id']}`", None: "?"}[row["message_id_kept"]]
        lines.append(
            f"| {row['n']} | {row['kind']} | {_fmt(row['send_s'])} | {row['outcome']} | {row['gmail_id'] or '-'} | "
            f"{kept} | {_lag_cell(row['index_lag_s'], row['index_lag_after_s'])} | "
            f"{_lag_cell(row['history_lag_s'], row['history_lag_after_s'])} |"
        )
    lines += [
        "",
        "## How to read this",
        "",
        f"A lag runs from the send's answer (or, for a dropped response, from the moment the request was "
        f'written and acknowledged) to the end of the first poll that saw the message; "not yet at" is '
        f"the start of the poll before, so the true lag lies between the two (resolution about "
        f'{s["poll_s"]:g} s plus one request). "not seen" means not within {s["max_wait_s"]:g} s.',
        "",
        "safesend's timings must cover the worst case, not the median: the first mailbox check "
        "(`SAFESEND_INDEX_LAG_S`), the unknown window (`SAFESEND_UNKNOWN_WINDOW_S`) and the verification "
        "horizon must exceed the largest search-index lag Gmail shows, and a history-based check may treat "
        "absence as proof only once the history lag has surely passed.",
    ]
    if report["notes"]:
        lines += ["", "## Notes", ""] + [f"- {note}" for note in report["notes"]]
    return "\n".join(lines) + "\n"


def write_report(report: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"drill-{report['label'].lower()}-{report['run_id']}"
    json_path, md_path = out_dir / f"{stem}.json", out_dir / f"{stem}.md"
    json_path.write_text(json.dumps(report, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    md_path.write_text(render_markdown(report), encoding="utf-8")
    return json_path, md_path


# ------------------------------------------------------------------------------ wiring
def make_cut_send(mailer: GmailMailer, credentials: Any, hold_s: float, timeout_s: float) -> Callable[[bytes], float]:
    """A dropped send built exactly like GmailMailer.send (same client, same request), over CutAfterWriteHttp."""
    from google_auth_httplib2 import AuthorizedHttp
    from google_auth_httplib2 import Request as AuthRequest

    def cut_send(raw: bytes) -> float:
        if credentials is not None and not credentials.valid:  # refresh on a transport that reads answers
            credentials.refresh(AuthRequest(OneShotHttp(timeout=timeout_s)))
        transport = CutAfterWriteHttp(timeout=timeout_s, hold_s=hold_s)
        http: Any = transport
        if credentials is not None:
            http = AuthorizedHttp(credentials, http=transport)
            http._request = AuthRequest(OneShotHttp(timeout=timeout_s))  # never refresh over the cut
        request = mailer.service.users().messages().send(userId=mailer.user, body={"raw": encode_raw(raw)})
        try:
            request.execute(http=http, num_retries=0)
        except TransportError:
            if transport.written_at is not None:
                return transport.written_at
            raise
        raise DrillError("the cut transport returned an answer")  # unreachable: it never reads one

    return cut_send


def mailbox_kind_for(address: str, delegated_user: str | None, forced: str = "auto") -> str:
    """Workspace or consumer: delegation exists only in Workspace; gmail.com addresses are consumer."""
    if forced != "auto":
        return {"workspace": "Workspace", "consumer": "consumer"}[forced]
    if delegated_user:
        return "Workspace"
    domain = address.rsplit("@", 1)[-1].lower()
    return "consumer" if domain in CONSUMER_DOMAINS else "Workspace"


def _progress(line: str) -> None:
    print(f"drill: {line}", file=sys.stderr, flush=True)


def run_live(
    settings: DrillSettings,
    env: dict[str, str],
    forced_kind: str,
    signer: str | None = None,
    progress: Callable[[str], None] = _progress,
) -> dict[str, Any]:
    from safesend.adapters.gmail_auth import load_gmail_credentials

    delegated = env.get("SAFESEND_GMAIL_DELEGATED_USER") or None
    credentials = load_gmail_credentials(
        env.get("SAFESEND_GMAIL_CREDENTIALS_JSON") or None,
        env.get("SAFESEND_GMAIL_CREDENTIALS_FILE") or None,
        delegated,
        signer_email=signer,
    )
    mailer = GmailMailer(
        user=env.get("SAFESEND_GMAIL_USER") or "me",
        credentials=credentials,
        api_endpoint=env.get("SAFESEND_GMAIL_API_ENDPOINT") or None,
    )
    address = str(mailer.profile().get("emailAddress") or "")
    kind = mailbox_kind_for(address, delegated, forced_kind)
    cut = make_cut_send(mailer, credentials, settings.cut_hold_s, timeout_s=20.0)
    return Drill(mailer, settings, LIVE, kind, cut, progress=progress).run()


def run_mock(
    settings: DrillSettings, index_lag_s: float, history_lag_s: float, progress: Callable[[str], None] = _progress
) -> dict[str, Any]:
    """The same drill against an in-process Gmail simulator (stopped before returning)."""
    from devstack.gmail_sim import GmailSimulator

    with GmailSimulator(index_lag_s=index_lag_s, history_lag_s=history_lag_s) as sim:
        mailer = GmailMailer(api_endpoint=sim.url, send_timeout_s=5.0, read_timeout_s=5.0)
        cut = make_cut_send(mailer, None, settings.cut_hold_s, timeout_s=5.0)
        report = Drill(mailer, settings, MOCK, "simulator", cut, progress=progress).run()
        report["simulator"] = {
            "index_lag_s": index_lag_s,
            "history_lag_s": history_lag_s,
            "accepted": len(sim.effects()),
        }
        return report


def main(argv: list[str] | None = None, env: dict[str, str] | None = None) -> int:
    env = dict(os.environ if env is None else env)
    parser = argparse.ArgumentParser(prog="python -m devstack.drill", description=__doc__.splitlines()[0])
    parser.add_argument("--to", help="the sink address (one you own; required LIVE)")
    parser.add_argument("--count", type=int, default=5, help="messages sent normally (default 5)")
    parser.add_argument("--dropped", type=int, default=2, help="messages whose response is dropped (default 2)")
    parser.add_argument("--poll-s", type=float, default=1.0, help="poll interval (default 1 s)")
    parser.add_argument("--max-wait-s", type=float, default=300.0, help="per message, then 'not seen' (default 300)")
    parser.add_argument("--spacing-s", type=float, default=1.0, help="between sends (default 1 s)")
    parser.add_argument(
        "--cut-hold-s",
        type=float,
        default=0.0,
        help="hold the connection this long after the request was acknowledged, then cut",
    )
    parser.add_argument("--from", dest="sender", help="From (default SAFESEND_DEFAULT_FROM, else the mailbox)")
    parser.add_argument("--message-id-domain", help="default SAFESEND_MESSAGE_ID_DOMAIN, else the From's domain")
    parser.add_argument("--mailbox-kind", choices=("auto", "workspace", "consumer"), default="auto")
    parser.add_argument(
        "--delegation-signer",
        help="keyless delegation from a workstation: the service account "
        "whose client ID is authorised, signing for your ADC identity (token creator on it)",
    )
    parser.add_argument("--out", default=str(_REPO_ROOT / ".local" / "drill"), help="report directory")
    parser.add_argument("--mock", action="store_true", help="run against the local Gmail simulator (MOCK)")
    parser.add_argument("--mock-index-lag", type=float, default=3.0)
    parser.add_argument("--mock-history-lag", type=float, default=1.0)
    parser.add_argument(
        "--provider",
        choices=("gmail", "graph"),
        default="gmail",
        help="graph: a Microsoft 365 mailbox through Microsoft Graph (devstack/drill_graph.py)",
    )
    args = parser.parse_args(argv)
    settings = DrillSettings(
        to=args.to or ("sink@example.com" if args.mock else ""),
        count=args.count,
        dropped=args.dropped,
        poll_s=args.poll_s,
        max_wait_s=args.max_wait_s,
        spacing_s=args.spacing_s,
        cut_hold_s=args.cut_hold_s,
        sender=args.sender,
        message_id_domain=args.message_id_domain,
    )
    try:
        settings.check()
        if args.mock and args.sender is None and args.message_id_domain is None:
            settings.message_id_domain = "drill.safesend.localhost"
        if args.provider == "graph":
            from devstack.drill_graph import run_graph_live, run_graph_mock

            report = run_graph_mock(settings, args.mock_index_lag) if args.mock else run_graph_live(settings, env)
        elif args.mock:
            report = run_mock(settings, args.mock_index_lag, args.mock_history_lag)
        else:
            report = run_live(settings, env, args.mailbox_kind, args.delegation_signer)
    except DrillError as exc:
        print(f"drill: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - credentials, network: say what, not the secret
        print(f"drill: could not run: {type(exc).__name__}: {mask_emails(str(exc))[:300]}", file=sys.stderr)
        return 1
    json_path, md_path = write_report(report, Path(args.out))
    print(render_markdown(report))
    print(f"drill: wrote {json_path} and {md_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
