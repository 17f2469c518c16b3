"""One secret's latest value from Secret Manager (REST `versions/latest:access`), for the OAuth token
of a sender mailbox configured with `token_secret` (issue 24).

Why read it at run time instead of mounting it as an environment variable like the settings' own
token (SAFESEND_GMAIL_CREDENTIALS_JSON): the mailboxes come from one JSON setting and their number
changes with the configuration, so each token is read by name, once per instance, on the mailbox's
first Gmail call. The runtime account holds roles/secretmanager.secretAccessor on exactly these
secrets (infra/modules/safesend/mailboxes.tf). The value is never logged.
"""

from __future__ import annotations

import base64
import binascii
import json

from ..core.errors import ConfigurationError
from .access_tokens import AccessTokenError, AccessTokens, ApplicationDefaultTokens, default_tokens
from .one_shot_http import OneShotHttp, TransportError

SECRET_MANAGER_URL = "https://secretmanager.googleapis.com"  # noqa: S105 - an endpoint, not a secret
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
TIMEOUT_S = 10.0


def read_secret(
    project: str,
    secret_id: str,
    *,
    tokens: AccessTokens | None = None,
    base_url: str = SECRET_MANAGER_URL,
    timeout_s: float = TIMEOUT_S,
) -> str:
    """The latest version's text of `secret_id` in `project`. ConfigurationError names the secret
    (never its value) when it cannot be read: the mailbox's calls then fail as a credential would."""
    if tokens is None:
        tokens = default_tokens(emulator=False)
        if isinstance(tokens, ApplicationDefaultTokens):
            tokens = ApplicationDefaultTokens(scopes=(CLOUD_PLATFORM_SCOPE,))
    name = secret_id if secret_id.startswith("projects/") else f"projects/{project}/secrets/{secret_id}"
    url = f"{base_url.rstrip('/')}/v1/{name}/versions/latest:access"
    try:
        response, body = OneShotHttp(timeout=timeout_s).request(
            url, "GET", headers={"Authorization": tokens.authorization()}
        )
    except (TransportError, AccessTokenError) as exc:
        raise ConfigurationError(f"secret {secret_id}: cannot be read ({exc})") from exc
    if int(response.status) != 200:
        raise ConfigurationError(f"secret {secret_id}: Secret Manager answered {response.status}")
    try:
        data = json.loads(body)["payload"]["data"]
        return base64.b64decode(data, validate=True).decode("utf-8")
    except (ValueError, KeyError, TypeError, binascii.Error, RecursionError) as exc:
        raise ConfigurationError(
            f"secret {secret_id}: not the documented access answer ({type(exc).__name__})"
        ) from None
