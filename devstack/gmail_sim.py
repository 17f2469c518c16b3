"""A local Gmail API v1 subset (messages.send/list/get, getProfile, history.list) for the real google-api-python-client.

Why: safesend makes sends retry-safe by fixing the Message-ID and reconciling against the mailbox
(``rfc822msgid:`` search, or the mailbox's change log). To test that without Google we need a server that
behaves like Gmail where it matters: search-index lag, Message-ID rewriting of malformed ids, Google-style
error bodies, injected errors that accept nothing, and an acceptance ("effects") log that tells how many
messages really went out.

The change log (``users.history.list``, ``users.getProfile``): every change (a message added with its
labels, labels added or removed, a message deleted) gets a new, larger historyId (with random gaps, as
Gmail's are "not contiguous"). ``history.list`` returns the records after ``startHistoryId`` oldest first,
filtered by ``labelId`` (the message's labels as the record saw them, or the labels the record changed)
and ``historyTypes``, paged by ``maxResults``/``pageToken``; a ``startHistoryId`` older than the retention
(``set_history_retention``: the last N records and/or records younger than X s) or newer than the mailbox
answers 404 like Gmail. The history lag (``set_history_lag``, independent of the search-index lag) hides a
record from ``history.list`` until it is that old. The ``historyId`` of getProfile and of every list
response is the mailbox's current id, records still hidden by the lag included: a checkpoint taken from it
can be past a record that is not listed yet (the conservative reading of Gmail's documentation).

Gmail's limits (devstack.gmail_quota, all off by default): the per-user units-per-minute moving window,
the rolling-24 h message and recipient limits and the per-message recipient limit, each refused with
Gmail's own error body; set through ``set_limits`` or ``/_sim/config``. Every window reads the
simulator's clock, which ``advance_clock`` (``POST /_sim/clock``) moves forward.

Mailboxes: by default every ``userId`` ("me" or an address) sees the same mailbox. A mailbox declared with
``add_mailbox`` (``/_sim/config {"mailboxes": [...]}``) has its own messages (the Message-ID index),
change log, limits and usage; requests reach it by its address as userId, or as "me" with a bearer
token given for it (a delegated user's token). The effects log is shared and names the mailbox.

Standard library only (plus its sibling gmail_quota). Binds 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import bisect
import copy
import email.message
import email.policy
import email.utils
import hashlib
import json
import random
import re
import secrets
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from email.parser import BytesParser
from typing import Any, cast

from devstack.gmail_quota import PRESETS, Limits, MailboxQuota, Refusal
from devstack.sim_server import (
    LOOPBACK,
    MAX_INDEX_LAG_S,
    LoopbackSimulator,
    RequestBodyError,
    SimHandler,
    serve_until_signalled,
)

__all__ = ["GmailSimulator", "SimError", "google_error_body", "is_strict_message_id", "main"]

MAX_INJECTED_ERRORS = 10_000
MAX_HISTORY_RECORDS = 100_000  # default retention by count (also the ceiling of set_history_retention)
MAX_HISTORY_AGE_S = 30 * 86400.0
HISTORY_PAGE_DEFAULT = 100  # Gmail's documented maxResults default for history.list ...
HISTORY_PAGE_MAX = 500  # ... and its maximum
HISTORY_TYPES = ("messageAdded", "messageDeleted", "labelAdded", "labelRemoved")
HISTORY_ID_MAX_GAP = 4  # each change advances the historyId by 1..4: valid ids are not contiguous
FIRST_HISTORY_ID = 1000
DEFAULT_EMAIL_ADDRESS = "sim-mailbox@safesend.localhost"

_STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    411: "INVALID_ARGUMENT",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
_DEFAULT_REASONS = {
    400: "badRequest",
    401: "authError",
    403: "forbidden",
    404: "notFound",
    429: "rateLimitExceeded",
    500: "backendError",
    502: "backendError",
    503: "backendError",
    504: "backendError",
}
_REASON_MESSAGES = {
    "authError": "Request had invalid authentication credentials. Expected OAuth 2 access token, "
    "login cookie or other valid authentication credential.",
    "forbidden": "The caller does not have permission",
    "rateLimitExceeded": "Rate Limit Exceeded",
    "userRateLimitExceeded": "User-rate limit exceeded",
    "domainPolicy": "The domain administrators have disabled Gmail apps.",
    "notFound": "Requested entity was not found.",
    "backendError": "Backend Error",
}
_STATUS_MESSAGES = {
    400: "Bad Request",
    429: "Resource has been exhausted (e.g. check quota).",
    500: "Backend Error",
    503: "The service is currently unavailable.",
}

_ATEXT = r"[A-Za-z0-9!#$%&'*+\-/=?^_`{|}~]"
_DOT_ATOM_TEXT = rf"{_ATEXT}+(?:\.{_ATEXT}+)*"
_STRICT_MSGID = re.compile(rf"<{_DOT_ATOM_TEXT}@{_DOT_ATOM_TEXT}>")
_GMAIL_ID = re.compile(r"[0-9a-f]{1,32}")
_B64_CHARS = re.compile(r"[A-Za-z0-9_\-+/]*={0,2}")
_API_PATH = re.compile(r"/gmail/v1/users/(?P<user>[^/]+)/messages(?:/(?P<rest>[^/]+))?")
_UPLOAD_PATH = re.compile(r"/upload/gmail/v1/users/(?P<user>[^/]+)/messages/send")
_PROFILE_PATH = re.compile(r"/gmail/v1/users/(?P<user>[^/]+)/profile")
_HISTORY_PATH = re.compile(r"/gmail/v1/users/(?P<user>[^/]+)/history")
_PAGE_TOKEN = re.compile(r"h([0-9]{1,19})")
_HIDDEN_LABELS = ("SPAM", "TRASH")
_FORMATS = ("minimal", "full", "raw", "metadata")


def google_error_body(code: int, message: str | None = None, reason: str | None = None, domain: str = "global") -> dict:
    """Build the JSON error body Google APIs return, so googleapiclient's HttpError parses it like prod."""
    reason = reason or _DEFAULT_REASONS.get(code, "invalidArgument" if code == 400 else "unknown")
    message = message or _REASON_MESSAGES.get(reason) or _STATUS_MESSAGES.get(code) or f"HTTP {code}"
    return {
        "error": {
            "code": code,
            "message": message,
            "errors": [{"message": message, "domain": domain, "reason": reason}],
            "status": _STATUS_NAMES.get(code, "UNKNOWN"),
        }
    }


