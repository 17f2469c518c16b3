"""Who may use the review console, and proof that a decision came from the console's own page.

Reviewers are people. In the deployment the `review` function sits behind Identity-Aware Proxy:
Google signs the user in, checks IAM (grant `roles/iap.httpsResourceAccessor` on the service to
the reviewers' Google group), and forwards each request with a signed header
`x-goog-iap-jwt-assertion`. This module is the second gate, so that a request reaching the
function some other way (IAP switched off by mistake, a misconfigured ingress, a caller inside
the project) gets nothing:

- the assertion is verified here, the way IAP's documentation shows, by google-auth's
  `id_token.verify_token(..., certs_url=IAP's public keys)`: ES256 only, a `kid` from IAP's
  published keys (https://www.gstatic.com/iap/verify/public_key, fetched lazily, cached,
  refetched when an unknown key appears), issuer `https://cloud.google.com/iap`, audience exactly one of ours
  (direct IAP on Cloud Run: `/projects/NUMBER/locations/REGION/services/NAME`; behind a load
  balancer: `/projects/NUMBER/global/backendServices/ID`), `iat`/`exp` with 30 s of skew and
  a lifetime of at most 10 minutes + 2 x skew, as IAP's "Securing your app with signed headers"
  describes. The unsigned `x-goog-authenticated-user-email` header is never read.
- the verified `email` must be on the app's own allowlist: exact addresses
  (`SAFESEND_REVIEW_ALLOWED_EMAILS`) and/or Workspace domains (`SAFESEND_REVIEW_ALLOWED_DOMAINS`,
  matched against the signed `hd` claim, not only the address's suffix).
- refusals carry fixed texts: never the token, a part of it, or a library's message about it.

Locally there is no IAP: `SAFESEND_REVIEW_DEV_IDENTITY=dev@localhost` makes every request from
loopback that reviewer. It must be an address at `localhost` (it can never name a real person),
it is refused on Cloud Run (`K_SERVICE` set) and together with an IAP audience, and the console
shows it in a red banner on every page. infra/ never sets it (infra policy test). DNS rebinding:
a page of evil.example whose name rebinds to 127.0.0.1 reaches a loopback console from the
reviewer's own browser, so in development the request's Host must be a loopback name or address,
and the console URL (the only origin a decision may come from) must be set, on loopback.

CSRF: nothing changes on GET. A decision is a POST that must carry a token bound to the reviewer
and the review_id it answers (HMAC-SHA256 with `SAFESEND_REVIEW_CSRF_SECRET`, valid for
CSRF_TTL_S), and must come from our own origin (`Origin`, else `Referer`; a cross-site
`Sec-Fetch-Site` is refused outright). The console sets no cookie of its own.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
import logging
import re
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

from ..config import env_name, on_google_cloud
from ..core.auth import UNIX_SECONDS, RequestHeaders
from ..core.errors import ConfigurationError, SafesendError
from ..core.jwt_parts import MalformedTokenError, b64url, json_object, numeric_date
from ..logs import log

if TYPE_CHECKING:
    from google.auth.transport import Request

IAP_HEADER = "x-goog-iap-jwt-assertion"
IAP_ISSUER = "https://cloud.google.com/iap"
IAP_KEYS_URL = "https://www.gstatic.com/iap/verify/public_key"  # {kid: PEM public key}
IAP_ALGORITHM = "ES256"
IAP_SKEW_S = 30.0
IAP_MAX_LIFETIME_S = 600.0 + 2 * IAP_SKEW_S
KEYS_TTL_S = 3600.0
KEYS_REFETCH_MIN_AGE_S = 60.0  # an unknown kid refetches the key set at most once a minute
MAX_ASSERTION_CHARS = 8192  # real assertions are ~1 kB
CSRF_TTL_S = 12 * 3600.0
CSRF_MIN_SECRET_BYTES = 32

# Settings (read from the environment; config.py may take them over).
# Declared (name, default, meaning) in config.Settings; parsed and checked here for the console.
ENV_IAP_AUDIENCE = env_name("review_iap_audience")
ENV_ALLOWED_EMAILS = env_name("review_allowed_emails")
ENV_ALLOWED_DOMAINS = env_name("review_allowed_domains")
ENV_DEV_IDENTITY = env_name("review_dev_identity")
ENV_CSRF_SECRET = env_name("review_csrf_secret")
ENV_CONSOLE_URL = env_name("review_console_url")  # shared with notify: links point here
ENV_IAP_KEYS_URL = env_name("review_iap_keys_url")
REVIEW_ENV = (
    ENV_IAP_AUDIENCE,
    ENV_ALLOWED_EMAILS,
    ENV_ALLOWED_DOMAINS,
    ENV_DEV_IDENTITY,
    ENV_CSRF_SECRET,
    ENV_CONSOLE_URL,
    ENV_IAP_KEYS_URL,
)

# The audience forms IAP signs (signed-headers docs). Anything else, e.g. the service URL, is a
# configuration mistake that would refuse every reviewer: caught at start-up instead.
_AUDIENCE_FORMS = (
    re.compile(r"/projects/[0-9]+/locations/[a-z0-9-]+/services/[A-Za-z0-9_-]+"),  # Cloud Run, direct IAP
    re.compile(r"/projects/[0-9]+/global/backendServices/[0-9]+"),  # external HTTPS load balancer
    re.compile(r"/projects/[0-9]+/apps/[a-z][a-z0-9-]+"),  # App Engine
)
_DOMAIN = re.compile(r"(?=.{1,253}$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)+")
_EMAIL = re.compile(r"[^@\s<>\"',;]{1,64}@([^@\s<>\"',;]{1,253})")
_DEV_EMAIL = re.compile(r"[a-z0-9._+-]{1,64}@(?:[a-z0-9-]+\.)*localhost")
# A Host header (or a URL's host:port) that names this machine: localhost, 127.x.y.z or [::1].
_LOOPBACK_HOST = re.compile(r"(?:localhost|(127(?:\.[0-9]{1,3}){3})|\[::1\])(?::[0-9]{1,5})?", re.IGNORECASE)


# ----------------------------------------------------------------------------- errors
class ReviewerAuthError(SafesendError):
    """No reviewer identity, or one that does not verify (HTTP 401). Fixed texts only."""

    status = 401


class KeysUnavailableError(ReviewerAuthError):
    """IAP's public keys could not be fetched: nobody can be checked right now (HTTP 503)."""

    status = 503


