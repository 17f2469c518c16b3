"""Mailer on the Gmail API through google-api-python-client, with a transport that never re-sends.

The send is executed with num_retries=0 over OneShotHttp: one attempt is one
HTTP request. Reads (list/get/getProfile/history) are idempotent, so they get a few bounded
retries; the read-back right after a send gets one try.

Every call has a wall-clock bound the service can rely on (send_deadline_s, read_deadline_s,
read_back_deadline_s): one OneShotHttp deadline covers the credential refresh and the send, and
token refreshes get one try (google-auth's own retries sleep outside any socket timeout).

The change log: current_history_id() (users.getProfile, 1 unit) before an attempt, then
added_since(checkpoint) (users.history.list labelId=SENT historyTypes=messageAdded, 2 units a page)
lists the SENT messages added since, and message_ids_of(ids) (messages.get format=metadata, 5 units
each, run a few at a time, cached) tells which one carries our Message-ID. Seconds instead of the
search index's minutes, when Gmail's history keeps up.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any, NamedTuple

from google.auth import exceptions as auth_exceptions
from google.auth.credentials import Credentials
from google.auth.exceptions import RefreshError
from google.auth.transport import DEFAULT_RETRYABLE_STATUS_CODES
from google_auth_httplib2 import AuthorizedHttp
from google_auth_httplib2 import Request as AuthRequest
from googleapiclient.discovery import build
from googleapiclient.errors import HttpError

from ..core.classify import TransportErrorKind, classify_http, classify_transport, retry_after_seconds
from ..core.errors import HistoryExpiredError, MailboxUnavailableError
from ..core.keys import bare_message_id
from ..core.mime import encode_raw
from ..core.model import Accepted, Bucket, Failure, HistoryPage, MailboxHit
from .one_shot_http import DEADLINE_SLACK_S, OneShotHttp, TransportError

if TYPE_CHECKING:
    from ..config import Settings

GMAIL_SCOPES = (
    "https://www.googleapis.com/auth/gmail.send",
    "https://www.googleapis.com/auth/gmail.readonly",  # q= search is refused with gmail.metadata
)
READ_TRIES = 3
# Before tries 2..n: 1 s, 2 s.
READ_BACKOFF_S: tuple[float, ...] = tuple(0.5 * 2**attempt for attempt in range(1, READ_TRIES))
RETRYABLE_READ_STATUSES = frozenset({429, 500, 502, 503, 504})
MAX_HITS_INSPECTED = 10
HISTORY_PAGE_SIZE = 500  # history.list's documented maximum maxResults: fewest pages (2 units each)
DEFAULT_HISTORY_PAGES = 5
MAX_HISTORY_PAGES = 50
HISTORY_PAGE_MIN_TIME_S = 1.0  # another page is started only with at least this much of the deadline left
MAX_MESSAGE_IDS_PER_CALL = 100
MESSAGE_ID_READERS = 8  # concurrent messages.get per message_ids_of (each on its own connection)
MESSAGE_ID_CACHE_SIZE = 2048
_HISTORY_ID = re.compile(r"[0-9]{1,20}")
_OAUTH_ERROR_CODE = re.compile(r"[a-z_]{1,40}")  # RFC 6749 error codes: safe to log, unlike the body
# What an id or an error reason of Gmail's looks like (ids are hex today): anything else in an answer
# is not recorded, so a broken or hostile body can neither bloat the job nor fake a second copy.
_GMAIL_ID = re.compile(r"[0-9A-Za-z_-]{1,128}")
_ERROR_REASON = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")


class _Resources(NamedTuple):
    """The Gmail API resources the adapter calls, built once per mailer (see GmailMailer.service)."""

    users: Any
    messages: Any
    history: Any


class GmailMailer:
    """Gmail for one mailbox (`user`, "me" or the delegated address). Service built lazily, once."""

    def __init__(
        self,
        user: str = "me",
        credentials: Credentials | None = None,
        api_endpoint: str | None = None,
        send_timeout_s: float = 20.0,
        read_timeout_s: float = 15.0,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.user = user
        self._credentials = credentials
        self._api_endpoint = api_endpoint
        self._send_timeout_s = send_timeout_s
        self._read_timeout_s = read_timeout_s
        self._sleep = sleep
        self._service: Any = None
        self._resources: _Resources | None = None
        self._service_lock = threading.Lock()
        self._message_ids: OrderedDict[str, str] = OrderedDict()  # gmail id -> stored Message-ID (LRU)
        self._message_ids_lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> GmailMailer:
        """The mailbox the settings name, with their credentials: a token, a key for domain-wide
        delegation, or the runtime's own identity; none against a local simulator given no token."""
        from .gmail_auth import load_gmail_credentials  # it imports this module's scopes

        credentials = None
        if not settings.gmail_api_endpoint or settings.gmail_credentials_json or settings.gmail_credentials_file:
            credentials = load_gmail_credentials(
                settings.gmail_credentials_json, settings.gmail_credentials_file, settings.gmail_delegated_user
            )
        return cls(
            user=settings.gmail_user,
            credentials=credentials,
            api_endpoint=settings.gmail_api_endpoint,
            send_timeout_s=settings.send_timeout_s,
            read_timeout_s=settings.read_timeout_s,
        )

    # ---------------------------------------------------------- wall-clock bounds
    @property
    def send_deadline_s(self) -> float:
        """Worst-case wall-clock of one send(): refresh, connect, write and read share one deadline."""
        return self._send_timeout_s + DEADLINE_SLACK_S

    @property
    def read_deadline_s(self) -> float:
        """Worst-case wall-clock of one find_by_message_id(), current_history_id(), added_since() or
        message_ids_of(): all its requests share READ_TRIES tries' worth of read timeouts plus the
        backoff sleeps between them."""
        return self._search_budget_s + DEADLINE_SLACK_S

    @property
    def _search_budget_s(self) -> float:
        return READ_TRIES * self._read_timeout_s + sum(READ_BACKOFF_S)

    @property
    def read_back_deadline_s(self) -> float:
        """Worst-case wall-clock of one stored_message_id(): a single try."""
        return self._read_timeout_s + DEADLINE_SLACK_S

    @property
    def service(self) -> Any:
        """Builds requests only: every execute() is given its own deadline-bound transport."""
        with self._service_lock:  # message_ids_of reads from several threads
            if self._service is None:
                options = {"api_endpoint": self._api_endpoint} if self._api_endpoint else None
                service = build(
                    "gmail",
                    "v1",
                    http=self._http(OneShotHttp(timeout=self._read_timeout_s)),
                    client_options=options,
                    static_discovery=True,
                    cache_discovery=False,
                )
                # Each users()/messages()/history() call builds a new Resource and all its methods
                # from the discovery document again (2.3 ms CPU per send on the 2-core test machine,
                # 0.08 ms reused): built once here. A Resource only makes HttpRequests; it holds no
                # per-request state, so threads share it as they share the service.
                users = service.users()
                self._resources = _Resources(users, users.messages(), users.history())
                self._service = service
            return self._service

    @property
    def _api(self) -> _Resources:
        """users(), users().messages() and users().history(), built once with the service."""
        _ = self.service
        assert self._resources is not None  # noqa: S101 - set with the service, under its lock
        return self._resources

    def warm(self) -> None:
        """Build the discovery client now, from the bundled static document: the start-up's
        warm-up (safesend/warmup.py) does it so that the first send does not."""
        _ = self.service

    def _http(self, transport: OneShotHttp) -> Any:
        if self._credentials is None:
            return transport
        # AuthorizedHttp re-sends only after a 401, which Gmail answers before accepting anything.
        authorized = AuthorizedHttp(self._credentials, http=transport)
        # google_auth_httplib2 keeps the transport it refreshes tokens with in `_request` (0.4.x;
        # pinned by test_a_refresh_after_a_401_is_inside_the_same_deadline).
        authorized._request = _OneTryRefreshRequest(transport)  # noqa: SLF001 - see above
        return authorized

    # ------------------------------------------------------------------ send
    def send(self, raw: bytes) -> Accepted | Failure:
        transport = OneShotHttp(timeout=self._send_timeout_s, deadline=time.monotonic() + self._send_timeout_s)
        refresh_failure = self._refresh_credentials_if_needed(transport)
        if refresh_failure is not None:
            return refresh_failure
        request = self._api.messages.send(userId=self.user, body={"raw": encode_raw(raw)})
        try:
            response = request.execute(http=self._http(transport), num_retries=0)
        except HttpError as exc:
            return _classify_http_error(exc)
        except TransportError as exc:
            return classify_transport(exc.kind, str(exc))
        except RefreshError as exc:
            # Raised only before the send or after a 401 answer: either way nothing was accepted.
            return Failure(Bucket.NOT_ACCEPTED, True, "auth_refresh", repr(exc)[:300])
        except Exception as exc:  # noqa: BLE001 - anything unforeseen after the call began is "maybe"
            return classify_transport(TransportErrorKind.UNEXPECTED, repr(exc))
        return _send_answer(response)

    def _refresh_credentials_if_needed(self, transport: OneShotHttp) -> Failure | None:
        """Refresh before the send, so an auth failure is known to have sent nothing (Bucket 1).

        On the send's own transport: the refresh spends the same deadline.
        """
        creds = self._credentials
        if creds is None or creds.valid:
            return None
        try:
            creds.refresh(_OneTryRefreshRequest(transport))
        except Exception as exc:  # noqa: BLE001 - the send was never attempted
            return Failure(Bucket.NOT_ACCEPTED, True, "auth_refresh", repr(exc)[:300])
        return None

    # ----------------------------------------------------------------- reads
    def find_by_message_id(self, message_id: str) -> Sequence[MailboxHit]:
        """Raises MailboxUnavailableError if any read fails or the search outlives read_deadline_s.

        Anyone can mail the mailbox messages carrying our (predictable) Message-ID, and Gmail lists the
        newest first: when they fill the first page, our SENT copies are listed again on their own
        (labelIds=SENT), so no number of planted messages hides one. The planted ones stay evidence."""
        deadline = time.monotonic() + self._search_budget_s
        items, more = self._list_by_message_id(message_id, deadline)
        if more:
            listed = {item["id"] for item in items}
            sent, _ = self._list_by_message_id(message_id, deadline, ["SENT"])
            items += [item for item in sent if item["id"] not in listed]
        hits = []
        for item in items:

            def minimal(item: Any = item) -> Any:
                return self._api.messages.get(userId=self.user, id=item["id"], format="minimal")

            meta = self._read(minimal, deadline)
            labels = meta.get("labelIds") if isinstance(meta, dict) else None
            if not isinstance(labels, list | None):
                raise MailboxUnavailableError("gmail message answer is malformed")
            thread_id = item.get("threadId")
            hits.append(
                MailboxHit(
                    gmail_id=item["id"],
                    thread_id=thread_id if isinstance(thread_id, str) else None,
                    label_ids=tuple(label for label in labels or () if isinstance(label, str)),
                )
            )
        return hits

    def _list_by_message_id(
        self, message_id: str, deadline: float, label_ids: list[str] | None = None
    ) -> tuple[list[dict[str, Any]], bool]:
        """One page (MAX_HITS_INSPECTED) of messages.list for the Message-ID, spam and trash included,
        and whether Gmail has more; a malformed answer is MailboxUnavailableError (skipping an entry
        could hide the very copy we look for)."""
        params: dict[str, Any] = {
            "userId": self.user,
            "q": f"rfc822msgid:{bare_message_id(message_id)}",
            "includeSpamTrash": True,
            "maxResults": MAX_HITS_INSPECTED,
        }
        if label_ids:
            params["labelIds"] = label_ids
        listing = self._read(lambda: self._api.messages.list(**params), deadline)
        items = listing.get("messages") if isinstance(listing, dict) else None
        if not isinstance(listing, dict) or not isinstance(items or [], list) or not all(map(_is_listed, items or [])):
            raise MailboxUnavailableError("gmail search answer is malformed")
        return list(items or [])[:MAX_HITS_INSPECTED], bool(listing.get("nextPageToken"))

    def stored_message_id(self, gmail_id: str) -> str | None:
        """One try (it runs inside the send's lease); raises MailboxUnavailableError if it fails."""
        meta = self._read(
            lambda: self._api.messages.get(
                userId=self.user, id=gmail_id, format="metadata", metadataHeaders=["Message-ID"]
            ),
            time.monotonic() + self._read_timeout_s,
            tries=1,
        )
        return _message_id_header(meta)

    # ----------------------------------------------------------- change log
    def profile(self) -> dict[str, Any]:
        """users.getProfile (1 unit): emailAddress, messagesTotal, threadsTotal, historyId."""
        profile: dict[str, Any] = self._read(
            lambda: self._api.users.getProfile(userId=self.user), time.monotonic() + self._search_budget_s
        )
        return profile

    def current_history_id(self) -> str:
        """The mailbox's current historyId (getProfile, 1 unit a try); MailboxUnavailableError if unread."""
        return _history_id(self.profile().get("historyId"), "getProfile")

    def added_since(self, start_history_id: str, max_pages: int = DEFAULT_HISTORY_PAGES) -> HistoryPage:
        """SENT messages added after `start_history_id`, oldest first (history.list, 2 units a page).

        Pages of HISTORY_PAGE_SIZE changes, at most `max_pages`, all within read_deadline_s; a page
        is started only with HISTORY_PAGE_MIN_TIME_S left. Stopped by either bound with more to read,
        the result says complete=False. A 404 (Gmail no longer has the log from that id) raises
        HistoryExpiredError at once, any other failure MailboxUnavailableError after bounded retries.
        """
        start = str(start_history_id)
        if not _HISTORY_ID.fullmatch(start):
            raise ValueError("start_history_id must be a historyId (decimal digits)")
        if isinstance(max_pages, bool) or not isinstance(max_pages, int) or not 1 <= max_pages <= MAX_HISTORY_PAGES:
            raise ValueError(f"max_pages must be an int within [1, {MAX_HISTORY_PAGES}]")
        deadline = time.monotonic() + self._search_budget_s
        found: dict[str, MailboxHit] = {}
        newest = start
        token: str | None = None
        pages = 0

        def expired() -> Any:
            raise HistoryExpiredError(f"gmail history from {start} is no longer available (HTTP 404)")

        while True:

            def request(token: str | None = token) -> Any:
                params: dict[str, Any] = {
                    "userId": self.user,
                    "startHistoryId": start,
                    "labelId": "SENT",
                    "historyTypes": ["messageAdded"],
                    "maxResults": HISTORY_PAGE_SIZE,
                }
                if token:
                    params["pageToken"] = token
                return self._api.history.list(**params)

            response = self._read(request, deadline, not_found=expired)
            pages += 1
            if not isinstance(response, dict):
                raise MailboxUnavailableError("gmail history answer is not an object")
            for hit in _sent_added(response):
                found.setdefault(hit.gmail_id, hit)
            if response.get("historyId") is not None:
                newest = _history_id(response.get("historyId"), "history.list")
            token = response.get("nextPageToken") or None
            if token is None:
                return HistoryPage(tuple(found.values()), newest, complete=True, pages=pages)
            if not isinstance(token, str):
                raise MailboxUnavailableError("gmail history answer has a malformed nextPageToken")
            if pages >= max_pages or deadline - time.monotonic() < HISTORY_PAGE_MIN_TIME_S:
                return HistoryPage(tuple(found.values()), newest, complete=False, pages=pages)

    def message_ids_of(self, gmail_ids: Sequence[str]) -> dict[str, str]:
        """{gmail id: stored Message-ID} (messages.get format=metadata, 5 units per id not cached).

        At most MAX_MESSAGE_IDS_PER_CALL ids; up to MESSAGE_ID_READERS reads at a time, each retried
        like any read, all within read_deadline_s. A message Gmail no longer has (404), or one with
        no Message-ID header, is left out. Raises MailboxUnavailableError if any read failed (what
        was read is cached, so asking again costs only the rest).
        """
        ids = list(dict.fromkeys(gmail_ids))
        if len(ids) > MAX_MESSAGE_IDS_PER_CALL:
            raise ValueError(f"at most {MAX_MESSAGE_IDS_PER_CALL} ids per call")
        if not all(isinstance(i, str) and i for i in ids):
            raise ValueError("gmail ids must be non-empty strings")
        result: dict[str, str] = {}
        missing: list[str] = []
        with self._message_ids_lock:
            for gmail_id in ids:
                cached = self._message_ids.get(gmail_id)
                if cached is None:
                    missing.append(gmail_id)
                else:
                    self._message_ids.move_to_end(gmail_id)
                    result[gmail_id] = cached
        if not missing:
            return result
        deadline = time.monotonic() + self._search_budget_s
        self._refresh_for_reads(deadline)  # once, not once per thread
        _ = self.service  # built before the threads share it

        def fetch(gmail_id: str) -> tuple[str, str | None]:
            meta = self._read(
                lambda: self._api.messages.get(
                    userId=self.user, id=gmail_id, format="metadata", metadataHeaders=["Message-ID"]
                ),
                deadline,
                not_found=lambda: None,
            )
            return gmail_id, (_message_id_header(meta) if meta is not None else None)

        pool = ThreadPoolExecutor(
            max_workers=min(MESSAGE_ID_READERS, len(missing)), thread_name_prefix="gmail-message-ids"
        )
        try:
            futures = [pool.submit(fetch, gmail_id) for gmail_id in missing]
            # Every read ends by the deadline plus the transport's slack (one queued after it fails
            # before connecting), so this wait ends then too; its timeout is only a backstop.
            done, _pending = wait(futures, timeout=max(0.0, deadline - time.monotonic()) + 2 * DEADLINE_SLACK_S)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        failure: BaseException | None = None
        for future in futures:
            if future not in done or future.cancelled():
                failure = failure or MailboxUnavailableError("gmail read failed: deadline passed")
                continue
            exc = future.exception()
            if exc is not None:
                failure = failure or exc
                continue
            gmail_id, message_id = future.result()
            if message_id is not None:
                result[gmail_id] = message_id
                self._remember_message_id(gmail_id, message_id)
        if failure is not None:
            if isinstance(failure, MailboxUnavailableError):
                raise failure
            raise MailboxUnavailableError(f"gmail read failed: {_describe(failure)}") from failure
        return {gmail_id: result[gmail_id] for gmail_id in ids if gmail_id in result}

    def _remember_message_id(self, gmail_id: str, message_id: str) -> None:
        with self._message_ids_lock:
            self._message_ids[gmail_id] = message_id
            self._message_ids.move_to_end(gmail_id)
            while len(self._message_ids) > MESSAGE_ID_CACHE_SIZE:
                self._message_ids.popitem(last=False)

    def _refresh_for_reads(self, deadline: float) -> None:
        """Refresh an expired token once before reads fan out; a failure is MailboxUnavailableError."""
        creds = self._credentials
        if creds is None or creds.valid:
            return
        transport = OneShotHttp(
            timeout=self._read_timeout_s, deadline=min(time.monotonic() + self._read_timeout_s, deadline)
        )
        try:
            creds.refresh(_OneTryRefreshRequest(transport))
        except Exception as exc:  # reads: any failure is "unavailable"
            raise MailboxUnavailableError(f"gmail read failed: {_describe(exc)}") from exc

    def _read(
        self,
        make_request: Callable[[], Any],
        deadline: float,
        tries: int = READ_TRIES,
        not_found: Callable[[], Any] | None = None,
    ) -> Any:
        """Up to `tries` tries of an idempotent read, none past `deadline`, each within the read timeout.

        Whatever goes wrong (HTTP, transport, token refresh, the unforeseen) comes out as
        MailboxUnavailableError, the Mailer port's promise, with a message that is safe to log.
        With `not_found`, a 404 answer is not retried: its result is returned (or what it raises).
        """
        last: Exception | None = None
        for attempt in range(tries):
            if attempt:
                pause = READ_BACKOFF_S[attempt - 1]
                if time.monotonic() + pause >= deadline:
                    break
                self._sleep(pause)
            transport = OneShotHttp(
                timeout=self._read_timeout_s, deadline=min(time.monotonic() + self._read_timeout_s, deadline)
            )
            try:
                return make_request().execute(http=self._http(transport), num_retries=0)
            except Exception as exc:  # noqa: BLE001 - reads are idempotent: any failure is "unavailable"
                last = exc
                if not_found is not None and isinstance(exc, HttpError) and exc.status_code == 404:
                    return not_found()
                if not _read_retryable(exc):
                    break
        raise MailboxUnavailableError(f"gmail read failed: {_describe(last)}") from last