class SimError(Exception):
    """A request the simulator answers with a Google-style error (raised inside handlers)."""

    def __init__(self, code: int, message: str | None = None, reason: str | None = None) -> None:
        super().__init__(message or str(code))
        self.code = code
        self.body = google_error_body(code, message, reason)

    @classmethod
    def from_refusal(cls, refusal: Refusal) -> SimError:
        """A quota refusal (rate, daily, recipients) with its own domain and message."""
        err = cls(refusal.status, refusal.message, refusal.reason)
        err.body = refusal.body()
        return err


def is_strict_message_id(value: str) -> bool:
    """True for ``<dot-atom-text@dot-atom-text>`` with no whitespace/CFWS: the ids Gmail keeps verbatim."""
    return _STRICT_MSGID.fullmatch(value) is not None


def _b64url_decode(text: str) -> bytes:
    """Decode Gmail's ``raw`` (base64url; Gmail also tolerates missing padding and the +/ alphabet)."""
    if not isinstance(text, str) or not _B64_CHARS.fullmatch(text) or len(text.rstrip("=")) % 4 == 1:
        raise ValueError("not base64url")
    stripped = text.rstrip("=").replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(stripped + "=" * (-len(stripped) % 4), validate=True)
    except binascii.Error as exc:
        raise ValueError("not base64url") from exc


def _b64url_encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii")


def _unfold(value: str) -> str:
    return value.replace("\r\n", "").replace("\n", "").replace("\r", "")


def _parse(raw: bytes) -> email.message.EmailMessage:
    return BytesParser(policy=email.policy.default).parsebytes(raw)


def _raw_headers(msg: email.message.Message) -> list[tuple[str, str]]:
    """Headers as (name, unfolded source value); avoids the policy's re-parsing of odd values."""
    return [(name, _unfold(value).strip()) for name, value in msg.raw_items()]


def _header_value(headers: list[tuple[str, str]], name: str) -> str | None:
    for key, value in headers:
        if key.lower() == name.lower():
            return value
    return None


def _rewrite_message_id(raw: bytes, new_id: str, original: str | None) -> bytes:
    """Replace/add Message-ID in the header block, keeping the rest byte-identical (Gmail-style rewrite)."""
    end = 0 if raw.startswith((b"\r\n", b"\n")) else len(raw)
    for sep in (b"\r\n\r\n", b"\n\n"):
        pos = raw.find(sep)
        if pos != -1 and pos + len(sep) // 2 < end:
            end = pos + len(sep) // 2  # keep the last header line's line break in the header block
    head, rest = raw[:end], raw[end:]
    eol = b"\r\n" if b"\r\n" in (head or raw[:1000]) else b"\n"
    kept: list[bytes] = []
    dropping = False
    for line in head.splitlines(keepends=True):
        if line[:1] in (b" ", b"\t"):
            if not dropping:
                kept.append(line)
            continue
        dropping = line.split(b":", 1)[0].strip().lower() == b"message-id"
        if not dropping:
            kept.append(line)
    added = b"Message-ID: " + new_id.encode("ascii") + eol
    if original is not None:
        added += b"X-Google-Original-Message-ID: " + original.encode("utf-8", "surrogateescape") + eol
    if not head and not raw.startswith((b"\r\n", b"\n")):  # nothing at all: add the blank line
        return added + eol + raw
    return added + b"".join(kept) + rest


def _snippet(msg: email.message.EmailMessage) -> str:
    try:
        part = msg.get_body(preferencelist=("plain", "html"))
        text = part.get_content() if part is not None else ""
    except (LookupError, KeyError, ValueError, AttributeError):
        text = ""
    return " ".join(str(text).split())[:200]


def _payload(part: email.message.Message, part_id: str, depth: int = 0) -> dict:
    """Gmail's ``payload`` tree for format=full (depth-bounded)."""
    out: dict[str, Any] = {
        "partId": part_id,
        "mimeType": part.get_content_type(),
        "filename": part.get_filename() or "",
        "headers": [{"name": n, "value": v} for n, v in _raw_headers(part)],
    }
    children = part.get_payload() if part.is_multipart() else None
    if isinstance(children, list) and depth < 20:
        out["body"] = {"size": 0}
        prefix = f"{part_id}." if part_id else ""
        out["parts"] = [_payload(child, f"{prefix}{i}", depth + 1) for i, child in enumerate(children[:100])]
    else:
        data = cast(bytes, part.get_payload(decode=True) or b"")  # a leaf part: its decoded bytes
        out["body"] = {"size": len(data), "data": _b64url_encode(data)} if data else {"size": 0}
    return out


def _split_multipart(body: bytes, boundary: str) -> list[tuple[email.message.Message, bytes]]:
    """Split multipart/related by hand: the stdlib parser would re-serialise the message/rfc822 part."""
    delimiter = b"--" + boundary.encode("ascii", "replace")
    chunks = body.split(delimiter)
    parts: list[tuple[email.message.Message, bytes]] = []
    for raw_chunk in chunks[1:101]:
        chunk = raw_chunk
        if chunk.startswith(b"--"):
            break
        for eol in (b"\r\n", b"\n"):
            if chunk.startswith(eol):
                chunk = chunk[len(eol) :]
                break
        for eol in (b"\r\n", b"\n"):  # the line break before a delimiter belongs to the delimiter
            if chunk.endswith(eol):
                chunk = chunk[: -len(eol)]
                break
        cut, sep_len = -1, 0
        for sep in (b"\r\n\r\n", b"\n\n"):
            pos = chunk.find(sep)
            if pos != -1 and (cut == -1 or pos < cut):
                cut, sep_len = pos, len(sep)
        if chunk.startswith((b"\r\n", b"\n")):  # part with no headers
            headers_raw, content = b"", chunk.lstrip(b"\r\n")
        elif cut == -1:
            headers_raw, content = chunk, b""
        else:
            headers_raw, content = chunk[:cut], chunk[cut + sep_len :]
        headers = BytesParser(policy=email.policy.compat32).parsebytes(headers_raw + b"\r\n\r\n", headersonly=True)
        parts.append((headers, content))
    return parts


