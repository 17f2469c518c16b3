"""A Microsoft 365 sender mailbox's settings (kind = "graph" in the mailbox configuration). Pure.

Why its own module: mailboxes.py parses the pool model for every provider; what a Graph mailbox needs
(the Entra app registration and its credential) is one job of its own:

    [mailboxes.m365]
    kind = "graph"
    address = "shop@contoso.com"
    tenant_id = "00000000-0000-0000-0000-000000000000"
    client_id = "11111111-1111-1111-1111-111111111111"
    federated = true                       # the function's Google identity (no secret), or:
    # certificate_secret = "graph-cert-m365"  # Secret Manager: {"private_key": PEM, "thumbprint": hex}
    # limits unset: Exchange Online's (EXCHANGE_ONLINE_LIMITS)

`api_endpoint` and `login_endpoint` point at a local simulator (devstack/graph_sim.py) only; an
`api_endpoint` without a `login_endpoint` is a simulator that asks for no token (as a Gmail simulator).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .errors import ConfigurationError

KINDS = ("gmail", "graph")
GRAPH_KEYS = frozenset(
    {"kind", "tenant_id", "client_id", "federated", "certificate_secret", "api_endpoint", "login_endpoint"}
)
_GUIDISH = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]{0,99}$")  # a GUID, or a tenant's domain name
_SECRET_NAME = re.compile(r"^[A-Za-z0-9_-]{1,255}$")  # Secret Manager's secret id


@dataclass(frozen=True)
class GraphSettings:
    tenant_id: str
    client_id: str
    federated: bool
    certificate_secret: str | None = None
    api_endpoint: str | None = None
    login_endpoint: str | None = None


def mailbox_kind(values: Mapping[str, Any], where: str) -> str:
    kind = values.get("kind", "gmail")
    if kind not in KINDS:
        raise ConfigurationError(f"{where}: kind must be one of {list(KINDS)}, got {kind!r}")
    return str(kind)


def graph_settings(values: Mapping[str, Any], where: str) -> GraphSettings:
    """The Graph settings of a `kind = "graph"` mailbox; ConfigurationError names the fault."""
    gmail_only = sorted({"delegated_user", "token_secret"} & set(values))
    if gmail_only:
        raise ConfigurationError(f"{where}: {gmail_only} are Gmail settings, not for kind = graph")
    tenant, client = values.get("tenant_id"), values.get("client_id")
    for name, value in (("tenant_id", tenant), ("client_id", client)):
        if not isinstance(value, str) or not _GUIDISH.match(value):
            raise ConfigurationError(f"{where}: {name} is required (the Entra app registration's)")
    federated, secret = values.get("federated", False), values.get("certificate_secret")
    if not isinstance(federated, bool):
        raise ConfigurationError(f"{where}: federated must be true or false")
    if federated == bool(secret):
        raise ConfigurationError(f"{where}: set exactly one of federated = true and certificate_secret")
    if secret is not None and (not isinstance(secret, str) or not _SECRET_NAME.match(secret)):
        raise ConfigurationError(f"{where}: certificate_secret must be a Secret Manager secret id")
    return GraphSettings(
        tenant_id=str(tenant),
        client_id=str(client),
        federated=federated,
        certificate_secret=secret,
        api_endpoint=_endpoint(values.get("api_endpoint"), f"{where}.api_endpoint"),
        login_endpoint=_endpoint(values.get("login_endpoint"), f"{where}.login_endpoint"),
    )


def _endpoint(value: Any, where: str) -> str | None:
    if value is None:
        return None
    parts = urlsplit(str(value))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigurationError(f"{where}: an http(s) URL")
    return str(value).rstrip("/")