class ReviewerForbiddenError(SafesendError):
    """A verified person who is not a reviewer (HTTP 403). `email` is theirs: shown to them, masked in logs."""

    status = 403

    def __init__(self, email: str):
        super().__init__("this account is not on the reviewer allowlist")
        self.email = email


class CsrfError(SafesendError):
    """A POST that did not come from the console's own page (HTTP 403). Fixed texts only."""

    status = 403


# ----------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class ReviewerSettings:
    iap_audiences: frozenset[str] = frozenset()
    allowed_emails: frozenset[str] = frozenset()
    allowed_domains: frozenset[str] = frozenset()
    dev_identity: str | None = None
    csrf_secret: bytes = b""
    console_url: str | None = None  # the console's base URL (no /review): our origin, and the base of links
    iap_keys_url: str = IAP_KEYS_URL
    on_cloud_run: bool = False  # K_SERVICE is set: a development identity is refused there

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ReviewerSettings:
        """Parse and check (ConfigurationError names the setting at fault)."""

        def get(name: str) -> str:
            return (env.get(name) or "").strip()

        settings = cls(
            iap_audiences=_items(get(ENV_IAP_AUDIENCE)),
            allowed_emails=frozenset(i.lower() for i in _items(get(ENV_ALLOWED_EMAILS))),
            allowed_domains=frozenset(i.lower().lstrip("@") for i in _items(get(ENV_ALLOWED_DOMAINS))),
            dev_identity=get(ENV_DEV_IDENTITY).lower() or None,
            csrf_secret=get(ENV_CSRF_SECRET).encode(),
            console_url=get(ENV_CONSOLE_URL).rstrip("/") or None,
            iap_keys_url=get(ENV_IAP_KEYS_URL) or IAP_KEYS_URL,
            on_cloud_run=on_google_cloud(env),
        )
        settings.check()
        return settings

    @property
    def dev_mode(self) -> bool:
        return self.dev_identity is not None

    def check(self) -> None:
        """Fail closed: exactly one way to identify reviewers, an allowlist, a CSRF secret."""
        if len(self.csrf_secret) < CSRF_MIN_SECRET_BYTES:
            raise ConfigurationError(
                f"{ENV_CSRF_SECRET} must be at least {CSRF_MIN_SECRET_BYTES} bytes "
                "(e.g. openssl rand -hex 32, from Secret Manager)"
            )
        if self.console_url is not None:
            parts = urlsplit(self.console_url)
            if parts.scheme not in ("https", "http") or not parts.hostname or parts.query or parts.fragment:
                raise ConfigurationError(
                    f"{ENV_CONSOLE_URL} must be the console's https:// origin, e.g. "
                    "https://safesend-review-123.europe-west1.run.app"
                )
        if self.dev_mode:
            self._check_dev()
            return
        if not self.iap_audiences:
            raise ConfigurationError(
                f"the review console has no reviewer sign-in: set {ENV_IAP_AUDIENCE} "
                f"(deployed, behind IAP) or {ENV_DEV_IDENTITY} (local stacks only)"
            )
        for audience in self.iap_audiences:
            if not any(form.fullmatch(audience) for form in _AUDIENCE_FORMS):
                raise ConfigurationError(
                    f"{ENV_IAP_AUDIENCE}: {audience!r} is not an IAP audience; IAP on Cloud Run signs "
                    "/projects/PROJECT_NUMBER/locations/REGION/services/SERVICE_NAME, behind a load balancer "
                    "/projects/PROJECT_NUMBER/global/backendServices/SERVICE_ID"
                )
        if not (self.allowed_emails or self.allowed_domains):
            raise ConfigurationError(
                f"set {ENV_ALLOWED_EMAILS} and/or {ENV_ALLOWED_DOMAINS}: IAP's IAM grant is "
                "the first gate, the app's allowlist the second"
            )
        for email in self.allowed_emails:
            if not _EMAIL.fullmatch(email):
                raise ConfigurationError(f"{ENV_ALLOWED_EMAILS}: {email!r} is not an e-mail address")
        for domain in self.allowed_domains:
            if not _DOMAIN.fullmatch(domain):
                raise ConfigurationError(f"{ENV_ALLOWED_DOMAINS}: {domain!r} is not a domain")
        if self.console_url is None or urlsplit(self.console_url).scheme != "https":
            raise ConfigurationError(
                f"{ENV_CONSOLE_URL} must be set to the console's https:// URL behind IAP "
                "(the origin every decision must come from)"
            )

    def _check_dev(self) -> None:
        if self.iap_audiences:
            raise ConfigurationError(
                f"{ENV_DEV_IDENTITY} and {ENV_IAP_AUDIENCE} are both set: a development identity never sits next to IAP"
            )
        if self.on_cloud_run:
            raise ConfigurationError(f"{ENV_DEV_IDENTITY} is set on Cloud Run (K_SERVICE): local stacks only")
        if not _DEV_EMAIL.fullmatch(self.dev_identity or ""):
            raise ConfigurationError(
                f"{ENV_DEV_IDENTITY} must be an address at localhost (e.g. dev@localhost), "
                "so it can never name a real reviewer"
            )
        if self.console_url is None or not is_loopback_host(urlsplit(self.console_url).netloc):
            raise ConfigurationError(
                f"{ENV_DEV_IDENTITY} needs {ENV_CONSOLE_URL} on loopback (e.g. http://127.0.0.1:8080): "
                "decisions are accepted from that origin only (DNS rebinding)"
            )

    def allows(self, email: str, hosted_domain: str | None) -> bool:
        """The app's allowlist: an exact address, or a Workspace domain the signed `hd` claim names."""
        if email in self.allowed_emails:
            return True
        domain = email.rsplit("@", 1)[-1]
        return hosted_domain is not None and hosted_domain == domain and domain in self.allowed_domains