@dataclass
class _Stored:
    """One message in the mailbox."""

    gmail_id: str
    thread_id: str
    user: str
    raw: bytes
    label_ids: list[str]
    accepted_at: float
    history_id: int
    message_id: str
    original_message_id: str | None
    raw_sha256: str
    headers: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class _HistoryRecord:
    """One change in the mailbox's log (Gmail's History resource, one change type per record)."""

    history_id: int
    at: float  # when the change happened; history.list shows it from at + history lag on
    kind: str  # one of HISTORY_TYPES
    gmail_id: str
    thread_id: str
    label_ids: tuple[str, ...]  # the message's labels right after the change
    changed_labels: tuple[str, ...] = ()  # labelAdded / labelRemoved: the labels that changed

    def matches(self, label: str | None, kinds: set[str] | None) -> bool:
        if kinds is not None and self.kind not in kinds:
            return False
        return label is None or label in self.label_ids or label in self.changed_labels

    def resource(self) -> dict:
        """The History resource: ``messages`` plus the one change array of this record's type."""
        ref = {"id": self.gmail_id, "threadId": self.thread_id}
        message = {**ref, "labelIds": list(self.label_ids)}
        out: dict[str, Any] = {"id": str(self.history_id), "messages": [ref]}
        if self.kind == "messageAdded":
            out["messagesAdded"] = [{"message": message}]
        elif self.kind == "messageDeleted":
            out["messagesDeleted"] = [{"message": ref}]
        else:
            out["labelsAdded" if self.kind == "labelAdded" else "labelsRemoved"] = [
                {"message": message, "labelIds": list(self.changed_labels)}
            ]
        return out


class _Mailbox:
    """One mailbox: its messages (the Message-ID index), its change log and its quota usage."""

    def __init__(self, address: str, limits: Limits, history_seed: int | str | None) -> None:
        self.address = address
        self.messages: dict[str, _Stored] = {}
        self.order: list[str] = []
        self.history = FIRST_HISTORY_ID  # the mailbox's current historyId
        self.history_log: list[_HistoryRecord] = []  # oldest first; ids strictly increasing
        self.history_expired_through = FIRST_HISTORY_ID  # a startHistoryId below this answers 404
        self.history_rng = random.Random(history_seed)
        self.quota = MailboxQuota(limits)

    def forget(self) -> None:
        """reset(): messages, change log and usage go; the historyId keeps growing, the limits stay."""
        self.messages.clear()
        self.order.clear()
        self.history_log.clear()
        self.history_expired_through = self.history
        self.quota.reset()


