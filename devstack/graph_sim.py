"""A local Microsoft Graph v1.0 mail subset (sendMail as MIME, Sent Items search and delta, app tokens).

Why: safesend's guarantee for a Microsoft 365 mailbox rests on the same technique as for Gmail: a fixed
Message-ID, then asking the mailbox whether a copy exists. Testing that without a tenant needs a server
that behaves like Graph where it matters (docs/graph-provider.md has the sources):
- ``POST /v1.0/users/{id}/sendMail`` with ``Content-Type: text/plain`` and base64 MIME: 202, no body
  and no message id; malformed base64 is 400 "Invalid base64 string for MIME content." The message is
  stored in Sent Items (unless ``save_to_sent_items`` is off: what Microsoft does not rule out).
- ``GET .../mailFolders/SentItems/messages?$filter=internetMessageId eq '<...>'&$select=...``: only
  copies older than the index lag are listed (Sent Items is not promised to be instant).
- A sendMail message is a draft until transport takes it (learn.microsoft.com/graph/
  outlook-things-to-know-about-send-mail): for ``transport_delay_s`` it is listed under
  ``.../mailFolders/Drafts/messages`` (same ``$filter``), then it moves to Sent Items, keeping its id.
- ``GET .../mailFolders/SentItems/messages/delta``: rounds of ``@odata.nextLink`` ($skiptoken) pages
  ending with ``@odata.deltaLink`` ($deltatoken); the sync state is server-side, and an expired or
  evicted one answers 410 Gone, code ``SyncStateNotFound`` (Outlook delta tokens have no fixed lifetime).
  The only ``$filter`` is ``receivedDateTime ge|gt <instant>``, as documented for message delta.
- Throttling: messages per minute and recipients per rolling day per mailbox (devstack.gmail_quota's
  bookkeeping, a send counted as one "send"), refused with 429 and ``Retry-After`` before anything is
  stored; injected errors (429/503/...) with ``Retry-After`` accept nothing unless told to.
- ``POST /{tenant}/oauth2/v2.0/token`` (client credentials with a ``client_assertion`` JWT, parsed and
  checked loosely: a certificate's self-signed assertion or a federated one) and the tenant's
  ``/v2.0/.well-known/openid-configuration``, so MSAL for Python can be driven against it. With
  ``require_auth`` the Graph paths answer 401 without a token it issued.
- ``/_sim/config``, ``/_sim/clock``, ``/_sim/effects``, ``/_sim/inject-errors``, ``/_sim/reset``.

Standard library only (plus its siblings: gmail_quota, gmail_sim's MIME helpers, sim_server's plumbing).
Binds 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import copy
import email.utils
import json
import re
import secrets
import sys
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

from devstack.gmail_quota import Limits, MailboxQuota
from devstack.gmail_sim import _header_value, _parse, _raw_headers
from devstack.sim_server import (
    LOOPBACK,
    MAX_CLOCK_ADVANCE_S,
    LoopbackSimulator,
    RequestBodyError,
    SimHandler,
    serve_until_signalled,
)

__all__ = ["GraphSimulator", "graph_error_body", "immutable_id", "main"]

DEFAULT_PAGE_SIZE = 10  # message delta's documented default page size
MAX_PAGE_SIZE = 1000
MAX_SEARCH_TOP = 1000
MAX_SYNC_STATES = 10_000  # server-side delta states kept; the oldest are evicted first (then 410)
DEFAULT_SYNC_STATE_TTL_S = 7 * 86400.0
MAX_INJECTED_ERRORS = 10_000
MAX_MESSAGES = 200_000
TOKEN_LIFETIME_S = 3599
FEDERATED_AUDIENCE = "api://AzureADTokenExchange"  # what Entra expects as `aud` of a federated assertion
LOGIN_AUTHORITY = "https://login.microsoftonline.com"
ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
MAX_ASSERTION_CHARS = 16_384

_USER_PATH = re.compile(r"/v1\.0/users/(?P<user>[^/]+)/(?P<rest>.+)")
_TOKEN_PATH = re.compile(r"/(?P<tenant>[^/]+)/oauth2/v2\.0/token")
_OIDC_PATH = re.compile(r"/(?P<tenant>[^/]+)/v2\.0/\.well-known/openid-configuration")
_MESSAGE_PATH = re.compile(r"messages/(?P<id>[A-Za-z0-9_=-]{1,200})")
_ID_FILTER = re.compile(r"internetMessageId eq '(?P<value>(?:[^']|'')*)'")
_DATE_FILTER = re.compile(r"receivedDateTime (?P<op>ge|gt) (?P<value>\S+)")
_B64_TEXT = re.compile(rb"[A-Za-z0-9+/\r\n]*={0,2}[\r\n]*")
_SENT_ITEMS = ("mailFolders/SentItems/messages", "mailFolders/sentitems/messages")
_DRAFTS = ("mailFolders/Drafts/messages", "mailFolders/drafts/messages")
_RECIPIENT_HEADERS = ("to", "cc", "bcc")


def graph_error_body(code: str, message: str) -> dict[str, Any]:
    """Graph's error body: {"error": {"code", "message", "innerError": {date, request-id}}}."""
    return {
        "error": {
            "code": code,
            "message": message,
            "innerError": {"date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S"), "request-id": secrets.token_hex(8)},
        }
    }


