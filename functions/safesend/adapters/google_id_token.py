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
# Behind Cloud Run IAM the token reaching the container has its signature replaced by this marker
# (Cloud Run troubleshooting: "signature-removed"); Cloud Run verified it before forwarding.
CLOUD_RUN_STRIPPED_SIGNATURE = "SIGNATURE_REMOVED_BY_GOOGLE"
GOOGLE_ISSUERS = frozenset({"https://accounts.google.com", "accounts.google.com"})
CERTS_TTL_S = 3600.0


def fetch_json(url: str, timeout_s: float = 5.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 - https URL from config
        return json.loads(response.read())


class GoogleIdTokenVerifier:
    """Checks signature, audience, issuer and expiry of a Google ID token.

    `trust_cloud_run_iam`: set only where Cloud Run IAM admits nobody without a verified token
    (the Terraform deployment: no allUsers). Then a token whose signature Cloud Run stripped is
    accepted on its claims (audience, issuer, expiry still checked here). Anywhere else such a
    token is refused: without IAM in front, anyone could write one.
    """

    def __init__(self, audiences: frozenset[str], certs_url: str = GOOGLE_CERTS_URL,
                 fetch: Callable[[str], dict] = fetch_json, clock: Callable[[], float] = time.time,
                 trust_cloud_run_iam: bool = False):
        self.audiences = audiences
        self.trust_cloud_run_iam = trust_cloud_run_iam
        self.certs_url = certs_url
        self._fetch = fetch
        self._clock = clock
        self._certs: dict | None = None
        self._fetched_at = 0.0
        self._lock = threading.Lock()

    def verify(self, token: str) -> Mapping[str, object]:
        if not self.audiences:
            raise AuthenticationError("no ID-token audience is configured")
        if token.rsplit(".", 1)[-1] == CLOUD_RUN_STRIPPED_SIGNATURE:
            return self._claims_verified_by_cloud_run(token)
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

    def _claims_verified_by_cloud_run(self, token: str) -> Mapping[str, object]:
        if not self.trust_cloud_run_iam:
            raise AuthenticationError("ID token without signature, and Cloud Run IAM is not trusted here")
        try:
            claims = jwt.decode(token, verify=False)
        except (ValueError, auth_exceptions.GoogleAuthError) as exc:
            raise AuthenticationError(f"invalid ID token: {exc}") from None
        audience = claims.get("aud")
        if audience not in self.audiences:
            raise AuthenticationError("ID token audience is not one of ours")
        if claims.get("iss") not in GOOGLE_ISSUERS:
            raise AuthenticationError("ID token not issued by Google")
        expiry = claims.get("exp")
        if not isinstance(expiry, (int, float)) or expiry < self._clock() - 60:
            raise AuthenticationError("ID token expired")
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