class GmailSimulator(LoopbackSimulator):
    """In-process Gmail API subset server; controllable from Python or over ``/_sim/*`` HTTP endpoints."""

    name = "gmail-sim"

    def __init__(
        self,
        host: str = LOOPBACK,
        port: int = 0,
        index_lag_s: float = 0.0,
        effects_path: str | None = None,
        clock: Callable[[], float] = time.time,
        verbose: bool = False,
        latency_s: float = 0.0,
        read_latency_s: float | None = None,
        history_lag_s: float = 0.0,
        email_address: str = DEFAULT_EMAIL_ADDRESS,
        history_seed: int | None = 0,
    ) -> None:
        super().__init__(host, port, clock, verbose)
        self._effects_path = effects_path
        self._effects: list[dict] = []
        self._errors: list[tuple[int, str | None]] = []
        self._history_lag_s = 0.0
        self._history_max_records: int | None = MAX_HISTORY_RECORDS
        self._history_max_age_s: float | None = None
        self._history_seed = history_seed
        self._rewrite_all_message_ids = False
        self._email_address = email_address
        self._default = _Mailbox(email_address, Limits(), history_seed)
        self._mailboxes: dict[str, _Mailbox] = {}  # declared mailboxes by lower-case address
        self._token_mailboxes: dict[str, str] = {}  # bearer token -> address: what "me" means for it
        self._id_counter = 0
        self.set_index_lag(index_lag_s)
        self.set_latency(latency_s, read_latency_s)
        self.set_history_lag(history_lag_s)

    @property
    def url(self) -> str:
        """Base URL to pass as ``client_options={"api_endpoint": url}``."""
        return f"http://{self._host}:{self.port}/"

    # -------------------------------------------------------------- mailboxes
    def add_mailbox(self, address: str, access_tokens: Iterable[str] = ()) -> None:
        """Declare a mailbox of its own: userId ``address`` (or "me" with one of ``access_tokens``, as a
        delegated user's token) sees only its messages, change log and limits. Undeclared userIds keep
        sharing the default mailbox (the simulator's behaviour before mailboxes). Its limits start as the
        default mailbox's."""
        if not isinstance(address, str) or "@" not in address or len(address) > 320:
            raise ValueError("a mailbox is an email address")
        key = address.lower()
        with self._lock:
            if key not in self._mailboxes and key != self._email_address.lower():
                seed = None if self._history_seed is None else f"{self._history_seed}/{key}"
                self._mailboxes[key] = _Mailbox(address, self._default.quota.limits, seed)
            for token in access_tokens:
                if not isinstance(token, str) or not token:
                    raise ValueError("access tokens are non-empty strings")
                self._token_mailboxes[token] = key

    def mailboxes(self) -> list[str]:
        """Every mailbox's address, the default one first."""
        with self._lock:
            return [self._email_address, *(m.address for m in self._mailboxes.values())]

    def _box(self, user: str | None, token: str | None = None) -> _Mailbox:
        """The mailbox a userId (and, for "me", a bearer token) names; lock held or not needed."""
        key = (user or "me").lower()
        if key == "me" and token is not None:
            key = self._token_mailboxes.get(token, key)
        return self._mailboxes.get(key, self._default)

    def _all_boxes(self) -> list[_Mailbox]:
        return [self._default, *self._mailboxes.values()]

    def _box_of(self, gmail_id: str) -> _Mailbox:
        for box in self._all_boxes():
            if gmail_id in box.messages:
                return box
        raise KeyError(f"no message {gmail_id!r}")

    # ------------------------------------------------------------------ limits
    def set_limits(self, mailbox: str | None = None, preset: str | None = None, **changes: Any) -> None:
        """Set Gmail's limits (gmail_quota.Limits fields, on top of ``preset``: none, workspace, trial...)
        for ``mailbox``, or for every mailbox (and those declared later) when it is None."""
        if preset is not None and preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}; expected one of {', '.join(PRESETS)}")
        with self._lock:
            known = {*self._mailboxes, self._email_address.lower()}
            if mailbox is not None and mailbox.lower() not in known:
                raise ValueError(f"unknown mailbox {mailbox!r}")
            boxes = self._all_boxes() if mailbox is None else [self._box(mailbox)]
            for box in boxes:
                base = PRESETS[preset] if preset is not None else box.quota.limits
                box.quota.limits = base.changed(changes)

    def usage(self) -> dict[str, dict]:
        """Per mailbox: units in the moving window, messages and recipients in the last 24 h, refusals."""
        with self._lock:
            now = self.now()
            return {box.address: box.quota.usage(now) for box in self._all_boxes()}

    def _charge(self, box: _Mailbox, method: str) -> None:
        """Spend ``method``'s quota units in ``box`` or raise its rate-limit refusal."""
        with self._lock:
            refusal = box.quota.charge(method, self.now())
        if refusal is not None:
            raise SimError.from_refusal(refusal)

    # ------------------------------------------------------------------ controls
    def effects(self) -> list[dict]:
        """Copy of the acceptance log (one dict per accepted message, in acceptance order)."""
        with self._lock:
            return copy.deepcopy(self._effects)

    def reset(self) -> None:
        """Forget messages, effects, injected errors, change logs and usage; truncates effects_path so the
        file agrees. Mailboxes and limits stay. The historyId keeps growing (as a mailbox's does):
        checkpoints from before answer 404."""
        with self._lock:
            for box in self._all_boxes():
                box.forget()
            self._effects.clear()
            self._errors.clear()
            if self._effects_path:
                with open(self._effects_path, "w", encoding="utf-8"):
                    pass

    def set_history_lag(self, seconds: float) -> None:
        """Model a lag of Gmail's change log, independent of the search index: ``history.list`` shows a
        change only once it is ``seconds`` old (messages.get and getProfile are never lagged)."""
        seconds = float(seconds)
        if not 0.0 <= seconds <= MAX_INDEX_LAG_S:
            raise ValueError(f"history_lag_s must be within [0, {MAX_INDEX_LAG_S}]")
        with self._lock:
            self._history_lag_s = seconds

    def set_history_retention(
        self, max_records: int | None = MAX_HISTORY_RECORDS, max_age_s: float | None = None
    ) -> None:
        """Keep only the last ``max_records`` changes and/or the changes younger than ``max_age_s``
        (None: no bound of that kind; the count never exceeds MAX_HISTORY_RECORDS), in every mailbox. A
        startHistoryId before the oldest change kept answers 404, as Gmail does for an out-of-date one."""
        if max_records is not None and (
            isinstance(max_records, bool)
            or not isinstance(max_records, int)
            or not 0 <= max_records <= MAX_HISTORY_RECORDS
        ):
            raise ValueError(f"max_records must be an int within [0, {MAX_HISTORY_RECORDS}] or None")
        if max_age_s is not None and not 0.0 <= float(max_age_s) <= MAX_HISTORY_AGE_S:
            raise ValueError(f"max_age_s must be within [0, {MAX_HISTORY_AGE_S}] or None")
        with self._lock:
            self._history_max_records = MAX_HISTORY_RECORDS if max_records is None else max_records
            self._history_max_age_s = None if max_age_s is None else float(max_age_s)
            for box in self._all_boxes():
                self._prune_history(box)

    def set_rewrite_message_ids(self, rewrite: bool) -> None:
        """Rewrite every Message-ID, strictly valid ones too (what lieer#198 reports of Gmail's API);
        the original is kept in X-Google-Original-Message-ID. Off by default."""
        with self._lock:
            self._rewrite_all_message_ids = bool(rewrite)

    @property
    def history_lag_s(self) -> float:
        with self._lock:
            return self._history_lag_s

    @property
    def current_history_id(self) -> int:
        """The default mailbox's current historyId (what getProfile answers); history_id() for another."""
        return self.history_id()

    def history_id(self, mailbox: str | None = None) -> int:
        """A mailbox's current historyId (what getProfile answers for it)."""
        with self._lock:
            return self._box(mailbox).history

    def history_records(self, mailbox: str | None = None) -> list[dict]:
        """A mailbox's change log as kept (retention applied, history lag ignored): oldest first."""
        with self._lock:
            box = self._box(mailbox)
            self._prune_history(box)
            return [record.resource() for record in box.history_log]

    def modify_labels(self, gmail_id: str, add: Iterable[str] = (), remove: Iterable[str] = ()) -> list[str]:
        """Add/remove labels (like users.messages.modify): one labelAdded and/or one labelRemoved record."""
        add_ids = [label for label in dict.fromkeys(add) if isinstance(label, str) and label]
        remove_ids = [label for label in dict.fromkeys(remove) if isinstance(label, str) and label]
        with self._lock:
            box = self._box_of(gmail_id)
            m = box.messages[gmail_id]
            added = [label for label in add_ids if label not in m.label_ids and label not in remove_ids]
            removed = [label for label in remove_ids if label in m.label_ids]
            now = self.now()
            if added:
                m.label_ids = m.label_ids + added
                m.history_id = self._record(box, "labelAdded", m, now, tuple(added))
            if removed:
                m.label_ids = [label for label in m.label_ids if label not in removed]
                m.history_id = self._record(box, "labelRemoved", m, now, tuple(removed))
            return list(m.label_ids)

    def delete_message(self, gmail_id: str) -> None:
        """Delete for good (like users.messages.delete): a messageDeleted record; the effects log keeps it."""
        with self._lock:
            box = self._box_of(gmail_id)
            m = box.messages.pop(gmail_id)
            box.order.remove(gmail_id)
            self._record(box, "messageDeleted", m, self.now())

    def inject_errors(self, status: int, count: int = 1, reason: str | None = None) -> None:
        """Make the next ``count`` send calls fail with a Google-style ``status`` error, accepting nothing."""
        if not isinstance(status, int) or not 400 <= status <= 599:
            raise ValueError("status must be an HTTP error code in [400, 599]")
        if not isinstance(count, int) or not 1 <= count <= MAX_INJECTED_ERRORS:
            raise ValueError(f"count must be within [1, {MAX_INJECTED_ERRORS}]")
        with self._lock:
            self._errors.extend([(status, reason)] * count)

    def insert_message(self, raw: bytes, label_ids: Iterable[str] = ("SENT",), user: str = "me") -> str:
        """Store a message as if it already existed (e.g. a duplicate); it is recorded in effects too, but
        spends no quota and counts toward no daily limit."""
        return self._accept(self._box(user), raw, list(label_ids), user, source="insert").gmail_id

    # ------------------------------------------------------------------- Gmail ops
    def _take_injected_error(self) -> SimError | None:
        with self._lock:
            if not self._errors:
                return None
            status, reason = self._errors.pop(0)
        return SimError(status, reason=reason)

    def send(self, raw: bytes, user: str, source: str, thread_id: str | None = None, token: str | None = None) -> dict:
        """messages.send semantics: injected errors first, then the rate quota, recipient validation, the
        per-message and daily limits, then acceptance."""
        injected = self._take_injected_error()
        if injected is not None:
            raise injected
        box = self._box(user, token)
        self._charge(box, "send")
        msg = _parse(raw)
        headers = _raw_headers(msg)
        parsed = email.utils.getaddresses([v for n, v in headers if n.lower() in ("to", "cc", "bcc")])
        addresses = [addr for _name, addr in parsed if addr]
        if not addresses:
            raise SimError(400, "Recipient address required", "invalidArgument")
        if any("@" not in addr for addr in addresses):
            raise SimError(400, "Invalid To header", "invalidArgument")
        with self._lock:  # the daily check and the acceptance are one step: no burst slips past the limit
            refusal = box.quota.admit_send(len(addresses), self.now())
            if refusal is not None:
                raise SimError.from_refusal(refusal)
            stored = self._accept(box, raw, ["SENT"], user, source=source, thread_id=thread_id)
            box.quota.record_send(len(addresses), stored.accepted_at)
        return {"id": stored.gmail_id, "threadId": stored.thread_id, "labelIds": list(stored.label_ids)}

    def _new_gmail_id(self, box: _Mailbox) -> str:
        for _ in range(100):
            self._id_counter += 1
            ms = int(self.now() * 1000) & ((1 << 44) - 1)
            candidate = f"{ms:011x}{self._id_counter & 0xFFFFF:05x}"
            if candidate not in box.messages:
                return candidate
        return secrets.token_hex(8)

    def _accept(
        self, box: _Mailbox, raw: bytes, label_ids: list[str], user: str, source: str, thread_id: str | None = None
    ) -> _Stored:
        headers = _raw_headers(_parse(raw))
        given = _header_value(headers, "Message-ID")
        original: str | None = None
        with self._lock:
            rewrite_all = self._rewrite_all_message_ids
        if given is not None and is_strict_message_id(given) and not rewrite_all:
            message_id, stored_raw = given, raw
        else:
            message_id = f"<sim.{secrets.token_hex(12)}@mx.google.com>"
            original = given
            stored_raw = _rewrite_message_id(raw, message_id, original)
        with self._lock:
            gmail_id = self._new_gmail_id(box)
            if thread_id is None or not any(m.thread_id == thread_id for m in box.messages.values()):
                thread_id = gmail_id
            now = self.now()
            stored = _Stored(
                gmail_id=gmail_id,
                thread_id=thread_id,
                user=user,
                raw=stored_raw,
                label_ids=list(dict.fromkeys(label_ids)),
                accepted_at=now,
                history_id=0,  # set by the messageAdded record below
                message_id=message_id,
                original_message_id=original,
                raw_sha256=hashlib.sha256(raw).hexdigest(),
                headers=_raw_headers(_parse(stored_raw)),
            )
            box.messages[gmail_id] = stored
            box.order.append(gmail_id)
            stored.history_id = self._record(box, "messageAdded", stored, now)
            effect = {
                "gmail_id": gmail_id,
                "thread_id": thread_id,
                "message_id": message_id,
                "original_message_id": original,
                "user": user,
                "mailbox": box.address,
                "to": _header_value(stored.headers, "To") or "",
                "subject": _header_value(stored.headers, "Subject") or "",
                "accepted_at": now,
                "raw_sha256": stored.raw_sha256,
                "labels": list(stored.label_ids),
                "source": source,
            }
            self._effects.append(effect)
            if self._effects_path:
                with open(self._effects_path, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(effect, sort_keys=True) + "\n")
                    fh.flush()
            return copy.deepcopy(stored)

    def _record(self, box: _Mailbox, kind: str, m: _Stored, at: float, changed: tuple[str, ...] = ()) -> int:
        """Append one change to a mailbox's log under a new historyId (lock held); returns the id."""
        box.history += 1 + box.history_rng.randrange(HISTORY_ID_MAX_GAP)
        box.history_log.append(
            _HistoryRecord(box.history, at, kind, m.gmail_id, m.thread_id, tuple(m.label_ids), changed)
        )
        self._prune_history(box)
        return box.history

    def _prune_history(self, box: _Mailbox) -> None:
        """Drop changes beyond the retention (lock held); remember the newest id dropped."""
        log = box.history_log
        cut = 0
        if self._history_max_records is not None and len(log) > self._history_max_records:
            cut = len(log) - self._history_max_records
        if self._history_max_age_s is not None:
            oldest_kept = self.now() - self._history_max_age_s
            while cut < len(log) and log[cut].at < oldest_kept:
                cut += 1
        if cut:
            box.history_expired_through = max(box.history_expired_through, log[cut - 1].history_id)
            del log[:cut]

    def get_profile(self, user: str, token: str | None = None) -> dict:
        """users.getProfile: the address, the totals and the mailbox's current historyId."""
        box = self._box(user, token)
        self._charge(box, "profile")
        with self._lock:
            threads = {m.thread_id for m in box.messages.values()}
            declared = box is not self._default
            return {
                "emailAddress": box.address if declared or "@" not in user else user,
                "messagesTotal": len(box.messages),
                "threadsTotal": len(threads),
                "historyId": str(box.history),
            }

    def list_history(self, params: dict[str, list[str]], user: str = "me", token: str | None = None) -> dict:
        """users.history.list: the changes after startHistoryId, oldest first, filtered and paged.

        404 when startHistoryId is older than the retention or newer than the mailbox; records younger
        than the history lag are not shown yet; ``historyId`` is the mailbox's current id.
        """
        box = self._box(user, token)
        self._charge(box, "history")
        start_values = params.get("startHistoryId") or []
        if not start_values or start_values[-1] == "":
            raise SimError(400, "Missing required parameter: startHistoryId", "invalidArgument")
        start = _parse_int(start_values, "startHistoryId", default=0, low=0, high=2**64 - 1)
        max_results = _parse_int(
            params.get("maxResults"), "maxResults", default=HISTORY_PAGE_DEFAULT, low=1, high=HISTORY_PAGE_MAX
        )
        labels = [value for value in params.get("labelId", []) if value]
        label = labels[-1] if labels else None
        kinds: set[str] | None = None
        for value in params.get("historyTypes", []):
            for kind in value.split(","):
                if kind not in HISTORY_TYPES:
                    raise SimError(400, f"Invalid value for historyTypes: {kind!r}", "invalidArgument")
                kinds = (kinds or set()) | {kind}
        token_value = (params.get("pageToken") or [""])[-1]
        after = start
        if token_value:
            match = _PAGE_TOKEN.fullmatch(token_value)
            if match is None or int(match[1]) < start:
                raise SimError(400, "Invalid pageToken", "invalidArgument")
            after = int(match[1])
        with self._lock:
            self._prune_history(box)
            if start < box.history_expired_through or start > box.history or after < box.history_expired_through:
                raise SimError(404, "Requested entity was not found.", "notFound")
            visible_until = self.now() - self._history_lag_s
            page: list[_HistoryRecord] = []
            more = False
            first = bisect.bisect_right(box.history_log, after, key=lambda r: r.history_id)
            for record in box.history_log[first:]:  # bounded by the retention
                if record.at > visible_until:
                    break  # ids grow with time: everything after this is younger still
                if not record.matches(label, kinds):
                    continue
                if len(page) == max_results:
                    more = True
                    break
                page.append(record)
            out: dict[str, Any] = {}
            if page:
                out["history"] = [record.resource() for record in page]
            if more:
                out["nextPageToken"] = f"h{page[-1].history_id}"
            out["historyId"] = str(box.history)
            return out

    def list_messages(self, params: dict[str, list[str]], user: str = "me", token: str | None = None) -> dict:
        """messages.list; the index lag applies to q= searches only (label listing is immediate)."""
        box = self._box(user, token)
        self._charge(box, "list")
        q = (params.get("q") or [""])[-1].strip()
        wanted_ids = _parse_query(q)
        labels = [lbl for value in params.get("labelIds", []) for lbl in value.split(",") if lbl]
        include_hidden = _parse_bool(params.get("includeSpamTrash"), "includeSpamTrash")
        max_results = _parse_int(params.get("maxResults"), "maxResults", default=100, low=1, high=500)
        offset = _parse_int(params.get("pageToken"), "pageToken", default=0, low=0, high=10**9)
        with self._lock:
            horizon = self.now() - self._index_lag_s
            hits = []
            for gmail_id in reversed(box.order):  # newest first, like Gmail
                m = box.messages[gmail_id]
                if wanted_ids is not None and (m.accepted_at > horizon or m.message_id[1:-1] not in wanted_ids):
                    continue
                if any(lbl not in m.label_ids for lbl in labels):
                    continue
                hidden = [h for h in _HIDDEN_LABELS if h in m.label_ids and h not in labels]
                if hidden and not include_hidden:
                    continue
                hits.append({"id": m.gmail_id, "threadId": m.thread_id})
        page = hits[offset : offset + max_results]
        out: dict[str, Any] = {}
        if page:
            out["messages"] = page
        if offset + max_results < len(hits):
            out["nextPageToken"] = str(offset + max_results)
        out["resultSizeEstimate"] = len(hits)
        return out

    def get_message(
        self, gmail_id: str, params: dict[str, list[str]], user: str = "me", token: str | None = None
    ) -> dict:
        """messages.get in minimal / metadata / full / raw formats."""
        box = self._box(user, token)
        self._charge(box, "get")
        fmt = (params.get("format") or ["full"])[-1].lower()
        if fmt not in _FORMATS:
            raise SimError(400, f"Invalid value at 'format' ({fmt})", "invalidArgument")
        if not _GMAIL_ID.fullmatch(gmail_id):
            raise SimError(400, "Invalid id value", "invalidArgument")
        with self._lock:
            found = box.messages.get(gmail_id)
            if found is None:
                raise SimError(404, "Requested entity was not found.", "notFound")
            m = copy.deepcopy(found)
        out: dict[str, Any] = {"id": m.gmail_id, "threadId": m.thread_id, "labelIds": list(m.label_ids)}
        if fmt == "minimal":
            return {**out, **_stats(m)}
        parsed = _parse(m.raw)
        out["snippet"] = _snippet(parsed)
        if fmt == "metadata":
            names = {n.lower() for value in params.get("metadataHeaders", []) for n in value.split(",") if n}
            headers = [{"name": n, "value": v} for n, v in m.headers if not names or n.lower() in names]
            out["payload"] = {"mimeType": parsed.get_content_type(), "headers": headers}
        elif fmt == "full":
            out["payload"] = _payload(parsed, "")
        else:
            out["raw"] = _b64url_encode(m.raw)
        return {**out, **_stats(m)}