class GraphError(Exception):
    """An answer with Graph's error body (raised inside handlers)."""

    def __init__(self, status: int, code: str, message: str, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = graph_error_body(code, message)
        self.retry_after_s = retry_after_s


@dataclass
class _Item:
    id: str
    internet_message_id: str
    created_at: float  # when Graph accepted it (the simulator's clock)
    visible_at: float  # when Sent Items (search and delta) lists it
    sent_at: float  # when transport moved it from Drafts to Sent Items
    subject: str
    recipients: int


@dataclass
class _SyncState:
    user: str
    seen: frozenset[str]  # ids the client has been given in earlier rounds
    since: float | None  # the round's receivedDateTime filter (epoch s), None: none
    inclusive: bool
    issued_at: float
    pending: tuple[str, ...] = ()  # a $skiptoken's remaining ids of the current round
    select: tuple[str, ...] = ()  # the first round's $select: Graph encodes query options in the tokens


@dataclass
class _Mailbox:
    user: str
    quota: MailboxQuota
    items: list[_Item] = field(default_factory=list)


GLOBAL_SCOPE = "https://graph.microsoft.com/.default"  # the global service's; a national cloud has its own


class GraphSimulator(LoopbackSimulator):
    """In-process Graph mail subset server; controllable from Python or over ``/_sim/*`` HTTP endpoints.
    Its ``url`` is the base of both the Graph API (``/v1.0``) and the login endpoint (``/{tenant}/oauth2``)."""

    name = "graph-sim"

    def __init__(
        self,
        host: str = LOOPBACK,
        port: int = 0,
        index_lag_s: float = 0.0,
        clock: Callable[[], float] = time.time,
        verbose: bool = False,
        require_auth: bool = False,
        token_scope: str = GLOBAL_SCOPE,
    ) -> None:
        super().__init__(host, port, clock, verbose)
        self.token_scope = token_scope  # the cloud this simulator plays (a national cloud: its own host)
        self._save_to_sent_items = True
        self._transport_delay_s = 0.0
        self._rewrite_message_ids = False
        self._require_auth = require_auth
        self._sync_state_ttl_s = DEFAULT_SYNC_STATE_TTL_S
        self._expired_sync_state_status = 410
        self._limits = Limits()
        self._boxes: dict[str, _Mailbox] = {}
        self._states: OrderedDict[str, _SyncState] = OrderedDict()
        self._tokens: dict[str, float] = {}  # access token -> expiry
        self._assertions: list[dict[str, Any]] = []  # parsed assertions the token endpoint accepted
        self._effects: list[dict[str, Any]] = []
        self._errors: list[tuple[int, int | None, bool]] = []  # (status, retry_after_s, accept first)
        self.set_index_lag(index_lag_s)

    # ---------------------------------------------------------------- controls
    def configure(self, **settings: Any) -> None:
        """index_lag_s, transport_delay_s, save_to_sent_items, rewrite_message_ids, require_auth, sync_state_ttl_s,
        expired_sync_state_status (410, or 400 `syncStateNotFound` as Graph answers for some
        resources), messages_per_minute, recipients_per_day (None: no limit)."""
        unknown = sorted(
            set(settings)
            - {
                "index_lag_s",
                "transport_delay_s",
                "save_to_sent_items",
                "rewrite_message_ids",
                "require_auth",
                "sync_state_ttl_s",
                "expired_sync_state_status",
                "messages_per_minute",
                "recipients_per_day",
            }
        )
        if unknown:
            raise ValueError(f"unknown setting(s): {', '.join(unknown)}")
        with self._lock:
            if "index_lag_s" in settings:
                self.set_index_lag(settings["index_lag_s"])
            if "transport_delay_s" in settings:
                delay = float(settings["transport_delay_s"])
                if not 0.0 <= delay <= MAX_CLOCK_ADVANCE_S:
                    raise ValueError("transport_delay_s must be within [0, MAX_CLOCK_ADVANCE_S]")
                self._transport_delay_s = delay
            for name in ("save_to_sent_items", "rewrite_message_ids", "require_auth"):
                if name in settings:
                    if not isinstance(settings[name], bool):
                        raise ValueError(f"{name} must be true or false")
                    setattr(self, f"_{name}", settings[name])
            if "sync_state_ttl_s" in settings:
                ttl = float(settings["sync_state_ttl_s"])
                if not 0.0 < ttl <= MAX_CLOCK_ADVANCE_S:
                    raise ValueError("sync_state_ttl_s must be positive")
                self._sync_state_ttl_s = ttl
            if "expired_sync_state_status" in settings:
                if settings["expired_sync_state_status"] not in (400, 410):
                    raise ValueError("expired_sync_state_status must be 400 or 410")
                self._expired_sync_state_status = int(settings["expired_sync_state_status"])
            changes: dict[str, Any] = {}
            if "messages_per_minute" in settings:
                # One "send" costs METHOD_UNITS["send"] units in gmail_quota: a window of that many.
                per_minute = settings["messages_per_minute"]
                changes["units_per_window"] = None if per_minute is None else int(per_minute) * 100
                changes["window_s"] = 60.0
            if "recipients_per_day" in settings:
                changes["recipients_per_day"] = settings["recipients_per_day"]
            if changes:
                self._limits = self._limits.changed(changes)
                for box in self._boxes.values():
                    box.quota.limits = self._limits

    def inject_errors(
        self, status: int, count: int = 1, retry_after_s: int | None = None, accept: bool = False
    ) -> None:
        """The next ``count`` sendMail calls answer ``status`` (with Retry-After); ``accept``: the message is
        stored first (a 5xx after acceptance), else nothing is."""
        if not 400 <= status <= 599 or not 1 <= count <= MAX_INJECTED_ERRORS:
            raise ValueError("status must be 4xx/5xx and count within [1, 10000]")
        with self._lock:
            self._errors.extend([(status, retry_after_s, accept)] * count)

    def effects(self) -> list[dict[str, Any]]:
        """Every message Graph accepted (saved to Sent Items or not), in acceptance order."""
        with self._lock:
            return copy.deepcopy(self._effects)

    def assertions(self) -> list[dict[str, Any]]:
        """The client assertions the token endpoint accepted (header and claims), oldest first."""
        with self._lock:
            return copy.deepcopy(self._assertions)

    def reset(self) -> None:
        with self._lock:
            self._boxes.clear()
            self._states.clear()
            self._effects.clear()
            self._errors.clear()
            self._tokens.clear()
            self._assertions.clear()

    def insert_message(self, user: str, raw: bytes) -> str:
        """Put a message in ``user``'s Sent Items as if sent (a copy made by another client)."""
        return self._accept(self._box(user), raw, source="insert", transport_delay_s=0.0)

    def delete_message(self, user: str, message_id: str) -> None:
        with self._lock:
            box = self._box(user)
            box.items = [i for i in box.items if i.id != message_id]

    # ---------------------------------------------------------------- the API
    def _box(self, user: str) -> _Mailbox:
        key = urllib.parse.unquote(user).lower()
        with self._lock:
            if key not in self._boxes:
                self._boxes[key] = _Mailbox(key, MailboxQuota(self._limits))
            return self._boxes[key]

    def check_token(self, authorization: str | None) -> None:
        if not self._require_auth:
            return
        token = authorization[7:].strip() if authorization and authorization[:7].lower() == "bearer " else ""
        with self._lock:
            expiry = self._tokens.get(token)
            if expiry is None or expiry <= self.now():
                raise GraphError(401, "InvalidAuthenticationToken", "Access token is empty or invalid.")

    def send_mail(self, user: str, content_type: str, body: bytes) -> None:
        """sendMail with a MIME body: 202 (nothing returned) or an error that accepted nothing."""
        if content_type.split(";", maxsplit=1)[0].strip().lower() != "text/plain":
            raise GraphError(400, "ErrorInvalidRequest", "Content-Type must be text/plain for MIME content.")
        box = self._box(user)
        raw = _mime_from_base64(body)
        msg = _parse(raw)
        headers = _raw_headers(msg)
        recipients = sum(len(email.utils.getaddresses([v])) for k, v in headers if k.lower() in _RECIPIENT_HEADERS)
        if recipients == 0:
            raise GraphError(400, "ErrorInvalidRecipients", "At least one recipient is not valid.")
        with self._lock:
            injected = self._errors.pop(0) if self._errors else None
            if injected is not None and not injected[2]:
                raise _injected(injected)
            refusal = box.quota.charge("send", self.now()) or box.quota.admit_send(recipients, self.now())
            if refusal is not None:
                # Both windows: the earliest moment a unit frees (rate) or a day rolls (recipients).
                wait = 60 if refusal.kind == "rate" else 3600
                raise GraphError(429, "ApplicationThrottled", "Application is over its MailboxConcurrency limit.", wait)
            box.quota.record_send(recipients, self.now())
            self._accept(box, raw, source="sendMail", recipients=recipients, transport_delay_s=self._transport_delay_s)
            if injected is not None:
                raise _injected(injected)

    def _accept(
        self, box: _Mailbox, raw: bytes, source: str, recipients: int = 1, transport_delay_s: float = 0.0
    ) -> str:
        headers = _raw_headers(_parse(raw))
        message_id = _header_value(headers, "Message-ID")
        with self._lock:
            if self._rewrite_message_ids or not message_id:
                message_id = f"<{secrets.token_hex(12)}@graph-sim.outlook.localhost>"
            now = self.now()
            item = _Item(
                "AAMk" + secrets.token_urlsafe(24),
                message_id,
                now,
                now + transport_delay_s + self._index_lag_s,
                now + transport_delay_s,
                _header_value(headers, "Subject") or "",
                recipients,
            )
            saved = self._save_to_sent_items
            if saved:
                box.items.append(item)
                del box.items[:-MAX_MESSAGES]
            self._effects.append(
                {"id": item.id, "user": box.user, "internetMessageId": message_id, "at": now, "saved": saved}
            )
            return item.id

    def _visible(self, box: _Mailbox) -> list[_Item]:
        now = self.now()
        return [i for i in box.items if i.visible_at <= now]

    def _drafts(self, box: _Mailbox) -> list[_Item]:
        now = self.now()
        return [i for i in box.items if i.sent_at > now]

    def list_sent(
        self, user: str, params: dict[str, list[str]], immutable: bool = False, drafts: bool = False
    ) -> dict[str, Any]:
        """Sent Items (or Drafts: messages transport has not taken yet), filtered by internetMessageId
        (the only $filter here), $select honoured."""
        box = self._box(user)
        expr = _one(params, "$filter")
        match = _ID_FILTER.fullmatch(expr.strip()) if expr else None
        if expr and match is None:
            raise GraphError(400, "ErrorInvalidUrlQueryFilter", "The query filter contains one or more invalid nodes.")
        top = _int(params, "$top", DEFAULT_PAGE_SIZE, 1, MAX_SEARCH_TOP)
        with self._lock:
            items = self._drafts(box) if drafts else self._visible(box)
        if match is not None:
            wanted = match["value"].replace("''", "'")
            items = [i for i in items if i.internet_message_id == wanted]
        return {"value": [_resource(i, _select(params), immutable) for i in items[:top]]}

    def get_message(
        self, user: str, message_id: str, params: dict[str, list[str]], immutable: bool = False
    ) -> dict[str, Any]:
        box = self._box(user)
        with self._lock:
            found = next((i for i in box.items if message_id in (i.id, immutable_id(i.id))), None)
        if found is None:
            raise GraphError(404, "ErrorItemNotFound", "The specified object was not found in the store.")
        return _resource(found, _select(params), immutable)

    def delta(self, user: str, params: dict[str, list[str]], prefer: str | None, base: str) -> dict[str, Any]:
        immutable = _wants_immutable_ids(prefer)
        """One page of a delta round: a new round, a $skiptoken page, or a $deltatoken round."""
        box = self._box(user)
        size = _page_size(prefer)
        now = self.now()
        with self._lock:
            token = _one(params, "$skiptoken") or _one(params, "$deltatoken")
            if token:
                state = self._states.get(token)
                if state is None or state.user != box.user or state.issued_at + self._sync_state_ttl_s <= now:
                    self._states.pop(token, None)
                    status = self._expired_sync_state_status
                    raise GraphError(
                        status,
                        "SyncStateNotFound" if status == 410 else "syncStateNotFound",
                        "The sync state generation is not found. Sync again from scratch.",
                    )
                if state.pending and _one(params, "$skiptoken"):
                    pending = state.pending
                else:
                    pending = self._round(box, state.seen, state.since, state.inclusive)
                seen, since, inclusive, select = state.seen, state.since, state.inclusive, state.select
            else:
                since, inclusive = _date_filter(_one(params, "$filter"))
                seen, select = frozenset(), tuple(_select(params))
                pending = self._round(box, seen, since, inclusive)
            page, rest = pending[:size], pending[size:]
            by_id = {i.id: i for i in box.items}
            values = [_resource(by_id[i], list(select) or None, immutable) for i in page if i in by_id]
            new_seen = seen | frozenset(page)
            new_state = _SyncState(box.user, new_seen, since, inclusive, now, rest, select)
            new_token = secrets.token_urlsafe(18)
            self._states[new_token] = new_state
            while len(self._states) > MAX_SYNC_STATES:
                self._states.popitem(last=False)
        link = f"{base}?$skiptoken={new_token}" if rest else f"{base}?$deltatoken={new_token}"
        key = "@odata.nextLink" if rest else "@odata.deltaLink"
        return {"value": values, key: link}

    def _round(self, box: _Mailbox, seen: frozenset[str], since: float | None, inclusive: bool) -> tuple[str, ...]:
        items = [i for i in self._visible(box) if i.id not in seen]
        if since is not None:
            items = [i for i in items if i.created_at > since or (inclusive and i.created_at == since)]
        return tuple(i.id for i in items)

    def issue_token(self, tenant: str, form: dict[str, list[str]]) -> dict[str, Any]:
        """Client credentials with a client assertion: parsed, checked loosely, never verified."""
        if _one(form, "grant_type") != "client_credentials":
            raise _oauth_error("unsupported_grant_type", "AADSTS70003: grant_type must be client_credentials")
        client_id = _one(form, "client_id")
        scope = _one(form, "scope") or ""
        if not client_id or self.token_scope not in scope.split():
            raise _oauth_error("invalid_request", "AADSTS90014: client_id and the Graph .default scope are required")
        if _one(form, "client_assertion_type") != ASSERTION_TYPE or not _one(form, "client_assertion"):
            raise _oauth_error("invalid_client", "AADSTS7000218: a client_assertion is required")
        header, claims = _parse_jwt(_one(form, "client_assertion") or "")
        now = self.now()
        exp = claims.get("exp")
        if not isinstance(exp, int | float) or exp <= now:
            raise _oauth_error("invalid_client", "AADSTS700024: Client assertion is not within its valid time range.")
        aud = claims.get("aud")
        audiences: list[Any] = aud if isinstance(aud, list) else [aud]
        if claims.get("iss") == client_id:  # a certificate's assertion: its thumbprint, the token endpoint
            if not (header.get("x5t") or header.get("x5t#S256")):
                raise _oauth_error("invalid_client", "AADSTS700027: the assertion names no certificate thumbprint.")
            if not any(isinstance(a, str) and f"/{tenant}/oauth2/v2.0/token" in a for a in audiences):
                raise _oauth_error("invalid_client", "AADSTS700016: the assertion's audience is not this tenant.")
        elif FEDERATED_AUDIENCE not in audiences or not claims.get("sub"):
            raise _oauth_error("invalid_client", "AADSTS700211: No matching federated identity record found.")
        token = secrets.token_urlsafe(32)
        with self._lock:
            self._tokens[token] = now + TOKEN_LIFETIME_S
            self._assertions.append({"header": header, "claims": claims, "tenant": tenant})
        return {
            "token_type": "Bearer",
            "expires_in": TOKEN_LIFETIME_S,
            "ext_expires_in": TOKEN_LIFETIME_S,
            "access_token": token,
        }

    def openid_configuration(self, tenant: str) -> dict[str, Any]:
        """Entra's own https URLs, as the real tenant answers them (MSAL accepts nothing else): a client
        points its HTTP at this simulator for that host (safesend.adapters.graph_auth.BoundedLoginHttp)."""
        base = f"{LOGIN_AUTHORITY}/{tenant}"
        return {
            "token_endpoint": f"{base}/oauth2/v2.0/token",
            "authorization_endpoint": f"{base}/oauth2/v2.0/authorize",
            "issuer": f"{base}/v2.0",
            "token_endpoint_auth_methods_supported": ["client_secret_post", "private_key_jwt"],
        }


def _injected(entry: tuple[int, int | None, bool]) -> GraphError:
    status, retry_after, _accept = entry
    code = {429: "ApplicationThrottled", 503: "ServiceUnavailable", 504: "GatewayTimeout"}.get(
        status, "ErrorInternalServerError"
    )
    return GraphError(status, code, f"injected {status}", retry_after)


def _oauth_error(code: str, description: str) -> GraphError:
    err = GraphError(400 if code != "invalid_client" else 401, code, description)
    err.body = {
        "error": code,
        "error_description": description,
        "error_codes": [int(re.findall(r"\d+", description)[0])],
    }
    return err


def _mime_from_base64(body: bytes) -> bytes:
    text = body.strip()
    if not text or not _B64_TEXT.fullmatch(text):
        raise GraphError(400, "ErrorMimeContentInvalidBase64String", "Invalid base64 string for MIME content.")
    try:
        raw = base64.b64decode(b"".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        raise GraphError(
            400, "ErrorMimeContentInvalidBase64String", "Invalid base64 string for MIME content."
        ) from None
    if b"\n" not in raw or not _raw_headers(_parse(raw)):
        raise GraphError(400, "ErrorMimeContentInvalid", "Invalid MIME content.")
    return raw


def _parse_jwt(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Header and claims of a compact JWS (signature not verified: a simulator, not Entra)."""
    parts = token.split(".")
    if len(token) > MAX_ASSERTION_CHARS or len(parts) != 3 or not all(parts):
        raise _oauth_error("invalid_client", "AADSTS50027: JWT token is invalid or malformed.")
    try:
        decoded = [json.loads(base64.urlsafe_b64decode(p + "=" * (-len(p) % 4))) for p in parts[:2]]
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise _oauth_error("invalid_client", "AADSTS50027: JWT token is invalid or malformed.") from None
    if not all(isinstance(d, dict) for d in decoded) or not decoded[0].get("alg"):
        raise _oauth_error("invalid_client", "AADSTS50027: JWT token is invalid or malformed.")
    return decoded[0], decoded[1]


def immutable_id(default_id: str) -> str:
    """The immutable id Graph gives the same item under `Prefer: IdType="ImmutableId"` (a default id
    can change after the message is sent; an immutable one does not)."""
    return "AAkAL" + default_id.removeprefix("AAMk")


def _wants_immutable_ids(prefer: str | None) -> bool:
    return 'idtype="immutableid"' in (prefer or "").lower().replace(" ", "")


def _resource(item: _Item, select: list[str] | None, immutable: bool = False) -> dict[str, Any]:
    full = {
        "id": immutable_id(item.id) if immutable else item.id,
        "internetMessageId": item.internet_message_id,
        "createdDateTime": _iso(item.created_at),
        "receivedDateTime": _iso(item.created_at),
        "sentDateTime": _iso(item.created_at),
        "subject": item.subject,
    }
    if not select:
        return full
    return {k: v for k, v in full.items() if k == "id" or k in select}


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _one(params: dict[str, list[str]], name: str) -> str | None:
    values = params.get(name)
    return values[-1] if values else None


def _select(params: dict[str, list[str]]) -> list[str]:
    text = _one(params, "$select") or ""
    return [s.strip() for s in text.split(",") if s.strip()]


def _int(params: dict[str, list[str]], name: str, default: int, low: int, high: int) -> int:
    text = _one(params, name)
    if text is None:
        return default
    if not text.isdigit() or not low <= int(text) <= high:
        raise GraphError(400, "BadRequest", f"Invalid value for {name}.")
    return int(text)


def _page_size(prefer: str | None) -> int:
    match = re.search(r"odata\.maxpagesize=(\d{1,6})", prefer or "")
    return max(1, min(MAX_PAGE_SIZE, int(match[1]))) if match else DEFAULT_PAGE_SIZE


def _date_filter(expr: str | None) -> tuple[float | None, bool]:
    if not expr:
        return None, False
    match = _DATE_FILTER.fullmatch(expr.strip())
    if match is None:
        raise GraphError(400, "ErrorInvalidUrlQueryFilter", "Delta supports only receivedDateTime ge|gt {value}.")
    try:
        at = datetime.fromisoformat(match["value"].replace("Z", "+00:00"))
    except ValueError:
        raise GraphError(400, "ErrorInvalidUrlQueryFilter", "Invalid DateTimeOffset in the filter.") from None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return at.timestamp(), match["op"] == "ge"


class _GraphHandler(SimHandler):
    """Graph's routes, answers and error bodies on the shared keep-alive plumbing."""

    server_version = "graph-sim/1"
    json_content_type = "application/json; odata.metadata=minimal"

    def error_reply(self, exc: Exception) -> tuple[int, Any, dict[str, str]]:
        if isinstance(exc, GraphError):
            headers = {} if exc.retry_after_s is None else {"Retry-After": str(exc.retry_after_s)}
            return exc.status, exc.body, headers
        if isinstance(exc, RequestBodyError):  # the shared body reader's refusals
            return exc.status, graph_error_body("BadRequest", exc.message), {}
        return 500, graph_error_body("ErrorInternalServerError", f"simulator error: {exc!r}"), {}

    def route(self, method: str, body: bytes) -> tuple[int, Any]:
        """Graph API calls set ``self.latency``: their answer waits it."""
        sim = cast(GraphSimulator, self.server.sim)
        parts = urllib.parse.urlsplit(self.path)
        path = parts.path
        params = urllib.parse.parse_qs(parts.query, keep_blank_values=True)
        if path.startswith("/_sim/"):
            return _control(sim, method, path, body)
        match = _TOKEN_PATH.fullmatch(path)
        if match and method == "POST":
            form = urllib.parse.parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
            return 200, sim.issue_token(match["tenant"], form)
        match = _OIDC_PATH.fullmatch(path)
        if match and method == "GET":
            return 200, sim.openid_configuration(match["tenant"])
        match = _USER_PATH.fullmatch(path)
        if match is None:
            raise GraphError(400, "BadRequest", f"Resource not found for the segment '{path}'.")
        sim.check_token(self.headers.get("Authorization"))
        user, rest = match["user"], match["rest"]
        if rest == "sendMail" and method == "POST":
            self.latency = "send"  # accepted now; the answer waits (SimHandler._dispatch)
            sim.send_mail(user, self.headers.get("Content-Type") or "", body)
            return 202, None
        if method == "GET":
            self.latency = "read"
        if method == "GET" and rest in _SENT_ITEMS + _DRAFTS:
            immutable = _wants_immutable_ids(self.headers.get("Prefer"))
            return 200, sim.list_sent(user, params, immutable, drafts=rest in _DRAFTS)
        if method == "GET" and rest in tuple(f"{p}/delta" for p in _SENT_ITEMS):
            base = f"{sim.url}/v1.0/users/{user}/{rest}"
            return 200, sim.delta(user, params, self.headers.get("Prefer"), base)
        message = _MESSAGE_PATH.fullmatch(rest)
        if message and method == "GET":
            return 200, sim.get_message(user, message["id"], params, _wants_immutable_ids(self.headers.get("Prefer")))
        raise GraphError(400, "BadRequest", f"Resource not found for the segment '{rest}'.")


GraphSimulator.handler = _GraphHandler  # defined after the simulator, whose methods its routes call


def _control(sim: GraphSimulator, method: str, path: str, body: bytes) -> tuple[int, Any]:
    try:
        payload = json.loads(body.decode("utf-8")) if body.strip() else {}
        if not isinstance(payload, dict):
            raise ValueError("control body must be a JSON object")
        if method == "GET" and path == "/_sim/health":
            return 200, {"ok": True}
        if method == "GET" and path == "/_sim/effects":
            return 200, {"effects": sim.effects()}
        if method == "POST" and path == "/_sim/reset":
            sim.reset()
            return 200, {"ok": True}
        if method == "POST" and path == "/_sim/config":
            sim.configure(**payload)
            return 200, {"ok": True}
        if method == "POST" and path == "/_sim/clock":
            return 200, {"now": sim.advance_clock(payload.get("advance_s", 0.0))}
        if method == "POST" and path == "/_sim/inject-errors":
            sim.inject_errors(
                int(payload["status"]),
                int(payload.get("count", 1)),
                payload.get("retry_after_s"),
                bool(payload.get("accept")),
            )
            return 200, {"ok": True}
    except (KeyError, TypeError, ValueError, UnicodeDecodeError) as exc:
        raise GraphError(400, "BadRequest", f"bad control request: {exc}") from None
    raise GraphError(404, "NotFound", f"Unknown control endpoint: {method} {path}")


def main(argv: list[str] | None = None) -> int:
    """CLI: serve until SIGTERM/SIGINT (or --max-lifetime-s, so an orphaned dev server can't linger)."""
    parser = argparse.ArgumentParser(prog="python -m devstack.graph_sim", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--index-lag", type=float, default=0.0, help="Sent Items lag in seconds")
    parser.add_argument("--require-auth", action="store_true", help="Graph paths need a token this server issued")
    parser.add_argument("--max-lifetime-s", type=float, default=12 * 3600.0)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    sim = GraphSimulator(
        port=args.port, index_lag_s=args.index_lag, verbose=args.verbose, require_auth=args.require_auth
    )
    return serve_until_signalled(sim, args.max_lifetime_s)


if __name__ == "__main__":
    sys.exit(main())