class _OneTryRefreshRequest(AuthRequest):  # type: ignore[misc]  # google_auth_httplib2 has no types
    """The google-auth transport for token refreshes inside one bounded call.

    google-auth retries a token request that failed with 5xx/429 after sleeping ~1 s, then ~2 s:
    sleeps no socket timeout or deadline can cut. Here any error answer, and any transport failure,
    is a RefreshError at once. A refresh happens before the send or after Gmail answered 401, so
    nothing was accepted either way: the caller's own retry (a later attempt) is the retry.
    """

    def __call__(
        self, url: str, method: str = "GET", body: Any = None, headers: Any = None, timeout: Any = None, **kwargs: Any
    ) -> Any:
        try:  # `timeout` is dropped: the transport's deadline governs (httplib2 would only warn)
            response = super().__call__(url, method=method, body=body, headers=headers, **kwargs)
        except (TransportError, auth_exceptions.TransportError) as exc:
            raise RefreshError(f"token request failed: {_describe(exc)}", retryable=True) from exc
        if response.status >= 400:
            code = _oauth_error_code(response.data)
            raise RefreshError(
                f"token endpoint answered HTTP {response.status}" + (f": {code}" if code else ""),
                {"error": code} if code else {},
                retryable=response.status in DEFAULT_RETRYABLE_STATUS_CODES,
            )
        return response


