"""Who may call what. An open send endpoint would be an open mail relay.

- send, status (n8n): an API key (`Authorization: Bearer ssk_...`, see api_keys.py: n8n's
  built-in Bearer Auth credential), an HMAC-SHA256 signature header over timestamp + raw body,
  or a Google-signed ID token of an allowed caller service account.
- reconcile, sweep (Cloud Tasks, Cloud Scheduler): a Google-signed ID token whose `aud` is
  one of our URLs and whose `email` is a configured invoker service account.

HMAC header: `X-Safesend-Signature: t=<unix seconds>,v1=<hex hmac_sha256(secret, "<t>." + body)>`.
A timestamp outside the window (default 300 s either way) is refused, so a captured request
cannot be replayed later; within the window a replayed send is harmless by construction (the
dedup key turns it into a replay of the stored result).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from ..logs import log
from .api_keys import ApiKeyError, ApiKeyRing, looks_like_api_key
from .errors import SafesendError

SIGNATURE_HEADER = "X-Safesend-Signature"
# Cloud Run IAM verifies the token of X-Serverless-Authorization when present, else Authorization,
# and forwards it with its signature replaced by this marker (Cloud Run troubleshooting docs).
CLOUD_RUN_VERIFIED_HEADERS = ("X-Serverless-Authorization", "Authorization")
CLOUD_RUN_STRIPPED_SIGNATURE = "SIGNATURE_REMOVED_BY_GOOGLE"
# Unix seconds as signed: ASCII digits only ("²".isdigit() is true) and short enough that no
# arithmetic on it can overflow a float (400 nines did: an unauthenticated 500).
UNIX_SECONDS = re.compile(r"[0-9]{1,12}")
# One token of printable ASCII (RFC 6750's b64token and more) without a comma or a space, so two
# headers joined by the WSGI server ("Bearer a,Bearer b") never parse as one credential.
_BEARER = re.compile(r"[Bb][Ee][Aa][Rr][Ee][Rr] +([\x21-\x2b\x2d-\x7e]+) *")


class Role(str, Enum):
    CALLER = "caller"  # send, status
    INTERNAL = "internal"  # reconcile, sweep, notify (Cloud Tasks, Scheduler, the Pub/Sub push)


class AuthenticationError(SafesendError):
    """No credentials, or credentials that do not verify (HTTP 401)."""


class PermissionDeniedError(SafesendError):
    """Verified credentials of someone who may not call this endpoint (HTTP 403).

    The message is fixed (it reaches the response); `caller`, a verified address, is for logs, masked.
    """

    def __init__(self, caller: str):
        super().__init__("this caller may not call this endpoint")
        self.caller = caller


class RequestHeaders(Protocol):
    """The request headers as authentication reads them: werkzeug's Headers (case-insensitive) in
    the functions, a plain dict in unit tests."""

    def get(self, key: str, /) -> str | None: ...


def header_values(headers: RequestHeaders, name: str) -> list[str]:
    """Every value of a header: werkzeug's getlist when there is one (a plain dict has one value)."""
    getlist = getattr(headers, "getlist", None)
    if callable(getlist):
        return [str(v) for v in getlist(name)]
    value = headers.get(name)
    return [] if value is None else [value]


class IdTokenVerifier(Protocol):
    def verify(self, token: str) -> Mapping[str, object]:
        """Claims of a valid Google ID token for one of our audiences; raises AuthenticationError."""


