"""Gmail credentials from settings: an authorized-user token, a service account (with delegation), or ADC."""

from __future__ import annotations

import json

import google.auth
from google.auth.credentials import Credentials
from google.oauth2 import credentials as user_credentials
from google.oauth2 import service_account

from ..errors import ConfigurationError
from .gmail_mailer import GMAIL_SCOPES


def load_gmail_credentials(credentials_json: str | None, credentials_file: str | None,
                           delegated_user: str | None) -> Credentials:
    """JSON (Secret Manager env) wins over a file; neither means Application Default Credentials."""
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
        creds, _ = google.auth.default(scopes=scopes)
        if delegated_user and hasattr(creds, "with_subject"):
            creds = creds.with_subject(delegated_user)
        return creds
    kind = info.get("type")
    if kind == "authorized_user":
        return user_credentials.Credentials.from_authorized_user_info(info, scopes=scopes)
    if kind == "service_account":
        creds = service_account.Credentials.from_service_account_info(info, scopes=scopes)
        return creds.with_subject(delegated_user) if delegated_user else creds
    raise ConfigurationError(f"Gmail credentials of type {kind!r} are not supported "
                             "(use authorized_user or service_account)")


def _parse(text: str, source: str) -> dict:
    try:
        info = json.loads(text)
    except json.JSONDecodeError:
        raise ConfigurationError(f"{source} is not valid JSON") from None
    if not isinstance(info, dict):
        raise ConfigurationError(f"{source} must hold a JSON object")
    return info
