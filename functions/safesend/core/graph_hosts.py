"""Which Graph endpoints a deployed function may use: Microsoft's own hosts only. Pure.

Why: a Graph mailbox's `api_endpoint` / `login_endpoint` exist for the local simulator, and an
`api_endpoint` without a `login_endpoint` sends with no token at all. On Cloud Run / Cloud Functions
either would hand every message (or the app's client assertion) to another host, so start-up refuses
them there, as it refuses the other local-only switches (config.refuse_local_only_on_cloud).

Hosts: learn.microsoft.com/graph/deployments (the global service and the national clouds: US
Government L4 and L5 (DOD), China operated by 21Vianet), checked 2026-12-01.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from .errors import ConfigurationError
from .graph_mailbox import GraphSettings

GRAPH_HOSTS = frozenset(
    {"graph.microsoft.com", "graph.microsoft.us", "dod-graph.microsoft.us", "microsoftgraph.chinacloudapi.cn"}
)
LOGIN_HOSTS = frozenset({"login.microsoftonline.com", "login.microsoftonline.us", "login.chinacloudapi.cn"})


GLOBAL_GRAPH_SCOPE = "https://graph.microsoft.com/.default"


def token_scope(api_endpoint: str | None) -> str:
    """The app-only token's scope for the Graph host the mailer calls: a national cloud's token is
    for its own Graph host (graph.microsoft.us, dod-graph.microsoft.us, microsoftgraph.chinacloudapi.cn),
    and a global-service token is refused there. Anything else (no endpoint, a local simulator) asks
    for the global service's scope."""
    host = urlsplit(api_endpoint).hostname if api_endpoint else None
    if host in GRAPH_HOSTS:
        return f"https://{host}/.default"
    return GLOBAL_GRAPH_SCOPE


def cloud_endpoint_problems(mailbox_id: str, graph: GraphSettings) -> list[str]:
    """What a deployed function must not run with, for one Graph mailbox (empty: fine)."""
    problems = []
    if graph.api_endpoint and not graph.login_endpoint:
        problems.append(f"mailboxes.{mailbox_id}: api_endpoint without login_endpoint sends with no token")
    for name, url, hosts in (
        ("api_endpoint", graph.api_endpoint, GRAPH_HOSTS),
        ("login_endpoint", graph.login_endpoint, LOGIN_HOSTS),
    ):
        if url is None:
            continue
        parts = urlsplit(url)
        if parts.scheme != "https" or parts.hostname not in hosts or parts.port not in (None, 443):
            problems.append(f"mailboxes.{mailbox_id}.{name}: {parts.hostname!r} is not a Microsoft host")
    return problems


def refuse_non_microsoft_endpoints(mailboxes: Iterable[tuple[str, GraphSettings | None]]) -> None:
    """Start-up gate on Cloud: ConfigurationError naming every Graph mailbox at fault."""
    problems = [
        p for mailbox_id, graph in mailboxes if graph is not None for p in cloud_endpoint_problems(mailbox_id, graph)
    ]
    if problems:
        raise ConfigurationError("; ".join(problems) + ": local stacks only, refused on Cloud Run / Cloud Functions")