def _stats(m: _Stored) -> dict:
    return {
        "sizeEstimate": len(m.raw),
        "historyId": str(m.history_id),
        "internalDate": str(int(m.accepted_at * 1000)),
    }


def _parse_query(q: str) -> set[str] | None:
    """Only ``rfc822msgid:`` terms are understood; anything else is a 400 so tests can't silently pass."""
    if not q:
        return None
    wanted: set[str] | None = None
    for term in q.split()[:50]:
        key, sep, value = term.partition(":")
        if not sep or key.lower() != "rfc822msgid" or not value:
            raise SimError(400, f"Unsupported search term in simulator: {term!r}", "invalidArgument")
        value = value[1:-1] if value.startswith("<") and value.endswith(">") else value
        wanted = {value} if wanted is None else wanted & {value}  # several terms AND together
    return wanted


def _parse_bool(values: list[str] | None, name: str) -> bool:
    if not values:
        return False
    value = values[-1].lower()
    if value not in ("true", "false"):
        raise SimError(400, f"Invalid value for {name}: {values[-1]!r}", "invalidArgument")
    return value == "true"


def _parse_int(values: list[str] | None, name: str, default: int, low: int, high: int) -> int:
    if not values or values[-1] == "":
        return default
    try:
        value = int(values[-1])
    except ValueError:
        raise SimError(400, f"Invalid value for {name}: {values[-1]!r}", "invalidArgument") from None
    if not low <= value <= high:
        raise SimError(400, f"Invalid value for {name}: {value}", "invalidArgument")
    return value


