"""Gmail credentials from settings: keyless domain-wide delegation, an authorized-user token, or ADC.

* **Keyless domain-wide delegation** (Google Workspace; `delegated_user` set, no credentials
  JSON/file): the function's own service account signs the delegation JWT through the IAM
  Credentials API `signJwt` (Google-managed key; the account needs
  roles/iam.serviceAccountTokenCreator on itself, which holds iam.serviceAccounts.signJwt), and
  the signed JWT is exchanged at Google's OAuth token endpoint for an access token of the
  delegated mailbox. No key exists anywhere; the account's client ID must be authorised for the
  Gmail scopes in the Admin console (infra/README.md).
* **Authorized-user token** (one mailbox, e.g. a consumer account): the refresh token JSON from
  Secret Manager (SAFESEND_GMAIL_CREDENTIALS_JSON) or a file.
* A service-account key JSON still works for a local run with a file, never in a deployment
  (infra/ mounts no such secret).

Scopes: the narrowest that the code needs, GMAIL_SCOPES = gmail.send (users.messages.send) +
gmail.readonly (users.messages.list with q=rfc822msgid:..., which gmail.metadata refuses, and
users.messages.get for labels and the stored Message-ID). The delegation JWT asks for exactly
these, so the Admin console entry must list exactly these.
"""

from __future__ import annotations

import datetime
import json
import time
import urllib.parse
from collections.abc import Sequence
from typing import Any

import google.auth
from google.auth import credentials as auth_credentials
from google.auth.credentials import Credentials
from google.auth.exceptions import RefreshError
from google.oauth2 import credentials as user_credentials
from google.oauth2 import service_account

from ..errors import ConfigurationError
from .gmail_mailer import GMAIL_SCOPES

# Google's endpoints (iamcredentials v1 projects.serviceAccounts.signJwt; the OAuth 2.0 token
# endpoint with the JWT bearer grant of RFC 7523). Overridable for tests only.
IAM_SIGN_JWT_URL = "https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/{email}:signJwt"
OAUTH_TOKEN_URI = "https://oauth2.googleapis.com/token"  # noqa: S105 - an endpoint, not a secret
JWT_BEARER_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"
# What the function's own (source) credentials need: calling IAM Credentials. The IAM scope is
# narrower than cloud-platform and is what google-auth's IAM signer asks for.
IAM_SCOPE = "https://www.googleapis.com/auth/iam"
DELEGATION_LIFETIME_S = 3600  # the maximum Google's token endpoint grants for a JWT bearer assertion


def load_gmail_credentials(
    credentials_json: str | None,
    credentials_file: str | None,
    delegated_user: str | None,
    *,
    signer_email: str | None = None,
    source_credentials: Credentials | None = None,
    iam_sign_jwt_url: str = IAM_SIGN_JWT_URL,
    token_uri: str = OAUTH_TOKEN_URI,
) -> Credentials:
    """JSON (Secret Manager env) wins over a file; neither means Application Default Credentials,
    which with `delegated_user` is keyless domain-wide delegation signed by the ADC account
    (`signer_email` to name another account the ADC identity may sign for)."""
    info = None
    if credentials_json:
        info = _parse(credentials_json, "SAFESEND_GMAIL_CREDENTIALS_JSON")
    elif credentials_file:
        try:
            with open(credentials_file, encoding="utf-8") as handle:
                info = _parse(handle.read(), credentials_file)
        except OSError as exc:
            raise ConfigurationError(f"cannot read Gmail credentials file: {exc}") from None
    scopes = list(GMAIL_SCOPES)
    if info is None:
        if delegated_user:
            if source_credentials is None:
                source_credentials, _ = google.auth.default(scopes=[IAM_SCOPE])
            return KeylessDelegatedCredentials(
                source_credentials,
                delegated_user,
                scopes,
                signer_email=signer_email,
                iam_sign_jwt_url=iam_sign_jwt_url,
                token_uri=token_uri,
            )
        creds, _ = google.auth.default(scopes=scopes)
        return creds
    kind = info.get("type")
    if kind == "authorized_user":
        if delegated_user:
            raise ConfigurationError(
                "SAFESEND_GMAIL_DELEGATED_USER is set, but the Gmail credential is one "
                "mailbox's OAuth token: use keyless delegation (no credential) or the token "
                "(no delegated user), not both"
            )
        token: Credentials = user_credentials.Credentials.from_authorized_user_info(info, scopes=scopes)
        return token
    if kind == "service_account":
        key: service_account.Credentials = service_account.Credentials.from_service_account_info(info, scopes=scopes)
        return key.with_subject(delegated_user) if delegated_user else key
    raise ConfigurationError(
        f"Gmail credentials of type {kind!r} are not supported "
        "(use authorized_user, or keyless delegation with SAFESEND_GMAIL_DELEGATED_USER)"
    )


