"""App-only Microsoft Graph tokens through MSAL for Python (Microsoft's library for Entra ID tokens).

Two credentials, no client secret (docs/graph-provider.md):
- a certificate: MSAL signs its own client assertion with the private key (`client_credential=
  {"private_key", "thumbprint"}`), the key read from Secret Manager;
- a federated credential (Entra workload identity federation): a Google-signed ID token of the
  function's own service account, audience `api://AzureADTokenExchange`, is the client assertion. No
  secret exists anywhere; the app registration trusts `https://accounts.google.com` + that account.

One ConfidentialClientApplication per mailbox and instance: MSAL caches the token in memory and asks
Entra again only near expiry. MSAL's HTTP goes through `BoundedLoginHttp`: each call within the
caller's deadline (send or read), so a slow login cannot stretch an attempt. MSAL's own retries of
the token request are harmless: the token endpoint is not the sendMail POST, and no message exists
before the one POST the mailer makes after the token is in hand.

`msal` is imported on the first token only: Gmail-only deployments never load it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import requests

from ..core.errors import MailboxUnavailableError
from ..core.graph_hosts import GLOBAL_GRAPH_SCOPE

GRAPH_SCOPE = GLOBAL_GRAPH_SCOPE
LOGIN_AUTHORITY = "https://login.microsoftonline.com"
FEDERATED_AUDIENCE = "api://AzureADTokenExchange"
ID_TOKEN_REUSE_S = 300.0  # an ID token is reused this long (it lives an hour; MSAL asks rarely anyway)
MAX_LOGIN_BODY_BYTES = 64 * 1024  # Entra's token and discovery answers are a few kB
LOGIN_READ_BYTES = 16 * 1024  # one socket read at most: the deadline is checked between reads


class GraphAuthError(MailboxUnavailableError):
    """No Graph token: nothing was sent (the caller classifies a send as not accepted)."""


class BoundedLoginHttp:
    """The `http_client` MSAL is given: requests without retries, each call bounded by the deadline the
    current thread set (`within`). `login_endpoint` replaces Entra's host (a local simulator only)."""

    def __init__(self, timeout_s: float, login_endpoint: str | None = None):
        self._timeout_s = timeout_s
        self._login_endpoint = login_endpoint.rstrip("/") if login_endpoint else None
        self._session = requests.Session()  # no HTTPAdapter retries are mounted: one try per call
        self._local = threading.local()

    def within(self, deadline: float) -> BoundedLoginHttp:
        self._local.deadline = deadline
        return self

    def _url(self, url: str) -> str:
        if self._login_endpoint and url.startswith(LOGIN_AUTHORITY):
            return self._login_endpoint + url[len(LOGIN_AUTHORITY) :]
        return url

    def _timeout(self) -> float:
        deadline = getattr(self._local, "deadline", None)
        left = self._timeout_s if deadline is None else deadline - time.monotonic()
        if left <= 0:
            raise GraphAuthError("graph token: deadline passed")
        return min(left, self._timeout_s)

    def post(self, url: str, **kwargs: Any) -> LoginAnswer:
        return self._call("POST", url, kwargs)

    def get(self, url: str, **kwargs: Any) -> LoginAnswer:
        return self._call("GET", url, kwargs)

    def _call(self, method: str, url: str, kwargs: dict[str, Any]) -> LoginAnswer:
        """One request, its answer read whole within the deadline and MAX_LOGIN_BODY_BYTES: requests'
        timeout bounds each socket read, not the call (an answer dripped slowly would outlast it)."""
        kwargs["timeout"] = self._timeout()
        deadline = time.monotonic() + kwargs["timeout"]
        kwargs["headers"] = {**(kwargs.get("headers") or {}), "Accept-Encoding": "identity"}
        response = self._session.request(method, self._url(url), allow_redirects=False, stream=True, **kwargs)
        try:
            body = bytearray()
            for _ in range(MAX_LOGIN_BODY_BYTES + 1):  # each read returns at least a byte, or the end
                chunk = response.raw.read1(LOGIN_READ_BYTES, decode_content=False)
                if not chunk:
                    break
                body += chunk
                if len(body) > MAX_LOGIN_BODY_BYTES:
                    raise GraphAuthError("graph login: answer too large")
                if time.monotonic() > deadline:
                    raise GraphAuthError("graph login: deadline passed while reading the answer")
        finally:
            response.close()
        text = bytes(body).decode(response.encoding or "utf-8", "replace")
        return LoginAnswer(response.status_code, text, dict(response.headers))

    def close(self) -> None:
        self._session.close()


