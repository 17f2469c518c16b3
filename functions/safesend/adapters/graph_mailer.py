"""Mailer on Microsoft Graph for one Microsoft 365 mailbox: sendMail as MIME, Sent Items as the witness.

The send is one POST /users/{id}/sendMail (Content-Type text/plain, base64 MIME) over OneShotHttp:
one attempt is one HTTP request on a fresh connection, never re-sent, within send_deadline_s (the
token included). Reads (the Sent Items search, delta pages, one message) are idempotent: a few
bounded tries within read_deadline_s. Every answer is read through OneShotHttp's body cap.

Graph answers 202 with no body and no message id. Copies are named so the service's count of copies
stays exact: the earliest copy (createdDateTime, then id) of a Message-ID that a read shows is named
`graph-first:<Message-ID>`, every later copy by its Graph id, and a 202 is `graph-first:<Message-ID>`
too (a first copy exists, as a draft handed to transport: `stored=False`, verified once Sent Items
shows it). A copy is thus named by at most two names only when an earlier
one exists, so the names known never outnumber the copies: one copy is one name, two are two.

The change log is a delta round on Sent Items: current_history_id() starts one at "now" (a
receivedDateTime filter keeps it to recent items) and returns its $deltatoken; added_since(token)
lists the items added since. Delta tokens expire without a fixed lifetime (410 SyncStateNotFound):
HistoryExpiredError, and the search settles.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit

from ..core.classify import TransportErrorKind, classify_transport
from ..core.errors import HistoryExpiredError, MailboxUnavailableError
from ..core.graph_classify import classify_graph, graph_error_code, retry_after_seconds
from ..core.model import Accepted, Bucket, Failure, HistoryPage, MailboxHit
from .one_shot_http import DEADLINE_SLACK_S, MAX_BODY_BYTES, OneShotHttp, TransportError

if TYPE_CHECKING:
    from .graph_auth import GraphTokens

GRAPH_ENDPOINT = "https://graph.microsoft.com"
FIRST_COPY_PREFIX = "graph-first:"
SENT_ITEMS = "mailFolders/SentItems/messages"
DRAFTS = "mailFolders/Drafts/messages"
DRAFT_LABEL = "DRAFT"  # a copy still in Drafts: taken by sendMail (a 202), not yet moved to Sent Items
READ_TRIES = 3
READ_BACKOFF_S: tuple[float, ...] = (1.0, 2.0)
RETRYABLE_READ_STATUSES = frozenset({429, 500, 502, 503, 504})
MAX_HITS_INSPECTED = 10
DELTA_PAGE_SIZE = 100
DEFAULT_DELTA_PAGES = 5
MAX_DELTA_PAGES = 50
IMMUTABLE_IDS = 'IdType="ImmutableId"'
CHECKPOINT_LOOKBACK_S = 60.0  # a checkpoint's round starts this far back: a few items, one page
MESSAGE_ID_CACHE_SIZE = 2048
_TOKEN = re.compile(r"[A-Za-z0-9_.~%=-]{1,2048}")
_MESSAGE_ID = re.compile(r"^Message-ID:[ \t]*(<[^>\r\n]{1,998}>)", re.IGNORECASE | re.MULTILINE)


def first_copy_id(message_id: str) -> str:
    """The name of the earliest copy of `message_id` (see the module docstring)."""
    return FIRST_COPY_PREFIX + message_id


def _message_id_of(raw: bytes) -> str | None:
    head = raw.split(b"\r\n\r\n", 1)[0].split(b"\n\n", 1)[0].decode("ascii", "replace")
    match = _MESSAGE_ID.search(head)
    return match.group(1) if match else None


class GraphMailer:
    """Graph for one mailbox (`user`: its id or user principal name)."""

    def __init__(
        self,
        user: str,
        tokens: GraphTokens | None,
        api_endpoint: str = GRAPH_ENDPOINT,
        send_timeout_s: float = 20.0,
        read_timeout_s: float = 15.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ):
        self.user = user
        self._tokens = tokens
        self._base = f"{api_endpoint.rstrip('/')}/v1.0/users/{quote(user, safe='@.')}"
        self._send_timeout_s = send_timeout_s
        self._read_timeout_s = read_timeout_s
        self._sleep = sleep
        self._clock = clock
        self._message_ids: OrderedDict[str, str] = OrderedDict()  # graph id -> internetMessageId (LRU)
        self._lock = threading.Lock()

    # ---------------------------------------------------------- wall-clock bounds
    @property
    def send_deadline_s(self) -> float:
        return self._send_timeout_s + DEADLINE_SLACK_S

    @property
    def read_deadline_s(self) -> float:
        return READ_TRIES * self._read_timeout_s + sum(READ_BACKOFF_S) + DEADLINE_SLACK_S

    @property
    def read_back_deadline_s(self) -> float:
        return self._read_timeout_s + DEADLINE_SLACK_S

    def _headers(self, deadline: float) -> dict[str, str]:
        if self._tokens is None:
            return {}
        return {"authorization": f"Bearer {self._tokens.token(deadline)}"}

    # ------------------------------------------------------------------ send
    def send(self, raw: bytes) -> Accepted | Failure:
        """One POST sendMail. 202: Accepted as the first copy of its Message-ID; else classified."""
        message_id = _message_id_of(raw)
        if message_id is None:
            return Failure(Bucket.NOT_ACCEPTED, False, "no_message_id", "the MIME message has no Message-ID")
        deadline = time.monotonic() + self._send_timeout_s
        try:
            headers = self._headers(deadline)
        except MailboxUnavailableError as exc:  # before the POST: nothing was sent
            return Failure(Bucket.NOT_ACCEPTED, True, "auth_refresh", str(exc)[:300])
        headers["content-type"] = "text/plain"
        transport = OneShotHttp(timeout=self._send_timeout_s, deadline=deadline)
        try:
            response, content = transport.request(
                f"{self._base}/sendMail", "POST", body=base64.b64encode(raw), headers=headers
            )
        except TransportError as exc:
            return classify_transport(exc.kind, str(exc))
        except Exception as exc:  # noqa: BLE001 - anything unforeseen after the call began is "maybe"
            return classify_transport(TransportErrorKind.UNEXPECTED, repr(exc)[:300])
        if response.status == 202:
            # A 202 is a draft handed to transport, not a message sent: transport may still refuse it
            # (an NDR, nothing sent), so the send is verified only once Sent Items shows the copy.
            return Accepted(gmail_id=first_copy_id(message_id), stored=False)
        code, detail = _error_of(content)
        return classify_graph(response.status, code, detail, retry_after_seconds(response.get("retry-after")))

    # ----------------------------------------------------------------- reads
    def find_by_message_id(self, message_id: str) -> Sequence[MailboxHit]:
        """Copies carrying `message_id` in Sent Items and in Drafts, the earliest named graph-first:<id>.

        Why Drafts: sendMail answers 202 once the message is a draft, and transport moves it to Sent
        Items later (learn.microsoft.com/graph/outlook-things-to-know-about-send-mail), later still
        under throttling. A dropped 202 whose draft is still waiting must not read as "not sent": a
        resend would be a second email. Such a copy counts (labels SENT and DRAFT) but proves nothing
        stored yet (MailboxHit.in_transit): only Sent Items verifies a send.
        """
        quoted = message_id.replace("'", "''")
        query = {
            "$filter": f"internetMessageId eq '{quoted}'",
            "$select": "id,internetMessageId,createdDateTime,conversationId",
            "$top": str(MAX_HITS_INSPECTED),
        }
        deadline = self._deadline()
        by_id: dict[str, dict[str, Any]] = {}
        drafts: set[str] = set()
        for folder in (DRAFTS, SENT_ITEMS):  # Drafts first: a copy moving meanwhile is then seen in Sent Items
            answer = self._read(f"{self._base}/{folder}?{urlencode(query, quote_via=quote)}", deadline)
            for item in _values(answer):
                if item.get("internetMessageId") != message_id:
                    continue
                by_id[item["id"]] = item  # an immutable id stays the same when the copy moves
                if folder == DRAFTS:
                    drafts.add(item["id"])
                else:
                    drafts.discard(item["id"])
        return named_copies(list(by_id.values()), drafts)

    def stored_message_id(self, gmail_id: str) -> str | None:
        """The internetMessageId Sent Items holds for a copy (one try). For a 202's first copy: our
        Message-ID if the search shows it kept, None while Sent Items does not show it (lag or rewrite)."""
        if gmail_id.startswith(FIRST_COPY_PREFIX):
            message_id = gmail_id[len(FIRST_COPY_PREFIX) :]
            return message_id if self.find_by_message_id(message_id) else None
        answer = self._read(
            f"{self._base}/messages/{quote(gmail_id, safe='')}?$select=internetMessageId",
            time.monotonic() + self._read_timeout_s,
            tries=1,
        )
        value = answer.get("internetMessageId")
        return value if isinstance(value, str) else None

    def current_history_id(self) -> str:
        """A new delta round on Sent Items from a minute ago; its $deltatoken is the checkpoint."""
        since = (self._clock() - timedelta(seconds=CHECKPOINT_LOOKBACK_S)).strftime("%Y-%m-%dT%H:%M:%SZ")
        query = urlencode(
            # createdDateTime: delta names the earliest copy as the search does (named_copies), not by id
            {"$filter": f"receivedDateTime ge {since}", "$select": "id,internetMessageId,createdDateTime"},
            quote_via=quote,
        )
        page = self._delta(f"{self._base}/{SENT_ITEMS}/delta?{query}", MAX_DELTA_PAGES)
        if not page.complete:
            raise MailboxUnavailableError("graph delta: the checkpoint round did not end")
        return page.history_id

    def added_since(self, start_history_id: str, max_pages: int = DEFAULT_DELTA_PAGES) -> HistoryPage:
        """Sent Items added after the checkpoint's round (delta pages, at most `max_pages`)."""
        if not _TOKEN.fullmatch(start_history_id):
            raise ValueError("start_history_id must be a Graph $deltatoken")
        if isinstance(max_pages, bool) or not isinstance(max_pages, int) or not 1 <= max_pages <= MAX_DELTA_PAGES:
            raise ValueError(f"max_pages must be an int within [1, {MAX_DELTA_PAGES}]")
        url = f"{self._base}/{SENT_ITEMS}/delta?{urlencode({'$deltatoken': start_history_id}, quote_via=quote)}"
        return self._delta(url, max_pages, start_history_id)

    def message_ids_of(self, gmail_ids: Sequence[str]) -> dict[str, str]:
        """internetMessageId per copy name: decoded from a first-copy name, cached from delta, else read."""
        result: dict[str, str] = {}
        for gmail_id in dict.fromkeys(gmail_ids):
            if gmail_id.startswith(FIRST_COPY_PREFIX):
                result[gmail_id] = gmail_id[len(FIRST_COPY_PREFIX) :]
                continue
            with self._lock:
                cached = self._message_ids.get(gmail_id)
            if cached is None:
                try:
                    cached = self.stored_message_id(gmail_id)
                except _NotFoundError:
                    cached = None
                if cached is not None:
                    self._remember(gmail_id, cached)
            if cached is not None:
                result[gmail_id] = cached
        return result

    # --------------------------------------------------------------- plumbing
    def _deadline(self) -> float:
        return time.monotonic() + READ_TRIES * self._read_timeout_s + sum(READ_BACKOFF_S)

    def _remember(self, graph_id: str, message_id: str) -> None:
        with self._lock:
            self._message_ids[graph_id] = message_id
            self._message_ids.move_to_end(graph_id)
            while len(self._message_ids) > MESSAGE_ID_CACHE_SIZE:
                self._message_ids.popitem(last=False)

    def _delta(self, url: str, max_pages: int, start: str | None = None) -> HistoryPage:
        deadline = self._deadline()
        items: list[dict[str, Any]] = []
        for pages in range(1, max_pages + 1):
            try:
                answer = self._read(url, deadline, prefer=f"odata.maxpagesize={DELTA_PAGE_SIZE}")
            except _GoneError as exc:
                raise HistoryExpiredError("graph delta token expired") from exc
            fresh = [i for i in _values(answer) if "@removed" not in i]
            for item in fresh:
                if isinstance(item.get("internetMessageId"), str):
                    self._remember(item["id"], item["internetMessageId"])
            items.extend(fresh)
            delta_link, next_link = answer.get("@odata.deltaLink"), answer.get("@odata.nextLink")
            if isinstance(delta_link, str):
                token = self._token_of(delta_link, "$deltatoken")
                return HistoryPage(tuple(named_copies(items)), token, complete=True, pages=pages)
            if not isinstance(next_link, str):
                raise MailboxUnavailableError("graph delta answer has neither nextLink nor deltaLink")
            url = (
                f"{self._base}/{SENT_ITEMS}/delta?{urlencode({'$skiptoken': self._token_of(next_link, '$skiptoken')})}"
            )
        return HistoryPage(tuple(named_copies(items)), start or "", complete=False, pages=max_pages)

    def _token_of(self, link: str, name: str) -> str:
        """The state token of a Graph link; the link's host is not trusted (the token alone is kept)."""
        values = parse_qs(urlsplit(link).query).get(name) or []
        if len(values) != 1 or not _TOKEN.fullmatch(values[0]):
            raise MailboxUnavailableError(f"graph delta link has no valid {name}")
        return values[0]

    def _read(self, url: str, deadline: float, tries: int = READ_TRIES, prefer: str | None = None) -> dict[str, Any]:
        last = "no try"
        for attempt in range(tries):
            if attempt:
                pause = READ_BACKOFF_S[attempt - 1]
                if time.monotonic() + pause >= deadline:
                    break
                self._sleep(pause)
            try:
                headers = self._headers(min(time.monotonic() + self._read_timeout_s, deadline))
                # Immutable ids: a copy's default id can change after sending (msgraph-sdk-dotnet#2947),
                # which would make one copy two names (a false duplicate).
                headers["prefer"] = IMMUTABLE_IDS + (f", {prefer}" if prefer else "")
                transport = OneShotHttp(
                    timeout=self._read_timeout_s,
                    deadline=min(time.monotonic() + self._read_timeout_s, deadline),
                    max_body_bytes=MAX_BODY_BYTES,
                )
                response, content = transport.request(url, "GET", headers=headers)
            except TransportError as exc:
                last = f"transport {exc.kind.value}"
                continue
            except MailboxUnavailableError as exc:
                last = str(exc)[:200]
                break
            if response.status == 200:
                try:
                    answer = json.loads(content)
                except (ValueError, RecursionError):  # RecursionError: a deeply nested answer
                    last = "answer is not JSON"
                    continue
                if isinstance(answer, dict):
                    return answer
                last = "answer is not a JSON object"
                continue
            code, _detail = _error_of(content)
            last = f"HTTP {response.status}" + (f" {code}" if code else "")
            if response.status == 410 or code in ("SyncStateNotFound", "syncStateNotFound", "SyncStateInvalid"):
                raise _GoneError(last)
            if response.status == 404:
                raise _NotFoundError(last)
            if response.status not in RETRYABLE_READ_STATUSES:
                break
        raise MailboxUnavailableError(f"graph read failed: {last}")