class KeylessDelegatedCredentials(auth_credentials.Credentials):
    """Access tokens for `subject`'s mailbox by domain-wide delegation, with no key: the signer
    account's Google-managed key signs the JWT (IAM Credentials signJwt), the OAuth token endpoint
    exchanges it (JWT bearer grant). `source` are the credentials of the caller (on Cloud Run the
    function's own account, from the metadata server); the signer defaults to that account.

    One refresh is three requests on the given transport: the source's own token if stale, the
    signJwt call, the token exchange. Every failure is a RefreshError naming the step and the
    answer's status or OAuth error code (never a token or the signed JWT)."""

    def __init__(
        self,
        source: Credentials,
        subject: str,
        scopes: Sequence[str],
        *,
        signer_email: str | None = None,
        iam_sign_jwt_url: str = IAM_SIGN_JWT_URL,
        token_uri: str = OAUTH_TOKEN_URI,
        lifetime_s: int = DELEGATION_LIFETIME_S,
    ):
        # google.auth's base __init__ is unannotated, and mypy's untyped_calls_exclude misses super() calls.
        super().__init__()  # type: ignore[no-untyped-call]
        if not subject or "@" not in subject:
            raise ConfigurationError("SAFESEND_GMAIL_DELEGATED_USER must be a mailbox address")
        self._source = source
        self._subject = subject
        self._scopes = tuple(scopes)
        self._signer_email = signer_email
        self._iam_sign_jwt_url = iam_sign_jwt_url
        self._token_uri = token_uri
        self._lifetime_s = lifetime_s

    @property
    def subject(self) -> str:
        return self._subject

    @property
    def scopes(self) -> tuple[str, ...]:
        return self._scopes

    @property
    def signer_email(self) -> str | None:
        """The account that signs (known after the first refresh when taken from the source)."""
        return self._signer_email or _own_email(self._source)

    @property
    def requires_scopes(self) -> bool:
        return False

    def refresh(self, request: Any) -> None:
        if not self._source.valid:
            self._source.refresh(request)  # on Cloud Run: the metadata server, which also tells the email
        universe = getattr(self._source, "universe_domain", auth_credentials.DEFAULT_UNIVERSE_DOMAIN)
        if universe != auth_credentials.DEFAULT_UNIVERSE_DOMAIN:
            raise RefreshError(f"domain-wide delegation is not available in universe {universe!r}")
        signer = self.signer_email
        if not signer:
            raise RefreshError(
                "keyless delegation: cannot tell which service account signs (the runtime "
                "credentials have no service account email)"
            )
        now = int(time.time())
        claims = {
            "iss": signer,
            "sub": self._subject,
            "scope": " ".join(self._scopes),
            "aud": self._token_uri,
            "iat": now,
            "exp": now + self._lifetime_s,
        }
        signed_jwt = self._sign_jwt(request, signer, claims)
        self.token, self.expiry = self._exchange(request, signed_jwt, now)

    def _sign_jwt(self, request: Any, signer: str, claims: dict[str, Any]) -> str:
        headers = {"Content-Type": "application/json"}
        self._source.apply(headers)
        body = json.dumps({"payload": json.dumps(claims, separators=(",", ":"))}).encode()
        url = self._iam_sign_jwt_url.format(email=urllib.parse.quote(signer, safe="@"))
        response = _call("IAM signJwt", request, url, body, headers)
        if response.status != 200:
            raise RefreshError(
                f"IAM signJwt as {signer} answered HTTP {response.status}"
                f"{_iam_status(response.data)} (does it hold roles/iam.serviceAccountTokenCreator "
                "on itself?)",
                retryable=response.status in (429, 500, 502, 503, 504),
            )
        try:
            signed = json.loads(response.data)["signedJwt"]
        except (ValueError, KeyError, TypeError):
            raise RefreshError("IAM signJwt answered without a signedJwt") from None
        if not isinstance(signed, str) or signed.count(".") != 2:
            raise RefreshError("IAM signJwt answered something that is not a JWT")
        return signed

    def _exchange(self, request: Any, signed_jwt: str, now: int) -> tuple[str, datetime.datetime]:
        body = urllib.parse.urlencode({"grant_type": JWT_BEARER_GRANT, "assertion": signed_jwt}).encode()
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        response = _call("token exchange", request, self._token_uri, body, headers)
        if response.status != 200:
            code = _oauth_error(response.data)
            hint = (
                " (authorise the signer's client ID for exactly the Gmail scopes in the Admin console)"
                if code in ("unauthorized_client", "access_denied")
                else ""
            )
            raise RefreshError(
                f"delegation token exchange answered HTTP {response.status}" + (f": {code}" if code else "") + hint,
                {"error": code} if code else {},
                retryable=response.status in (429, 500, 502, 503, 504),
            )
        try:
            answer = json.loads(response.data)
            token = answer["access_token"]
            lifetime = int(answer.get("expires_in", self._lifetime_s))
        except (ValueError, KeyError, TypeError):
            raise RefreshError("delegation token exchange answered without an access_token") from None
        expiry = datetime.datetime.fromtimestamp(now + lifetime, datetime.UTC).replace(tzinfo=None)
        return token, expiry


def _own_email(source: Credentials) -> str | None:
    email = getattr(source, "service_account_email", None)
    return email if isinstance(email, str) and "@" in email else None  # GCE says "default" until refreshed


def _call(step: str, request: Any, url: str, body: bytes, headers: dict[str, str]) -> Any:
    try:
        return request(url=url, method="POST", body=body, headers=headers)
    except RefreshError as exc:  # a transport that turns error answers into RefreshError (GmailMailer's)
        raise RefreshError(
            f"{step}: {exc.args[0] if exc.args else exc}", *exc.args[1:], retryable=getattr(exc, "retryable", False)
        ) from exc


def _iam_status(data: Any) -> str:
    try:
        status = json.loads(data)["error"]["status"]
    except (ValueError, KeyError, TypeError):
        return ""
    return f" {status}" if isinstance(status, str) and status.isupper() and len(status) < 40 else ""


def _oauth_error(data: Any) -> str | None:
    try:
        code = json.loads(data).get("error")
    except (ValueError, TypeError, AttributeError):
        return None
    return code if isinstance(code, str) and code.replace("_", "").isalpha() and len(code) <= 40 else None


def _parse(text: str, source: str) -> dict[str, Any]:
    try:
        info = json.loads(text)
    except json.JSONDecodeError:
        raise ConfigurationError(f"{source} is not valid JSON") from None
    if not isinstance(info, dict):
        raise ConfigurationError(f"{source} must hold a JSON object")
    return info
