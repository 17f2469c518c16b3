"""Mailer on the Gmail API through google-api-python-client, with a transport that never re-sends.

The send is executed with num_retries=0 over OneShotHttp: one attempt is one
HTTP request. Reads (list/get) are idempotent, so they get a few bounded retries.
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable, Sequence

from google.auth.credentials import Credentials
from google.auth.exceptions import RefreshError
from google_auth_httplib2 import AuthorizedHttp, Request as AuthRequest
from googleapiclient.discovery import build
from googleapiclient.errors import HttpError

from ..classify import TransportFault, classify_http, classify_transport
from ..errors import MailboxUnavailableError
from ..keys import bare_message_id
from ..mime import encode_raw
from ..model import Accepted, Bucket, Failure, MailboxHit
from .one_shot_http import OneShotHttp, TransportError

GMAIL_SCOPES = (
    "https://www.googleapis.com/auth/gmail.send",
    "https://www.googleapis.com/auth/gmail.readonly",  # q= search is refused with gmail.metadata
)
READ_TRIES = 3
MAX_HITS_INSPECTED = 10


class GmailMailer:
    """Gmail for one mailbox (`user`, "me" or the delegated address). Service built lazily, once."""

    def __init__(self, user: str = "me", credentials: Credentials | None = None,
                 api_endpoint: str | None = None, send_timeout_s: float = 20.0,
                 read_timeout_s: float = 15.0, sleep: Callable[[float], None] = time.sleep):
        self.user = user
        self._credentials = credentials
        self._api_endpoint = api_endpoint
        self._send_timeout_s = send_timeout_s
        self._read_timeout_s = read_timeout_s
        self._sleep = sleep
        self._service: Any = None

    @property
    def service(self) -> Any:
        if self._service is None:
            options = {"api_endpoint": self._api_endpoint} if self._api_endpoint else None
            self._service = build("gmail", "v1", http=self._http(self._read_timeout_s),
                                  client_options=options, static_discovery=True, cache_discovery=False)
        return self._service

    def _http(self, timeout: float) -> Any:
        transport = OneShotHttp(timeout=timeout)
        if self._credentials is None:
            return transport
        # AuthorizedHttp re-sends only after a 401, which Gmail answers before accepting anything.
        return AuthorizedHttp(self._credentials, http=transport)

    # ------------------------------------------------------------------ send
    def send(self, raw: bytes) -> Accepted | Failure:
        refresh_failure = self._refresh_credentials_if_needed()
        if refresh_failure is not None:
            return refresh_failure
        request = self.service.users().messages().send(userId=self.user, body={"raw": encode_raw(raw)})
        try:
            response = request.execute(http=self._http(self._send_timeout_s), num_retries=0)
        except HttpError as exc:
            return _classify_http_error(exc)
        except TransportError as exc:
            return classify_transport(exc.fault, str(exc))
        except RefreshError as exc:
            # Raised only before the send or after a 401 answer: either way nothing was accepted.
            return Failure(Bucket.NOT_ACCEPTED, True, "auth_refresh", repr(exc)[:300])
        except Exception as exc:  # noqa: BLE001 - anything unforeseen after the call began is "maybe"
            return classify_transport(TransportFault.UNEXPECTED, repr(exc))
        if not isinstance(response, dict) or not response.get("id"):
            return classify_transport(TransportFault.PROTOCOL, "2xx without a message id")
        return Accepted(gmail_id=response["id"], thread_id=response.get("threadId"))

    def _refresh_credentials_if_needed(self) -> Failure | None:
        """Refresh before the send, so an auth failure is known to have sent nothing (Bucket 1)."""
        creds = self._credentials
        if creds is None or creds.valid:
            return None
        try:
            creds.refresh(AuthRequest(OneShotHttp(timeout=self._read_timeout_s)))
        except Exception as exc:  # noqa: BLE001 - the send was never attempted
            return Failure(Bucket.NOT_ACCEPTED, True, "auth_refresh", repr(exc)[:300])
        return None

    # ----------------------------------------------------------------- reads
    def find_by_message_id(self, message_id: str) -> Sequence[MailboxHit]:
        listing = self._read(lambda: self.service.users().messages().list(
            userId=self.user, q=f"rfc822msgid:{bare_message_id(message_id)}",
            includeSpamTrash=True, maxResults=MAX_HITS_INSPECTED))
        hits = []
        for item in (listing.get("messages") or [])[:MAX_HITS_INSPECTED]:
            meta = self._read(lambda item=item: self.service.users().messages().get(
                userId=self.user, id=item["id"], format="minimal"))
            hits.append(MailboxHit(gmail_id=item["id"], thread_id=item.get("threadId"),
                                   label_ids=tuple(meta.get("labelIds") or ())))
        return hits

    def stored_message_id(self, gmail_id: str) -> str | None:
        meta = self._read(lambda: self.service.users().messages().get(
            userId=self.user, id=gmail_id, format="metadata", metadataHeaders=["Message-ID"]))
        for header in (meta.get("payload") or {}).get("headers") or []:
            if header.get("name", "").lower() == "message-id":
                return header.get("value")
        return None

    def _read(self, make_request: Callable[[], Any]) -> dict[str, Any]:
        last: Exception | None = None
        for attempt in range(READ_TRIES):
            if attempt:
                self._sleep(0.5 * 2 ** attempt)
            try:
                return make_request().execute(num_retries=0)
            except HttpError as exc:
                last = exc
                if exc.status_code not in (429, 500, 502, 503, 504):
                    break
            except TransportError as exc:
                last = exc
        raise MailboxUnavailableError(f"gmail read failed: {last}")


def _classify_http_error(exc: HttpError) -> Failure:
    reason, message = _error_reason(exc)
    retry_after = None
    header = exc.resp.get("retry-after") if exc.resp is not None else None
    if header:
        try:
            retry_after = float(header)
        except ValueError:
            retry_after = None
    return classify_http(exc.status_code or exc.resp.status, reason, message, retry_after)


def _error_reason(exc: HttpError) -> tuple[str | None, str]:
    try:
        error = json.loads(exc.content.decode("utf-8")).get("error", {})
    except (ValueError, AttributeError, UnicodeDecodeError):
        return None, str(exc)[:300]
    errors = error.get("errors") or [{}]
    return errors[0].get("reason"), str(error.get("message", ""))[:300]