class _GmailHandler(SimHandler):
    """Gmail's routes and Google-style error bodies on the shared keep-alive plumbing."""

    server_version = "gmail-sim/1"

    def error_reply(self, exc: Exception) -> tuple[int, Any, dict[str, str]]:
        if isinstance(exc, RequestBodyError):
            exc = SimError(exc.status, exc.message, exc.reason)
        if isinstance(exc, SimError):
            return exc.code, exc.body, {}
        return 500, google_error_body(500, f"simulator error: {exc!r}", "backendError"), {}

    def latency_kind(self, method: str) -> str | None:
        return _latency_kind(method, self.path)

    def route(self, method: str, body: bytes) -> tuple[int, Any]:
        parts = urllib.parse.urlsplit(self.path)
        path = parts.path
        params = urllib.parse.parse_qs(parts.query, keep_blank_values=True)
        sim = cast(GmailSimulator, self.server.sim)
        if path.startswith("/_sim/"):
            return _control(sim, method, path, body, params)
        auth = self.headers.get("Authorization") or ""
        token = auth[7:].strip() if auth[:7].lower() == "bearer " else None
        match = _API_PATH.fullmatch(path)
        if match:
            user = urllib.parse.unquote(match["user"])
            rest = match["rest"]
            if rest is None and method == "GET":
                return 200, sim.list_messages(params, user, token)
            if rest == "send" and method == "POST":
                raw, thread_id = _json_send_payload(body)
                return 200, sim.send(raw, user, source="send", thread_id=thread_id, token=token)
            if rest not in (None, "send") and method == "GET":
                return 200, sim.get_message(urllib.parse.unquote(rest), params, user, token)
        match = _PROFILE_PATH.fullmatch(path)
        if match and method == "GET":
            return 200, sim.get_profile(urllib.parse.unquote(match["user"]), token)
        match = _HISTORY_PATH.fullmatch(path)
        if match and method == "GET":
            return 200, sim.list_history(params, urllib.parse.unquote(match["user"]), token)
        match = _UPLOAD_PATH.fullmatch(path)
        if match and method == "POST":
            user = urllib.parse.unquote(match["user"])
            upload_type = (params.get("uploadType") or [""])[-1]
            raw, thread_id = _upload_payload(upload_type, self.headers.get("Content-Type") or "", body)
            return 200, sim.send(raw, user, source=f"upload-{upload_type}", thread_id=thread_id, token=token)
        raise SimError(404, f"Not Found: {method} {path}", "notFound")


