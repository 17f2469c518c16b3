"""OAuth access tokens for Google's REST APIs, cheap to import and cheap to get on a cold instance.

Why not google-auth everywhere: its Compute Engine credentials import `requests` and `cryptography`
(~150-200 ms measured with `python -X importtime`), paid on the first request of every new
instance. On Cloud Run and Cloud Functions (gen2) the instance's service account token comes from
the metadata server in one local HTTP GET, which the standard library does in a few milliseconds.
Elsewhere (a laptop with `gcloud auth application-default login`, a key file) google-auth's
Application Default Credentials are used, imported only then. The Firestore emulator takes any
token: "owner" also bypasses security rules.
"""

from __future__ import annotations

import http.client
import json
import os
import threading
import time
from abc import ABC, abstractmethod
from datetime import UTC
from typing import Any, Protocol

DATASTORE_SCOPE = "https://www.googleapis.com/auth/datastore"
METADATA_HOST = "metadata.google.internal"
METADATA_TOKEN_PATH = "/computeMetadata/v1/instance/service-accounts/default/token"  # noqa: S105 - a URL path
REFRESH_MARGIN_S = 60.0  # a token this close to its expiry is replaced before use
METADATA_TIMEOUT_S = 5.0


class AccessTokenError(Exception):
    """No access token could be obtained (metadata server unreachable, credentials missing or refused)."""


class AccessTokens(Protocol):
    def authorization(self) -> str:
        """The value of an Authorization header, refreshed before it expires."""

    def invalidate(self) -> None:
        """Forget the cached token (the API answered 401: revoked or expired early)."""

    def quota_project(self) -> str | None:
        """The project to bill calls to (the x-goog-user-project header), when the credentials say:
        user credentials from `gcloud auth application-default login` carry one, and some APIs
        refuse user credentials without it. None for service accounts (their own project)."""


class EmulatorToken:
    """Google's emulators accept any bearer token; "owner" skips the Firestore emulator's rules."""

    def authorization(self) -> str:
        return "Bearer owner"

    def invalidate(self) -> None:
        """Nothing cached."""

    def quota_project(self) -> str | None:
        return None


class _CachedToken(ABC):
    """Thread-safe cache of one token and its expiry; subclasses fetch (token, lifetime seconds)."""

    def __init__(self, clock: Any = time.monotonic):
        self._clock = clock
        self._lock = threading.Lock()
        self._token: str | None = None
        self._expires_at = 0.0

    def authorization(self) -> str:
        with self._lock:
            if self._token is None or self._clock() >= self._expires_at - REFRESH_MARGIN_S:
                token, lifetime_s = self._fetch()
                self._token, self._expires_at = token, self._clock() + lifetime_s
            return f"Bearer {self._token}"

    def invalidate(self) -> None:
        with self._lock:
            self._token = None

    def quota_project(self) -> str | None:
        return None

    @abstractmethod
    def _fetch(self) -> tuple[str, float]:
        """A new token and its lifetime in seconds; raises AccessTokenError."""


class MetadataServerTokens(_CachedToken):
    """The default service account's token from the metadata server (Cloud Run, Functions, GCE)."""

    def __init__(self, host: str | None = None, timeout_s: float = METADATA_TIMEOUT_S, clock: Any = time.monotonic):
        super().__init__(clock)
        self._host = host or os.environ.get("GCE_METADATA_HOST") or METADATA_HOST
        self._timeout_s = timeout_s

    def _fetch(self) -> tuple[str, float]:
        conn = http.client.HTTPConnection(self._host, timeout=self._timeout_s)
        try:
            conn.request("GET", METADATA_TOKEN_PATH, headers={"Metadata-Flavor": "Google"})
            response = conn.getresponse()
            body = response.read()
        except (OSError, http.client.HTTPException) as exc:
            raise AccessTokenError(f"metadata server {self._host} unreachable: {exc!r}") from exc
        finally:
            conn.close()
        if response.status != 200:
            raise AccessTokenError(f"metadata server answered {response.status} for the access token")
        try:
            data = json.loads(body)
            return str(data["access_token"]), float(data["expires_in"])
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            raise AccessTokenError("metadata server's token answer is not the documented JSON") from exc


class ApplicationDefaultTokens(_CachedToken):
    """google-auth's Application Default Credentials (key file, gcloud login, workload identity)."""

    def __init__(self, scopes: tuple[str, ...] = (DATASTORE_SCOPE,), clock: Any = time.monotonic):
        super().__init__(clock)
        self._scopes = scopes
        self._credentials: Any = None
        self._quota_project: str | None = None

    def quota_project(self) -> str | None:
        """ADC's quota project (gcloud's `--billing-project`/GOOGLE_CLOUD_QUOTA_PROJECT), once a token was fetched."""
        return self._quota_project

    def _fetch(self) -> tuple[str, float]:
        import google.auth
        import google.auth.transport.requests
        from google.auth import exceptions as auth_exceptions

        try:
            if self._credentials is None:
                self._credentials, _ = google.auth.default(scopes=list(self._scopes))
            self._credentials.refresh(google.auth.transport.requests.Request())
        except auth_exceptions.GoogleAuthError as exc:
            raise AccessTokenError(f"application default credentials: {exc}") from exc
        self._quota_project = getattr(self._credentials, "quota_project_id", None)
        expiry = self._credentials.expiry  # naive UTC, or None for tokens without a known expiry
        lifetime = 3000.0 if expiry is None else expiry.replace(tzinfo=UTC).timestamp() - time.time()
        return str(self._credentials.token), lifetime


def default_tokens(emulator: bool, environ: Any = os.environ) -> AccessTokens:
    """The cheapest correct source here: emulator, metadata server (serverless), or ADC."""
    if emulator:
        return EmulatorToken()
    if environ.get("K_SERVICE") and not environ.get("GOOGLE_APPLICATION_CREDENTIALS"):
        return MetadataServerTokens()
    return ApplicationDefaultTokens()