def _message_id_header(meta: Any) -> str | None:
    """The Message-ID header of a format=metadata answer, if it has one."""
    if not isinstance(meta, dict):
        return None
    for header in (meta.get("payload") or {}).get("headers") or []:
        if isinstance(header, dict) and str(header.get("name", "")).lower() == "message-id":
            value = header.get("value")
            return value if isinstance(value, str) else None
    return None


def _history_id(value: Any, where: str) -> str:
    """A historyId from an answer (a uint64 as a JSON string; a number is tolerated)."""
    text = str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
    if not _HISTORY_ID.fullmatch(text):
        raise MailboxUnavailableError(f"gmail {where} answer has no valid historyId")
    return text


def _sent_added(response: dict[str, Any]) -> list[MailboxHit]:
    """The messages of messagesAdded records that are SENT (or whose labels Gmail left out: the
    request's labelId=SENT already filtered them). Malformed records fail the read: skipping one
    could hide the very message we look for."""
    hits: list[MailboxHit] = []
    records = response.get("history") or []
    if not isinstance(records, list):
        raise MailboxUnavailableError("gmail history answer is malformed")
    for record in records:
        added = (record.get("messagesAdded") or []) if isinstance(record, dict) else None
        if not isinstance(added, list):
            raise MailboxUnavailableError("gmail history answer is malformed")
        for item in added:
            message = item.get("message") if isinstance(item, dict) else None
            if not isinstance(message, dict):
                raise MailboxUnavailableError("gmail history answer has a message without an id")
            gmail_id = message.get("id")
            if not isinstance(gmail_id, str) or not gmail_id:
                raise MailboxUnavailableError("gmail history answer has a message without an id")
            labels = message.get("labelIds")
            labels = tuple(label for label in labels if isinstance(label, str)) if isinstance(labels, list) else ()
            if labels and "SENT" not in labels:
                continue
            thread_id = message.get("threadId")
            hits.append(
                MailboxHit(
                    gmail_id=gmail_id, thread_id=thread_id if isinstance(thread_id, str) else None, label_ids=labels
                )
            )
    return hits


