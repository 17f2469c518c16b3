"""build_graph_mailer's certificate path and an expired delta answered 400 (issue 22 phase 2): the
certificate of a `certificate_secret` mailbox is read from Secret Manager and handed to MSAL (the
simulator's token endpoint sees its thumbprint), a malformed secret stops start-up without quoting it,
and a delta checkpoint answered 400 `syncStateNotFound` is an expired checkpoint like a 410."""

from __future__ import annotations

import json
import time

import pytest

from devstack.graph_sim import GraphSimulator
from safesend.adapters import graph_build, secret_manager
from safesend.adapters.graph_auth import GraphAuthError
from safesend.adapters.graph_mailer import GraphMailer
from safesend.config import Settings
from safesend.core.errors import ConfigurationError, HistoryExpiredError
from safesend.core.mailboxes import MailboxDirectory
from safesend.core.model import Accepted
from tests.integration.graph_support import plain_mime, self_signed_certificate

USER = "certs@contoso.example"
CLIENT = "11111111-1111-1111-1111-111111111111"


def raw(message_id: str) -> bytes:
    return plain_mime(USER, message_id)


def certificate_mailbox(graph_sim: GraphSimulator):  # type: ignore[no-untyped-def]
    doc = {
        "mailboxes": {
            "certs": {
                "address": USER,
                "kind": "graph",
                "tenant_id": "tenant-1",
                "client_id": CLIENT,
                "certificate_secret": "graph-cert-certs",
                "api_endpoint": graph_sim.url,
                "login_endpoint": graph_sim.url,
            }
        }
    }
    return MailboxDirectory.from_mapping(doc).get("certs")


SETTINGS = Settings.from_env({"GOOGLE_CLOUD_PROJECT": "proj-1", "SAFESEND_AUTH_API_KEYS": ""})


def test_the_certificate_is_read_from_its_secret_and_signs_the_token_request(graph_sim, monkeypatch) -> None:
    graph_sim.configure(require_auth=True)
    pem, thumbprint = self_signed_certificate()
    reads: list[tuple[str, str]] = []

    def read_secret(project: str, secret_id: str) -> str:
        reads.append((project, secret_id))
        return json.dumps({"private_key": pem, "thumbprint": thumbprint})

    monkeypatch.setattr(secret_manager, "read_secret", read_secret)
    mailer = graph_build.build_graph_mailer(SETTINGS, certificate_mailbox(graph_sim))
    assert isinstance(mailer, GraphMailer)
    assert isinstance(mailer.send(raw("<cert-1@safesend.test>")), Accepted)
    assert reads == [("proj-1", "graph-cert-certs")]
    (assertion,) = graph_sim.assertions()
    assert assertion["claims"]["iss"] == CLIENT and assertion["claims"]["sub"] == CLIENT
    assert assertion["header"]["x5t"]  # MSAL names the certificate by its thumbprint


@pytest.mark.parametrize(
    "stored",
    ['{"private_key": "-----BEGIN PRIVATE KEY-----secret"}', "not json -----BEGIN PRIVATE KEY-----secret", "[1]"],
)
def test_a_malformed_certificate_secret_stops_start_up_without_quoting_it(graph_sim, monkeypatch, stored) -> None:
    monkeypatch.setattr(secret_manager, "read_secret", lambda project, secret_id: stored)
    with pytest.raises(ConfigurationError, match="secret graph-cert-certs is not") as caught:
        graph_build.build_graph_mailer(SETTINGS, certificate_mailbox(graph_sim))
    assert caught.value.__cause__ is None and "BEGIN PRIVATE KEY" not in str(caught.value)


def test_a_delta_checkpoint_answered_400_sync_state_not_found_is_expired(graph_sim) -> None:
    mailer = GraphMailer(
        USER, None, api_endpoint=graph_sim.url, send_timeout_s=3, read_timeout_s=3, sleep=lambda s: None
    )
    checkpoint = mailer.current_history_id()
    mailer.send(raw("<delta-1@safesend.test>"))
    assert len(mailer.added_since(checkpoint).messages) == 1
    graph_sim.configure(sync_state_ttl_s=1, expired_sync_state_status=400)
    graph_sim.advance_clock(2)
    with pytest.raises(HistoryExpiredError):
        mailer.added_since(checkpoint)


@pytest.mark.parametrize(
    ("api_host", "scope"),
    [
        ("graph.microsoft.us", "https://graph.microsoft.us/.default"),
        ("dod-graph.microsoft.us", "https://dod-graph.microsoft.us/.default"),
        ("microsoftgraph.chinacloudapi.cn", "https://microsoftgraph.chinacloudapi.cn/.default"),
    ],
)
def test_a_national_cloud_mailbox_asks_its_own_clouds_token_scope(graph_sim, monkeypatch, api_host, scope) -> None:
    """A national cloud refuses a global-service token: the mailer built for a mailbox on
    graph.microsoft.us (etc.) asks Entra for that host's `.default` scope. The simulator plays that
    cloud's token endpoint; the Graph host itself is never called here."""
    pem, thumbprint = self_signed_certificate()
    monkeypatch.setattr(
        secret_manager, "read_secret", lambda project, name: json.dumps({"private_key": pem, "thumbprint": thumbprint})
    )
    doc = {
        "mailboxes": {
            "gov": {
                "address": USER,
                "kind": "graph",
                "tenant_id": "tenant-1",
                "client_id": CLIENT,
                "certificate_secret": "graph-cert-gov",
                "api_endpoint": f"https://{api_host}",
                "login_endpoint": graph_sim.url,
            }
        }
    }
    mailer = graph_build.build_graph_mailer(SETTINGS, MailboxDirectory.from_mapping(doc).get("gov"))
    tokens = mailer._tokens  # the token source the mailer authorises its requests with
    assert tokens is not None
    graph_sim.token_scope = scope
    assert tokens.token(time.monotonic() + 5.0)
    graph_sim.token_scope = "https://graph.microsoft.com/.default"  # the global service refuses that token
    with pytest.raises(GraphAuthError):
        graph_build.build_graph_mailer(SETTINGS, MailboxDirectory.from_mapping(doc).get("gov"))._tokens.token(
            time.monotonic() + 5.0
        )
