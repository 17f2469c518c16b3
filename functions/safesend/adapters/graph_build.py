"""A configured Microsoft 365 mailbox's GraphMailer: its token source from its credential, built once.

Why here: runtime.py wires the service; turning a `kind = "graph"` mailbox (graph_mailbox.py) into a
mailer (a federated Google ID token, or a certificate read from Secret Manager, handed to MSAL) is
one job of its own, and it imports nothing Gmail needs.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from ..core.errors import ConfigurationError
from ..core.graph_hosts import token_scope
from .graph_auth import (
    BoundedLoginHttp,
    GoogleIdTokenAssertion,
    GraphTokens,
    certificate_credential,
    federated_credential,
)
from .graph_mailer import GRAPH_ENDPOINT, GraphMailer

if TYPE_CHECKING:
    from ..config import Settings
    from ..core.mailboxes import Mailbox


def build_graph_mailer(settings: Settings, mailbox: Mailbox) -> GraphMailer:
    """The mailbox's mailer; ConfigurationError if it is no Graph mailbox or its certificate is unusable."""
    graph = mailbox.graph
    if mailbox.kind != "graph" or graph is None:
        raise ConfigurationError(f"mailbox {mailbox.id} is not a Graph mailbox")
    if graph.api_endpoint and not graph.login_endpoint:  # a local simulator that asks for no token
        return GraphMailer(
            mailbox.user_id,
            None,
            api_endpoint=graph.api_endpoint,
            send_timeout_s=settings.send_timeout_s,
            read_timeout_s=settings.read_timeout_s,
        )
    if graph.federated:
        credential = federated_credential(GoogleIdTokenAssertion())
    else:
        from .secret_manager import read_secret

        assert graph.certificate_secret is not None  # noqa: S101 - graph_settings requires one of the two
        try:
            stored = json.loads(read_secret(settings.project, graph.certificate_secret))
            credential = certificate_credential(str(stored["private_key"]), str(stored["thumbprint"]))
        except (ValueError, KeyError, TypeError):
            raise ConfigurationError(
                f"mailbox {mailbox.id}: secret {graph.certificate_secret} is not "
                '{"private_key": PEM, "thumbprint": hex}'
            ) from None  # never chain: the parser's message could quote the secret
    http = BoundedLoginHttp(settings.send_timeout_s, graph.login_endpoint)
    return GraphMailer(
        mailbox.user_id,
        GraphTokens(graph.tenant_id, graph.client_id, credential, http, token_scope(graph.api_endpoint)),
        api_endpoint=graph.api_endpoint or GRAPH_ENDPOINT,
        send_timeout_s=settings.send_timeout_s,
        read_timeout_s=settings.read_timeout_s,
    )