class LoginAnswer:
    """What MSAL reads of an HTTP answer (the shape of its own NormalizedResponse), read whole."""

    def __init__(self, status_code: int, text: str, headers: dict[str, str]):
        self.status_code = status_code
        self.text = text
        self.headers = headers

    def raise_for_status(self) -> None:
        if self.status_code >= 400:
            raise GraphAuthError(f"graph login: HTTP {self.status_code}")


class GraphTokens:
    """A Graph access token for one app registration, cached by MSAL; `token(deadline)` or GraphAuthError."""

    def __init__(
        self,
        tenant_id: str,
        client_id: str,
        credential: dict[str, Any],
        http: BoundedLoginHttp,
        scope: str = GRAPH_SCOPE,
    ):
        self._tenant_id = tenant_id
        self._scope = scope
        self._client_id = client_id
        self._credential = credential
        self._http = http
        self._app: Any = None
        self._lock = threading.Lock()

    def _application(self) -> Any:
        with self._lock:
            if self._app is None:
                import msal

                self._app = msal.ConfidentialClientApplication(
                    self._client_id,
                    client_credential=self._credential,
                    authority=f"{LOGIN_AUTHORITY}/{self._tenant_id}",
                    http_client=self._http,
                    instance_discovery=False,
                )
            return self._app

    def token(self, deadline: float) -> str:
        """A valid access token (MSAL's cache first), obtained before `deadline`."""
        self._http.within(deadline)
        try:
            result = self._application().acquire_token_for_client(scopes=[self._scope])
        except GraphAuthError:
            raise
        except Exception as exc:
            raise GraphAuthError(f"graph token failed: {type(exc).__name__}") from exc
        token = result.get("access_token") if isinstance(result, dict) else None
        if not isinstance(token, str) or not token:
            code = result.get("error") if isinstance(result, dict) else None
            raise GraphAuthError("graph token refused" + (f": {code}" if isinstance(code, str) else ""))
        return token


def certificate_credential(private_key_pem: str, thumbprint: str) -> dict[str, Any]:
    """MSAL's certificate credential: it signs an RS256 assertion naming the SHA-1 thumbprint (x5t)."""
    return {"private_key": private_key_pem, "thumbprint": thumbprint}


def federated_credential(id_token: Callable[[], str]) -> dict[str, Any]:
    """MSAL's client-assertion credential: a callable MSAL calls whenever it needs a new Graph token."""
    return {"client_assertion": id_token}


class GoogleIdTokenAssertion:
    """The function's Google ID token for Entra's federation audience (google-auth: the metadata server
    on Google Cloud), reused for ID_TOKEN_REUSE_S."""

    def __init__(self, audience: str = FEDERATED_AUDIENCE, fetch: Callable[[str], str] | None = None):
        self._audience = audience
        self._fetch = fetch or _fetch_google_id_token
        self._cached: tuple[str, float] | None = None
        self._lock = threading.Lock()

    def __call__(self) -> str:
        with self._lock:
            if self._cached is None or time.monotonic() - self._cached[1] > ID_TOKEN_REUSE_S:
                self._cached = (self._fetch(self._audience), time.monotonic())
            return self._cached[0]


def _fetch_google_id_token(audience: str) -> str:
    from google.auth.transport.requests import Request
    from google.oauth2 import id_token

    token = id_token.fetch_id_token(Request(), audience)
    return str(token)


def check_endpoint(url: str | None, name: str) -> str | None:
    """An override endpoint (local simulators only) must be plain loopback HTTP or HTTPS."""
    if url is None:
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{name} must be an http(s) URL")
    return url.rstrip("/")