GmailSimulator.handler = _GmailHandler  # defined after the simulator, whose methods its routes call


def _latency_kind(method: str, target: str) -> str | None:
    """ "send" for messages.send (JSON or upload), "read" for list/get/getProfile/history, None for anything else."""
    path = urllib.parse.urlsplit(target).path
    if _UPLOAD_PATH.fullmatch(path):
        return "send"
    if method == "GET" and (_PROFILE_PATH.fullmatch(path) or _HISTORY_PATH.fullmatch(path)):
        return "read"
    match = _API_PATH.fullmatch(path)
    if match is None:
        return None
    if match["rest"] == "send":
        return "send"
    return "read" if method == "GET" else None


def _json_send_payload(body: bytes) -> tuple[bytes, str | None]:
    try:
        payload = json.loads(body.decode("utf-8") or "{}")
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise SimError(400, "Invalid JSON payload received.", "invalidArgument") from None
    if not isinstance(payload, dict):
        raise SimError(400, "Invalid JSON payload received.", "invalidArgument")
    raw_text = payload.get("raw")
    if not raw_text:
        raise SimError(
            400,
            "'raw' RFC822 payload message string or uploading message via /upload/* URL required",
            "invalidArgument",
        )
    try:
        raw = _b64url_decode(raw_text)
    except ValueError:
        shown = str(raw_text)[:40]
        raise SimError(400, f"Invalid value for ByteString: {shown}", "invalidArgument") from None
    thread_id = payload.get("threadId")
    return raw, thread_id if isinstance(thread_id, str) else None


def _upload_payload(upload_type: str, content_type: str, body: bytes) -> tuple[bytes, str | None]:
    """Accept uploadType=media (raw message body) and multipart (JSON metadata part + message part)."""
    ctype = email.message.Message()
    ctype["Content-Type"] = content_type or "application/octet-stream"
    if upload_type == "media":
        if ctype.get_content_maintype() != "message":
            raise SimError(
                400,
                f"Media type '{ctype.get_content_type()}' is not supported. Valid media types: [message/*]",
                "badContent",
            )
        if not body:
            raise SimError(400, "Media upload is empty", "invalidArgument")
        return body, None
    if upload_type == "multipart":
        boundary = ctype.get_param("boundary")
        if ctype.get_content_type() != "multipart/related" or not isinstance(boundary, str):
            raise SimError(400, "multipart upload needs Content-Type multipart/related with a boundary")
        parts = _split_multipart(body, boundary)
        if len(parts) != 2:
            raise SimError(400, f"multipart upload needs 2 parts, got {len(parts)}", "badContent")
        (_meta_headers, meta_bytes), (media_headers, media) = parts
        try:
            meta = json.loads(meta_bytes.decode("utf-8") or "{}")
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise SimError(400, "Invalid JSON payload received.", "invalidArgument") from None
        if media_headers.get_content_maintype() != "message":
            raise SimError(400, "Valid media types: [message/*]", "badContent")
        thread_id = meta.get("threadId") if isinstance(meta, dict) else None
        return media, thread_id if isinstance(thread_id, str) else None
    raise SimError(400, f"uploadType {upload_type!r} is not supported (use media or multipart)", "invalidArgument")


