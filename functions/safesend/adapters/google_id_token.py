"""Verification of Google-signed ID tokens (OIDC) against Google's public certificates.

Certificates are fetched lazily and cached for an hour (Google rotates them daily, with
overlap). The certificate URL is configurable so tests can serve their own keys.

A token is a credential and attacker input at once: it is parsed here, strictly, before any
library sees it; every claim is type-checked before use (a list `aud` or `exp: Infinity` must be
a 401, not a 500 or a pass); and refusals carry fixed texts only, because library error messages
quote the token (its segments, decoded header, audience) and would end up in logs and responses.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from ..core.auth import CLOUD_RUN_STRIPPED_SIGNATURE, AuthenticationError
from ..core.jwt_parts import MalformedTokenError, json_object, numeric_date
from ..logs import log

GOOGLE_CERTS_URL = "https://www.googleapis.com/oauth2/v1/certs"
# Behind Cloud Run IAM the token reaching the container has its signature replaced by
# CLOUD_RUN_STRIPPED_SIGNATURE (auth.py: the authenticator checks which header carried it).
GOOGLE_ISSUERS = frozenset({"https://accounts.google.com", "accounts.google.com"})
GOOGLE_ALGORITHM = "RS256"  # the only one Google signs ID tokens with; anything else is a forgery attempt
CERTS_TTL_S = 3600.0
# Google ID tokens live one hour: an expiry further out than this is mangled or forged.
MAX_EXPIRY_AHEAD_S = 2 * 3600.0
# Cloud Run checked the stripped token at ingress, on its own clock: allow that much skew.
CLOUD_RUN_SKEW_S = 60.0
MAX_TOKEN_CHARS = 16_384  # real ID tokens are ~1 kB; do not parse megabytes of header


class CertificatesUnavailableError(AuthenticationError):
    """Google's certificates could not be fetched, so no signed token can be checked (HTTP 401)."""


def fetch_json(url: str, timeout_s: float = 5.0) -> object:
    """The JSON document at `url`, whatever its shape (the caller checks it)."""
    with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 - https URL from config
        document: object = json.loads(response.read())
        return document


def refused(reason: str) -> AuthenticationError:
    """A refusal with a fixed, token-free text (`reason` is always a literal here)."""
    return AuthenticationError(f"invalid ID token: {reason}")