class _GoneError(MailboxUnavailableError):
    """410: the delta sync state is gone."""


class _NotFoundError(MailboxUnavailableError):
    """404: the item is not there (deleted, or never was)."""


def _values(answer: dict[str, Any]) -> list[dict[str, Any]]:
    values = answer.get("value")
    if not isinstance(values, list) or not all(isinstance(v, dict) and isinstance(v.get("id"), str) for v in values):
        raise MailboxUnavailableError("graph answer has no valid value list")
    return values


def named_copies(items: list[dict[str, Any]], drafts: set[str] | frozenset[str] = frozenset()) -> list[MailboxHit]:
    """Hits in Sent Items (label SENT; also DRAFT for the ids in `drafts`), the earliest of each
    Message-ID named graph-first:<id>."""
    ordered = sorted(items, key=lambda i: (str(i.get("createdDateTime") or ""), i["id"]))
    seen: set[str] = set()
    hits: list[MailboxHit] = []
    for item in ordered:
        message_id = item.get("internetMessageId")
        name = item["id"]
        if isinstance(message_id, str) and message_id not in seen:
            seen.add(message_id)
            name = first_copy_id(message_id)
        conversation = item.get("conversationId")
        labels = ("SENT", DRAFT_LABEL) if item["id"] in drafts else ("SENT",)
        hits.append(MailboxHit(name, conversation if isinstance(conversation, str) else None, labels))
    return hits


def _error_of(content: bytes) -> tuple[str | None, str]:
    """Graph's error code (if plausible) and a short message: never the whole body."""
    try:
        error = json.loads(content).get("error") or {}
    except (ValueError, AttributeError, RecursionError):  # a hostile body never loses the status
        return None, ""
    if not isinstance(error, dict):
        return None, ""
    return graph_error_code(error.get("code")), str(error.get("message") or "")[:300]