def _items(raw: str) -> frozenset[str]:
    return frozenset(item.strip() for item in raw.split(",") if item.strip())


# ----------------------------------------------------------------------------- IAP assertions
def fetch_json(url: str, timeout_s: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 - https URL from settings
        return json.loads(response.read(1_000_000))


def _refused(reason: str) -> ReviewerAuthError:
    return ReviewerAuthError(f"invalid IAP assertion: {reason}")


class IapVerifier:
    """Verifies `x-goog-iap-jwt-assertion` values; returns the claims or raises ReviewerAuthError.

    The signature and audience are google-auth's `id_token.verify_token` against IAP's public keys,
    which it reads through a request served from this verifier's key cache (one fetch per
    KEYS_TTL_S, another when an unknown `kid` appears, at most once per KEYS_REFETCH_MIN_AGE_S).
    Before it, the token is read strictly (jwt_parts) and our own claim checks run with `clock`:
    issuer, audience, iat/exp with IAP's skew and lifetime, email, hd. Refusals name a fixed reason."""

    def __init__(
        self,
        audiences: frozenset[str],
        keys_url: str = IAP_KEYS_URL,
        fetch: Callable[[str], Any] = fetch_json,
        clock: Callable[[], float] = time.time,
    ):
        self.audiences = audiences
        self.keys_url = keys_url
        self._fetch = fetch
        self._clock = clock
        self._keys: dict[str, str] | None = None
        self._fetched_at = 0.0
        self._lock = threading.Lock()

    def verify(self, assertion: str) -> dict[str, Any]:
        try:
            return self._verify(assertion)
        except ReviewerAuthError:
            raise
        except Exception as exc:  # noqa: BLE001 - attacker input: a surprise is a refusal, never a 500
            log(logging.WARNING, "IAP assertion check failed unexpectedly", error=type(exc).__name__)
            raise _refused("unverifiable") from None

    def _verify(self, assertion: str) -> dict[str, Any]:
        from google.auth import exceptions as auth_exceptions
        from google.oauth2 import id_token

        parts = assertion.split(".")
        if len(assertion) > MAX_ASSERTION_CHARS or len(parts) != 3:
            raise _refused("malformed")
        try:
            header, claims = json_object(parts[0]), json_object(parts[1])
            signature = b64url(parts[2])
        except MalformedTokenError:
            raise _refused("malformed") from None
        if header.get("alg") != IAP_ALGORITHM or not isinstance(header.get("kid"), str):
            raise _refused("algorithm or key id")
        self._check_claims(claims)
        if len(signature) != 64:  # JWS ES256: r || s, 32 bytes each
            raise _refused("signature")
        keys = self._keys_with(header["kid"])
        # google-auth checks iat/exp against the wall clock with IAP's skew; with another clock (tests)
        # its window widens by the difference, and the exact check above, with our clock, decides.
        skew = int(IAP_SKEW_S + abs(self._clock() - time.time())) + 1
        try:
            verified = id_token.verify_token(
                assertion,
                cast("Request", _CachedKeys(self.keys_url, keys)),
                audience=sorted(self.audiences),
                certs_url=self.keys_url,
                clock_skew_in_seconds=skew,
            )
        except (ValueError, auth_exceptions.GoogleAuthError):
            raise _refused("signature") from None
        return dict(verified)

    def _check_claims(self, claims: Mapping[str, Any]) -> None:
        if claims.get("iss") != IAP_ISSUER:
            raise _refused("issuer")
        audience = claims.get("aud")
        if not isinstance(audience, str) or audience not in self.audiences:
            raise _refused("audience")
        issued, expires = numeric_date(claims.get("iat")), numeric_date(claims.get("exp"))
        if issued is None or expires is None:
            raise _refused("malformed iat or exp")
        now = self._clock()
        if expires < now - IAP_SKEW_S:
            raise _refused("expired")
        if issued > now + IAP_SKEW_S:
            raise _refused("issued in the future")
        if expires > now + IAP_MAX_LIFETIME_S or expires - issued > IAP_MAX_LIFETIME_S:
            raise _refused("lifetime too long")
        email = claims.get("email")
        if not isinstance(email, str) or not _EMAIL.fullmatch(email):
            raise _refused("no email")
        if "hd" in claims and not isinstance(claims["hd"], str):
            raise _refused("malformed hd")

    def _keys_with(self, kid: str) -> dict[str, str]:
        """The cached keys, holding `kid` (refetched once if stale), or a refusal."""
        keys = self._current_keys()
        if kid not in keys and self._refresh_if_stale():
            keys = self._current_keys()
        if kid not in keys:
            raise _refused("unknown signing key")
        return keys

    def _refresh_if_stale(self) -> bool:
        with self._lock:
            if self._clock() - self._fetched_at < KEYS_REFETCH_MIN_AGE_S:
                return False
            self._keys = None
            return True

    def _current_keys(self) -> dict[str, str]:
        with self._lock:
            if self._keys is None or self._clock() - self._fetched_at > KEYS_TTL_S:
                self._keys = self._fetch_keys()
                self._fetched_at = self._clock()
            return self._keys

    def _fetch_keys(self) -> dict[str, str]:
        try:
            document = self._fetch(self.keys_url)
            keys = es256_keys(document)
        except Exception as exc:  # noqa: BLE001 - network, JSON or shape: no keys
            log(logging.ERROR, "cannot fetch IAP public keys", error=type(exc).__name__)
            raise KeysUnavailableError("cannot fetch IAP public keys: try again shortly") from None
        if not keys:
            log(logging.ERROR, "IAP key set holds no usable P-256 key")
            raise KeysUnavailableError("cannot fetch IAP public keys: try again shortly")
        return keys


def es256_keys(document: Any) -> dict[str, str]:
    """kid -> PEM, from IAP's key document (`{kid: PEM public key}`): only P-256 public keys (loading
    one checks its point is on the curve); others are skipped."""
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    if not isinstance(document, dict):
        raise ValueError("not a key document")
    keys = {}
    for kid, pem in document.items():
        if not isinstance(kid, str) or not isinstance(pem, str):
            continue
        try:
            public_key = load_pem_public_key(pem.encode("ascii"))
        except (ValueError, TypeError, UnicodeEncodeError):
            continue
        if isinstance(public_key, ec.EllipticCurvePublicKey) and isinstance(public_key.curve, ec.SECP256R1):
            keys[kid] = pem
    return keys


@dataclass(frozen=True)
class _KeysAnswer:
    status: int
    data: bytes


class _CachedKeys:
    """The google-auth transport verify_token fetches the keys with, served from the cache."""

    def __init__(self, url: str, keys: Mapping[str, str]):
        self._url = url
        self._data = json.dumps(dict(keys)).encode()

    def __call__(self, url: str, method: str = "GET", **kwargs: Any) -> _KeysAnswer:
        return _KeysAnswer(200, self._data) if url == self._url and method == "GET" else _KeysAnswer(404, b"{}")


# ----------------------------------------------------------------------------- the reviewer
@dataclass(frozen=True)
class Reviewer:
    email: str
    source: str  # "iap" or "dev"

    @property
    def is_dev(self) -> bool:
        return self.source == "dev"


def is_loopback_host(host: str | None) -> bool:
    """A Host header (host[:port]) naming this machine: what a rebound DNS name never sends."""
    match = _LOOPBACK_HOST.fullmatch(host or "")
    return match is not None and (match[1] is None or _is_loopback(match[1]))


def _is_loopback(address: str | None) -> bool:
    try:
        return address is not None and ipaddress.ip_address(address.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


@dataclass
class ReviewerAuth:
    """Identify the reviewer of a request, and mint/check the CSRF tokens of their decision forms."""

    settings: ReviewerSettings
    verifier: IapVerifier | None = None
    clock: Callable[[], float] = time.time
    _warned: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        if self.verifier is None and not self.settings.dev_mode:
            self.verifier = IapVerifier(self.settings.iap_audiences, self.settings.iap_keys_url, clock=self.clock)

    def identify(self, headers: RequestHeaders, remote_addr: str | None) -> Reviewer:
        """The reviewer, or ReviewerAuthError (401/503) / ReviewerForbiddenError (403)."""
        if self.settings.dev_mode:
            if not _is_loopback(remote_addr):
                raise ReviewerAuthError("the development identity is only accepted from loopback")
            if not is_loopback_host(headers.get("Host")):
                raise ReviewerAuthError("the development identity is only accepted for a loopback Host")
            if not self._warned:
                self._warned = True
                log(
                    logging.WARNING,
                    "REVIEW CONSOLE USES A DEVELOPMENT IDENTITY (SAFESEND_REVIEW_DEV_IDENTITY): local use only",
                    reviewer=self.settings.dev_identity,
                )
            return Reviewer(self.settings.dev_identity or "", "dev")
        assertion = headers.get(IAP_HEADER)
        if not assertion:
            raise ReviewerAuthError("no IAP assertion: open the console through its IAP-protected address")
        assert self.verifier is not None  # noqa: S101 - check() makes IAP mode build a verifier
        claims = self.verifier.verify(assertion.strip())
        email = str(claims["email"]).lower()
        hosted_domain = claims.get("hd")
        if not self.settings.allows(email, hosted_domain.lower() if isinstance(hosted_domain, str) else None):
            raise ReviewerForbiddenError(email)
        return Reviewer(email, "iap")

    # ------------------------------------------------------------------- CSRF
    def csrf_token(self, reviewer: Reviewer, review_id: str) -> str:
        """`v1.<unix seconds>.<hmac>`: valid for this reviewer and this review_id only, CSRF_TTL_S long."""
        issued = int(self.clock())
        return f"v1.{issued}.{self._mac(issued, reviewer.email, review_id)}"

    def check_origin(self, headers: RequestHeaders, host: str | None) -> None:
        """The POST came from our own origin (checked before the body is read)."""
        fetch_site = headers.get("Sec-Fetch-Site")
        if fetch_site is not None and fetch_site.lower() != "same-origin":
            raise CsrfError("the decision did not come from this console's page")
        allowed = self._origins(host)
        origin = headers.get("Origin")
        if origin is not None:
            if origin.rstrip("/").lower() not in allowed:
                raise CsrfError("the decision did not come from this console's page")
            return
        referer = headers.get("Referer")
        if not referer:
            raise CsrfError("the browser sent neither Origin nor Referer: the decision cannot be checked")
        parts = urlsplit(referer)
        if f"{parts.scheme}://{parts.netloc}".lower() not in allowed:
            raise CsrfError("the decision did not come from this console's page")

    def check_token(self, reviewer: Reviewer, review_id: str, token: str | None) -> None:
        """The token is ours, for this reviewer and review_id, and recent."""
        version, _, rest = (token or "").partition(".")
        issued_text, _, mac = rest.partition(".")
        if version != "v1" or not UNIX_SECONDS.fullmatch(issued_text) or not mac:
            raise CsrfError("the form's security token is missing or malformed: reload the page")
        issued = int(issued_text)
        now = self.clock()
        expected = self._mac(issued, reviewer.email, review_id)
        if not hmac.compare_digest(mac.encode("ascii", "replace"), expected.encode("ascii")):
            raise CsrfError("the form's security token does not match: reload the page")
        if issued > now + 60 or now - issued > CSRF_TTL_S:
            raise CsrfError("the form is too old: reload the page and decide again")

    def _mac(self, issued: int, email: str, review_id: str) -> str:
        message = f"safesend-review-csrf|v1|{issued}|{email}|{review_id}".encode()
        digest = hmac.new(self.settings.csrf_secret, message, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")

    def _origins(self, host: str | None) -> frozenset[str]:
        if self.settings.console_url:
            parts = urlsplit(self.settings.console_url)
            return frozenset({f"{parts.scheme}://{parts.netloc}".lower()})
        if not host:
            return frozenset()
        return frozenset({f"http://{host}".lower(), f"https://{host}".lower()})


_lock = threading.Lock()
_auth: ReviewerAuth | None = None


def get_reviewer_auth(env: Mapping[str, str] | None = None) -> ReviewerAuth:
    """The instance's ReviewerAuth, built once (its IAP key cache lives as long as the instance)."""
    import os

    global _auth  # noqa: PLW0603 - one per instance, built on first use
    if _auth is None:
        with _lock:
            if _auth is None:
                _auth = ReviewerAuth(ReviewerSettings.from_env(os.environ if env is None else env))
    return _auth