def _read_retryable(exc: Exception) -> bool:
    """A read failure worth another try: throttling, server errors, transport faults, transient refresh."""
    if isinstance(exc, HttpError):
        return exc.status_code in RETRYABLE_READ_STATUSES
    if isinstance(exc, (TransportError, auth_exceptions.TransportError)):
        return True
    if isinstance(exc, RefreshError):
        return bool(exc.retryable)
    return False


def _describe(exc: BaseException | None) -> str:
    """A log-safe summary: kind and status/fault/OAuth error code, never a header, body or token."""
    if isinstance(exc, HttpError):
        reason, _ = _error_reason(exc)
        return f"HTTP {exc.status_code}" + (f" {reason}" if reason else "")
    if isinstance(exc, TransportError):
        return f"transport {exc.kind.value}"
    if isinstance(exc, RefreshError):
        codes = [arg.get("error") for arg in exc.args if isinstance(arg, dict)]
        code = next((c for c in codes if isinstance(c, str) and _OAUTH_ERROR_CODE.fullmatch(c)), None)
        return "credential refresh failed" + (f": {code}" if code else "")
    return type(exc).__name__


def _oauth_error_code(data: Any) -> str | None:
    """The RFC 6749 `error` code of a token endpoint answer, if it has a plausible one."""
    try:
        code = json.loads(data).get("error")
    except (ValueError, TypeError, AttributeError, RecursionError):
        return None
    return code if isinstance(code, str) and _OAUTH_ERROR_CODE.fullmatch(code) else None