def sign(secret: bytes, timestamp: int, body: bytes) -> str:
    """The header value a caller sends (documented for n8n in README.md)."""
    digest = hmac.new(secret, f"{timestamp}.".encode("ascii") + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def verify_signature(header: str, secret: bytes, body: bytes, now: float, window_s: float) -> None:
    """Raise AuthenticationError unless `header` signs `body` with `secret` within the window."""
    fields: dict[str, list[str]] = {}
    for part in header.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep:
            raise AuthenticationError("malformed signature header")
        fields.setdefault(key, []).append(value)
    stamps = fields.get("t", [])
    if len(stamps) != 1 or not UNIX_SECONDS.fullmatch(stamps[0]):
        raise AuthenticationError("signature header lacks a valid t=<unix seconds>")
    timestamp = int(stamps[0])
    if abs(now - timestamp) > window_s:
        raise AuthenticationError("signature timestamp outside the allowed window")
    expected = sign(secret, timestamp, body).split("v1=", 1)[1]
    # Compare every v1 (rotation: a caller may send two) in constant time, without early exit.
    matched = False
    for candidate in fields.get("v1", []):
        matched |= hmac.compare_digest(candidate.encode("ascii", "replace"), expected.encode("ascii"))
    if not matched:
        raise AuthenticationError("signature does not match")


@dataclass(frozen=True)
class AuthPolicy:
    hmac_secret: bytes | None
    caller_emails: frozenset[str]
    internal_emails: frozenset[str]
    window_s: float = 300.0
    disabled: bool = False
    caller_keys: ApiKeyRing = ApiKeyRing({})
    internal_keys: ApiKeyRing = ApiKeyRing({})  # local stacks: the Tasks emulator sends no OIDC token

    def keys_for(self, role: Role) -> ApiKeyRing:
        return self.internal_keys if role is Role.INTERNAL else self.caller_keys


class Authenticator:
    """Checks one request for one role. Runs before the body is parsed or the store is touched."""

    def __init__(self, policy: AuthPolicy, id_tokens: IdTokenVerifier | None, clock: Callable[[], float]):
        self.policy = policy
        self.id_tokens = id_tokens
        self.clock = clock

    def check(self, role: Role, headers: RequestHeaders, body: bytes) -> str:
        """Return who called (for logs); raise AuthenticationError / PermissionDeniedError.

        Every credential presented must verify (an ID token and a signature together are both
        checked: behind Cloud Run IAM the signature is a second factor); at least one is needed.
        """
        if self.policy.disabled:
            return "unauthenticated-local"
        # Cloud Run IAM reads X-Serverless-Authorization when present (else Authorization), and
        # forwards that token with its signature stripped; an API key may then ride in Authorization.
        signatures = header_values(headers, SIGNATURE_HEADER)
        if len(signatures) > 1:
            raise AuthenticationError(f"repeated {SIGNATURE_HEADER} header")
        signature = signatures[0] if signatures else None
        who = []
        for header, token in bearer_tokens(headers):
            if looks_like_api_key(token):
                who.append(self._check_api_key(role, token))
                continue
            if token.rsplit(".", 1)[-1] == CLOUD_RUN_STRIPPED_SIGNATURE and header != _verified_header(headers):
                raise AuthenticationError(
                    "an ID token without signature is only accepted in the header Cloud Run verified "
                    "(X-Serverless-Authorization when present, else Authorization)"
                )
            who.append(self._check_id_token(role, token))
        if signature is not None and role is Role.CALLER:
            if not self.policy.hmac_secret:
                raise AuthenticationError("HMAC signatures are not enabled on this deployment")
            verify_signature(signature, self.policy.hmac_secret, body, self.clock(), self.policy.window_s)
            who.append("hmac")
        if not who:
            raise AuthenticationError(
                "missing credentials: send Authorization: Bearer <API key or Google "
                "ID token>" + (f", or an {SIGNATURE_HEADER} header" if role is Role.CALLER else "")
            )
        return "+".join(who)

    def _check_api_key(self, role: Role, key: str) -> str:
        keys = self.policy.keys_for(role)
        if not keys:
            raise AuthenticationError("API keys are not accepted on this endpoint")
        try:
            return "key:" + keys.verify(key)
        except ApiKeyError as exc:  # fixed texts: never the key or a part of it
            raise AuthenticationError(f"invalid API key: {exc}") from None

    def _check_id_token(self, role: Role, token: str) -> str:
        claims = self._verified_claims(token)
        email = claims.get("email")
        if not isinstance(email, str) or not email or claims.get("email_verified") is not True:
            raise AuthenticationError("ID token carries no verified email")
        email = email.lower()
        allowed = self.policy.internal_emails if role is Role.INTERNAL else self.policy.caller_emails
        if email not in allowed:
            raise PermissionDeniedError(email)
        return email

    def _verified_claims(self, token: str) -> Mapping[str, object]:
        """The verifier's claims; any failure of it is a 401 (a token is attacker input, never a 500)."""
        if self.id_tokens is None:
            raise AuthenticationError("ID tokens are not accepted on this deployment")
        try:
            claims = self.id_tokens.verify(token)
        except AuthenticationError:
            raise
        except Exception as exc:  # noqa: BLE001 - its text may quote the token: log the type only
            log(logging.WARNING, "ID token verifier failed unexpectedly", error=type(exc).__name__)
            raise AuthenticationError("invalid ID token: unverifiable") from None
        if not isinstance(claims, Mapping):
            raise AuthenticationError("invalid ID token: unverifiable")
        return claims


def bearer_tokens(headers: RequestHeaders) -> list[tuple[str, str]]:
    """(header, token) of every bearer credential presented: each one must verify (a second factor
    is not optional). A credential header that is repeated, empty or not `Bearer <token>` is a 401,
    never skipped: what a proxy in front read may not be what we would read. gunicorn (under
    functions-framework) joins a repeated header with "," into one WSGI value; werkzeug's Headers
    may hold several: both are refused."""
    tokens = []
    for name in CLOUD_RUN_VERIFIED_HEADERS:
        values = header_values(headers, name)
        if len(values) > 1:
            raise AuthenticationError(f"repeated {name} header")
        if not values:
            continue
        match = _BEARER.fullmatch(values[0])
        if match is None:
            raise AuthenticationError(f"malformed {name} header: send one `Bearer <token>`")
        tokens.append((name, match[1]))
    return tokens


def _verified_header(headers: RequestHeaders) -> str:
    """The header whose token Cloud Run IAM verified before stripping its signature."""
    first, second = CLOUD_RUN_VERIFIED_HEADERS
    return first if header_values(headers, first) else second
