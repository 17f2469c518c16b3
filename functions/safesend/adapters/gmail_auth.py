"""Gmail credentials from settings: keyless domain-wide delegation, an authorized-user token, or ADC.

* **Keyless domain-wide delegation** (Google Workspace; `delegated_user` set, no credentials
  JSON/file): google-auth's impersonated credentials with `subject`. The function's own service
  account signs the delegation JWT through the IAM Credentials API `signJwt` (Google-managed key;
  the account needs roles/iam.serviceAccountTokenCreator on itself, which holds
  iam.serviceAccounts.signJwt), and the signed JWT is exchanged at Google's OAuth token endpoint
  for an access token of the delegated mailbox. No key exists anywhere; the account's client ID
  must be authorised for the Gmail scopes in the Admin console (infra/README.md).
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

import json
from collections.abc import Mapping, Sequence
from typing import Any

import google.auth
from google.auth import credentials as auth_credentials
from google.auth import iam, impersonated_credentials
from google.auth.credentials import Credentials
from google.auth.exceptions import RefreshError
from google.oauth2 import credentials as user_credentials
from google.oauth2 import service_account

from ..core.errors import ConfigurationError
from .gmail_mailer import GMAIL_SCOPES

# Google's endpoints as google-auth calls them (iamcredentials v1 signJwt; the OAuth 2.0 token
# endpoint with the JWT bearer grant of RFC 7523).
IAM_SIGN_JWT_URL = iam._IAM_SIGNJWT_ENDPOINT  # noqa: SLF001 - "...serviceAccounts/{}:signJwt"
OAUTH_TOKEN_URI = impersonated_credentials._GOOGLE_OAUTH2_TOKEN_ENDPOINT  # noqa: SLF001
# What the function's own (source) credentials need: calling IAM Credentials. The IAM scope is
# narrower than cloud-platform and is what google-auth's IAM signer asks for.
IAM_SCOPE = "https://www.googleapis.com/auth/iam"
RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})


def load_gmail_credentials(
    credentials_json: str | None,
    credentials_file: str | None,
    delegated_user: str | None,
    *,
    signer_email: str | None = None,
    source_credentials: Credentials | None = None,
    redirect: Mapping[str, str] | None = None,
) -> Credentials:
    """JSON (Secret Manager env) wins over a file; neither means Application Default Credentials,
    which with `delegated_user` is keyless domain-wide delegation signed by the ADC account
    (`signer_email` to name another account the ADC identity may sign for). `redirect` (tests
    only) sends Google's URL prefixes elsewhere, e.g. to a loopback fake."""
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
            return DelegatedCredentials(
                source_credentials, delegated_user, scopes, signer_email=signer_email, redirect=redirect
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


class DelegatedCredentials(impersonated_credentials.Credentials):
    """Access tokens for `subject`'s mailbox by keyless domain-wide delegation: google-auth's
    impersonated credentials with `subject` (signJwt as the signer, then the JWT-bearer exchange).
    `source` are the caller's credentials (on Cloud Run the function's own account, from the
    metadata server); the signer defaults to that account, which the metadata server names only
    once the source has a token, so it is learnt at the first refresh.

    What this adds to google-auth: every request of a refresh gets one try (an error answer is a
    RefreshError at once, retryable for 429/5xx), so google-auth never sleeps between retries of
    the token exchange inside a send's deadline; and each failure names its step and a hint (never
    a token or the signed JWT)."""

    def __init__(
        self,
        source: Credentials,
        subject: str,
        scopes: Sequence[str],
        *,
        signer_email: str | None = None,
        redirect: Mapping[str, str] | None = None,
    ):
        if not subject or "@" not in subject:
            raise ConfigurationError("SAFESEND_GMAIL_DELEGATED_USER must be a mailbox address")
        # google-auth's __init__ and refresh are unannotated (mypy's untyped_calls_exclude misses super()).
        super().__init__(  # type: ignore[no-untyped-call]
            source, target_principal=signer_email or "", target_scopes=list(scopes), subject=subject
        )
        self._redirect = dict(redirect or {})

    @property
    def subject(self) -> str:
        return str(self._subject)

    @property
    def scopes(self) -> tuple[str, ...]:
        return tuple(self._target_scopes)

    @property
    def signer_email(self) -> str | None:
        """The account that signs (known after the first refresh when taken from the source)."""
        return str(self._target_principal) or None

    def refresh(self, request: Any) -> None:
        universe = getattr(self._source_credentials, "universe_domain", auth_credentials.DEFAULT_UNIVERSE_DOMAIN)
        if universe != auth_credentials.DEFAULT_UNIVERSE_DOMAIN:
            raise RefreshError(f"domain-wide delegation is not available in universe {universe!r}")
        steps = _OneTryPerStep(request, self._redirect)
        try:
            if not self._target_principal:
                if not self._source_credentials.valid:
                    self._source_credentials.refresh(steps)  # the metadata server, which also tells the email
                self._target_principal = _own_email(self._source_credentials) or ""
            if not self._target_principal:
                raise RefreshError(
                    "keyless delegation: cannot tell which service account signs (the runtime "
                    "credentials have no service account email)"
                )
            super().refresh(steps)  # type: ignore[no-untyped-call]
        except RefreshError as exc:
            raise steps.explain(exc, self._target_principal) from exc


class _OneTryPerStep:
    """The transport of one refresh: each request once, an error answer a RefreshError at once
    (google-auth would retry the exchange after sleeping), and the step that failed remembered."""

    def __init__(self, request: Any, redirect: Mapping[str, str]):
        self._request = request
        self._redirect = redirect
        self.step = "source credentials"

    def __call__(self, url: str, method: str = "GET", body: Any = None, headers: Any = None, **kwargs: Any) -> Any:
        self.step = (
            "IAM signJwt" if url.endswith(":signJwt") else "token exchange" if url == OAUTH_TOKEN_URI else self.step
        )
        for prefix, target in self._redirect.items():
            if url.startswith(prefix):
                url = target + url[len(prefix) :]
        response = self._request(url=url, method=method, body=body, headers=headers, **kwargs)
        if self.step == "IAM signJwt" and response.status == 200 and not _is_jwt(_signed_jwt(response.data)):
            raise RefreshError("IAM signJwt answered something that is not a JWT")
        if response.status >= 400:
            detail = _iam_status(response.data) if self.step == "IAM signJwt" else _oauth_error(response.data)
            raise RefreshError(
                f"answered HTTP {response.status}" + (f" {detail}" if detail else ""),
                {"error": detail} if detail and self.step == "token exchange" else {},
                retryable=response.status in RETRYABLE_STATUSES,
            )
        return response

    def explain(self, exc: RefreshError, signer: str) -> RefreshError:
        """The error with its step and what to check; the retryable flag kept."""
        text = str(exc.args[0]) if exc.args else str(exc)
        hint = ""
        if self.step == "IAM signJwt":
            hint = f" (as {signer}: does it hold roles/iam.serviceAccountTokenCreator on itself?)"
        elif self.step == "token exchange" and ("unauthorized_client" in text or "access_denied" in text):
            hint = " (authorise the signer's client ID for exactly the Gmail scopes in the Admin console)"
        prefix = "delegation token exchange" if self.step == "token exchange" else self.step
        return RefreshError(f"{prefix}: {text}{hint}", *exc.args[1:], retryable=getattr(exc, "retryable", False))


def _own_email(source: Credentials) -> str | None:
    email = getattr(source, "service_account_email", None)
    return email if isinstance(email, str) and "@" in email else None  # GCE says "default" until refreshed


def _signed_jwt(data: Any) -> Any:
    try:
        return json.loads(data)["signedJwt"]
    except (ValueError, KeyError, TypeError, RecursionError):
        return None


def _is_jwt(value: Any) -> bool:
    return isinstance(value, str) and value.count(".") == 2


def _iam_status(data: Any) -> str:
    try:
        status = json.loads(data)["error"]["status"]
    except (ValueError, KeyError, TypeError, RecursionError):
        return ""
    return status if isinstance(status, str) and status.isupper() and len(status) < 40 else ""


def _oauth_error(data: Any) -> str:
    try:
        code = json.loads(data).get("error")
    except (ValueError, TypeError, AttributeError, RecursionError):
        return ""
    return code if isinstance(code, str) and code.replace("_", "").isalpha() and len(code) <= 40 else ""


def _parse(text: str, source: str) -> dict[str, Any]:
    try:
        info = json.loads(text)
    except json.JSONDecodeError:
        raise ConfigurationError(f"{source} is not valid JSON") from None
    if not isinstance(info, dict):
        raise ConfigurationError(f"{source} must hold a JSON object")
    return info