def _is_listed(item: Any) -> bool:
    """A messages.list entry with an id Gmail could have given."""
    return isinstance(item, dict) and isinstance(item.get("id"), str) and _GMAIL_ID.fullmatch(item["id"]) is not None


def _send_answer(response: Any) -> Accepted | Failure:
    """A 2xx answer to messages.send: accepted under a plausible Gmail id, else "maybe" (it may have
    landed, but an id we cannot trust must not be recorded as a copy)."""
    gmail_id = response.get("id") if isinstance(response, dict) else None
    if not isinstance(gmail_id, str) or not _GMAIL_ID.fullmatch(gmail_id):
        return classify_transport(TransportErrorKind.PROTOCOL, "2xx without a valid message id")
    thread_id = response.get("threadId")
    return Accepted(gmail_id, thread_id if isinstance(thread_id, str) and _GMAIL_ID.fullmatch(thread_id) else None)


def _classify_http_error(exc: HttpError) -> Failure:
    reason, message = _error_reason(exc)
    retry_after = retry_after_seconds(exc.resp.get("retry-after") if exc.resp is not None else None)
    return classify_http(exc.status_code or exc.resp.status, reason, message, retry_after)


def _error_reason(exc: HttpError) -> tuple[str | None, str]:
    """Google's error object's first reason (a short token, or None) and its message, from a body of
    any shape: never raises, whatever a server or a proxy on the way answered."""
    try:
        error = json.loads(exc.content.decode("utf-8")).get("error")
    except (ValueError, AttributeError, UnicodeDecodeError, RecursionError):
        return None, str(exc)[:300]
    if not isinstance(error, dict):
        return None, str(exc)[:300]
    errors = error.get("errors")
    first = errors[0] if isinstance(errors, list) and errors else None
    reason = first.get("reason") if isinstance(first, dict) else None
    message = error.get("message")
    return (
        reason if isinstance(reason, str) and _ERROR_REASON.fullmatch(reason) else None,
        message[:300] if isinstance(message, str) else "",
    )