_LIMIT_KEYS = (
    "units_per_window",
    "window_s",
    "messages_per_day",
    "recipients_per_day",
    "recipients_per_message",
    "rate_limit_status",
    "rate_limit_reason",
)


def _configure(sim: GmailSimulator, payload: dict) -> None:
    """``POST /_sim/config``: every key optional; limits apply to ``mailbox``, or to all when absent."""
    if "index_lag_s" in payload:
        sim.set_index_lag(payload["index_lag_s"])
    if "latency_s" in payload or "read_latency_s" in payload:
        sim.set_latency(payload.get("latency_s", sim.latency[0]), payload.get("read_latency_s"))
    if "history_lag_s" in payload:
        sim.set_history_lag(payload["history_lag_s"])
    if "history_max_records" in payload or "history_max_age_s" in payload:
        sim.set_history_retention(payload.get("history_max_records"), payload.get("history_max_age_s"))
    if "rewrite_message_ids" in payload:
        if not isinstance(payload["rewrite_message_ids"], bool):
            raise ValueError("rewrite_message_ids must be true or false")
        sim.set_rewrite_message_ids(payload["rewrite_message_ids"])
    mailboxes = payload.get("mailboxes", [])
    if not isinstance(mailboxes, list):
        raise ValueError("mailboxes must be a list of addresses or {address, tokens} objects")
    for entry in mailboxes:
        if isinstance(entry, dict):
            sim.add_mailbox(str(entry["address"]), _str_list(entry.get("tokens", [])))
        else:
            sim.add_mailbox(entry)
    limits = {key: payload[key] for key in _LIMIT_KEYS if key in payload}
    if limits or "limits" in payload:
        mailbox = payload.get("mailbox")
        sim.set_limits(None if mailbox is None else str(mailbox), payload.get("limits"), **limits)


def _control(sim: GmailSimulator, method: str, path: str, body: bytes, params: dict[str, list[str]]) -> tuple[int, Any]:
    """``/_sim/*``: the same controls as the Python API, for an out-of-process simulator."""
    try:
        payload = json.loads(body.decode("utf-8")) if body.strip() else {}
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise SimError(400, "control body must be JSON", "invalidArgument") from None
    if not isinstance(payload, dict):
        raise SimError(400, "control body must be a JSON object", "invalidArgument")
    try:
        if method == "GET" and path == "/_sim/effects":
            return 200, {"effects": sim.effects()}
        if method == "GET" and path == "/_sim/health":
            return 200, {"ok": True}
        if method == "POST" and path == "/_sim/reset":
            sim.reset()
            return 200, {"ok": True}
        if method == "POST" and path == "/_sim/config":
            _configure(sim, payload)
            return 200, {"ok": True}
        if method == "GET" and path == "/_sim/usage":
            return 200, {"mailboxes": sim.usage(), "now": sim.now()}
        if method == "POST" and path == "/_sim/clock":
            return 200, {"now": sim.advance_clock(payload.get("advance_s", 0.0))}
        if method == "GET" and path == "/_sim/history":
            mailbox = params["mailbox"][-1] if params.get("mailbox") else None
            return 200, {"history": sim.history_records(mailbox), "historyId": str(sim.history_id(mailbox))}
        if method == "POST" and path == "/_sim/labels":
            labels = sim.modify_labels(
                str(payload["id"]), _str_list(payload.get("add", [])), _str_list(payload.get("remove", []))
            )
            return 200, {"id": payload["id"], "labelIds": labels}
        if method == "POST" and path == "/_sim/delete":
            sim.delete_message(str(payload["id"]))
            return 200, {"ok": True}
        if method == "POST" and path == "/_sim/inject-errors":
            sim.inject_errors(int(payload["status"]), int(payload.get("count", 1)), payload.get("reason"))
            return 200, {"ok": True}
        if method == "POST" and path == "/_sim/messages":
            raw = _b64url_decode(payload["raw"])
            labels = payload.get("labelIds", ["SENT"])
            if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
                raise ValueError("labelIds must be a list of strings")
            return 200, {"id": sim.insert_message(raw, labels, user=str(payload.get("user", "me")))}
    except (KeyError, TypeError, ValueError) as exc:
        raise SimError(400, f"bad control request: {exc}", "invalidArgument") from None
    raise SimError(404, f"Unknown control endpoint: {method} {path}", "notFound")


def _str_list(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise ValueError("labels must be a list of strings")
    return value


def main(argv: list[str] | None = None) -> int:
    """CLI: serve until SIGTERM/SIGINT (or --max-lifetime-s, so an orphaned dev server can't linger)."""
    parser = argparse.ArgumentParser(prog="python -m devstack.gmail_sim", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default=LOOPBACK)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--index-lag", type=float, default=0.0, help="search-index lag in seconds")
    parser.add_argument(
        "--history-lag",
        type=float,
        default=0.0,
        help="change-log (users.history.list) lag in seconds, independent of --index-lag",
    )
    parser.add_argument(
        "--latency", type=float, default=0.0, help="seconds to hold every Gmail API answer (messages.send, list, get)"
    )
    parser.add_argument("--effects-log", default=None, help="append one JSON line per accepted message")
    parser.add_argument("--max-lifetime-s", type=float, default=12 * 3600.0)
    parser.add_argument("--verbose", action="store_true", help="log requests to stderr")
    args = parser.parse_args(argv)
    sim = GmailSimulator(
        args.host,
        args.port,
        args.index_lag,
        args.effects_log,
        verbose=args.verbose,
        latency_s=args.latency,
        history_lag_s=args.history_lag,
    )
    return serve_until_signalled(sim, args.max_lifetime_s)


if __name__ == "__main__":
    sys.exit(main())
