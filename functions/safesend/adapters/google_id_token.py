"""Verification of Google-signed ID tokens (OIDC) against Google's public certificates.

Certificates are fetched lazily and cached for an hour (Google rotates them daily, with
overlap). The certificate URL is configurable so tests can serve their own keys.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from typing import Callable, Mapping

from google.auth import exceptions as auth_exceptions
from google.auth import jwt

from ..auth import AuthenticationError

GOOGLE_CERTS_URL = "https://www.googleapis.com/oauth2/v1/certs"
GOOGLE_ISSUERS = frozenset({"https://accounts.google.com", "accounts.google.com"})
CERTS_TTL_S = 3600.0


def fetch_json(url: str, timeout_s: float = 5.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 - https URL from config
        return json.loads(response.read())


class GoogleIdTokenVerifier:
    def __init__(self, audiences: frozenset[str], certs_url: str = GOOGLE_CERTS_URL,
                 fetch: Callable[[str], dict] = fetch_json, clock: Callable[[], float] = time.time):
        self.audiences = audiences
        self.certs_url = certs_url
        self._fetch = fetch
        self._clock = clock
        self._certs: dict | None = None
        self._fetched_at = 0.0
        self._lock = threading.Lock()

    def verify(self, token: str) -> Mapping[str, object]:
        if not self.audiences:
            raise AuthenticationError("no ID-token audience is configured")
        try:
            claims = jwt.decode(token, certs=self._current_certs(), audience=list(self.audiences))
        except (ValueError, auth_exceptions.GoogleAuthError) as exc:
            if "key id" not in str(exc) or not self._refresh_if_stale():
                raise AuthenticationError(f"invalid ID token: {exc}") from None
            try:  # a key Google rotated in since our last fetch
                claims = jwt.decode(token, certs=self._current_certs(), audience=list(self.audiences))
            except (ValueError, auth_exceptions.GoogleAuthError) as again:
                raise AuthenticationError(f"invalid ID token: {again}") from None
        if claims.get("iss") not in GOOGLE_ISSUERS:
            raise AuthenticationError("ID token not issued by Google")
        return claims

    def _refresh_if_stale(self, min_age_s: float = 60.0) -> bool:
        """Drop cached certificates older than `min_age_s` (bounded refetching on unknown kids)."""
        with self._lock:
            if self._clock() - self._fetched_at < min_age_s:
                return False
            self._certs = None
            return True

    def _current_certs(self) -> dict:
        with self._lock:
            if self._certs is None or self._clock() - self._fetched_at > CERTS_TTL_S:
                try:
                    self._certs = self._fetch(self.certs_url)
                except (OSError, ValueError) as exc:
                    raise AuthenticationError(f"cannot fetch Google certificates: {exc}") from None
                self._fetched_at = self._clock()
            return self._certs