def decode_unverified(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Header and claims of a compact JWT, parsed strictly (JSON objects, no NaN/Infinity)."""
    parts = token.split(".")
    if len(parts) != 3 or len(token) > MAX_TOKEN_CHARS:
        raise refused("malformed")
    try:
        return json_object(parts[0]), json_object(parts[1])
    except MalformedTokenError:
        raise refused("malformed") from None


class GoogleIdTokenVerifier:
    """Checks signature, audience, issuer and expiry of a Google ID token.

    `trust_cloud_run_iam`: set only where Cloud Run IAM admits nobody without a verified token
    (the Terraform deployment: no allUsers). Then a token whose signature Cloud Run stripped is
    accepted on its claims (audience, issuer, expiry still checked here). Anywhere else such a
    token is refused: without IAM in front, anyone could write one.
    """

    def __init__(
        self,
        audiences: frozenset[str],
        certs_url: str = GOOGLE_CERTS_URL,
        fetch: Callable[[str], object] = fetch_json,
        clock: Callable[[], float] = time.time,
        trust_cloud_run_iam: bool = False,
    ):
        self.audiences = audiences
        self.trust_cloud_run_iam = trust_cloud_run_iam
        self.certs_url = certs_url
        self._fetch = fetch
        self._clock = clock
        self._certs: dict[str, Any] | None = None
        self._fetched_at = 0.0
        self._lock = threading.Lock()

    def verify(self, token: str) -> Mapping[str, object]:
        """Claims of a valid token; AuthenticationError for anything else, never another exception."""
        try:
            return self._verify(token)
        except AuthenticationError:
            raise
        except Exception as exc:  # noqa: BLE001 - attacker input: a surprise is a refusal, not a 500
            log(logging.WARNING, "ID token check failed unexpectedly", error=type(exc).__name__)
            raise refused("unverifiable") from None

    def _verify(self, token: str) -> Mapping[str, object]:
        if not self.audiences:
            raise AuthenticationError("no ID-token audience is configured")
        if token.rsplit(".", 1)[-1] == CLOUD_RUN_STRIPPED_SIGNATURE:
            return self._claims_verified_by_cloud_run(token)
        header, claims = decode_unverified(token)
        if header.get("alg") != GOOGLE_ALGORITHM or not isinstance(header.get("kid"), str):
            raise refused("algorithm or key id")
        self._check_claims(claims, skew_s=0.0)  # before the library: it chokes on odd types
        certificate = self._certificate(header["kid"])
        from google.auth import jwt  # google.auth.crypt: imported by the first token checked

        try:
            jwt.decode(token, certs={header["kid"]: certificate}, audience=list(self.audiences))
        except Exception:  # noqa: BLE001 - its messages quote the token; every failure here is a bad signature
            raise refused("signature") from None
        return claims

    def _claims_verified_by_cloud_run(self, token: str) -> Mapping[str, object]:
        if not self.trust_cloud_run_iam:
            raise AuthenticationError("ID token without signature, and Cloud Run IAM is not trusted here")
        _, claims = decode_unverified(token)
        self._check_claims(claims, skew_s=CLOUD_RUN_SKEW_S)
        return claims

    def _check_claims(self, claims: Mapping[str, Any], skew_s: float) -> None:
        """Issuer, audience and validity period, each of the type the spec says (else 401)."""
        issuer, audience = claims.get("iss"), claims.get("aud")
        if not isinstance(issuer, str) or issuer not in GOOGLE_ISSUERS:
            raise refused("issuer")
        if not isinstance(audience, str) or audience not in self.audiences:
            raise refused("audience")
        self._check_times(numeric_date(claims.get("iat")), numeric_date(claims.get("exp")), skew_s)

    def _check_times(self, issued: float | None, expires: float | None, skew_s: float) -> None:
        if issued is None or expires is None:
            raise refused("malformed iat or exp")
        now = self._clock()
        if expires < now - skew_s:
            raise refused("expired")
        if expires > now + MAX_EXPIRY_AHEAD_S:
            raise refused("expiry too far ahead")
        if issued > now + skew_s:
            raise refused("issued in the future")

    def _certificate(self, kid: str) -> str | bytes:
        """The certificate for `kid`, refetching once if Google rotated a key in since our last fetch."""
        certificate = self._current_certs().get(kid)
        if certificate is None and self._refresh_if_stale():
            certificate = self._current_certs().get(kid)
        if not isinstance(certificate, (str, bytes)):
            raise refused("unknown signing key")
        return certificate

    def _refresh_if_stale(self, min_age_s: float = 60.0) -> bool:
        """Drop cached certificates older than `min_age_s` (bounded refetching on unknown kids)."""
        with self._lock:
            if self._clock() - self._fetched_at < min_age_s:
                return False
            self._certs = None
            return True

    def _current_certs(self) -> dict[str, Any]:
        with self._lock:
            if self._certs is None or self._clock() - self._fetched_at > CERTS_TTL_S:
                self._certs = self._fetch_certs()
                self._fetched_at = self._clock()
            return self._certs

    def _fetch_certs(self) -> dict[str, Any]:
        try:
            certs = self._fetch(self.certs_url)
        except Exception as exc:  # noqa: BLE001 - network, JSON or anything else: no certificates
            log(logging.ERROR, "cannot fetch Google certificates", error=type(exc).__name__)
            raise CertificatesUnavailableError("cannot fetch Google certificates") from None
        if not isinstance(certs, dict):
            raise CertificatesUnavailableError("cannot fetch Google certificates")
        return certs
