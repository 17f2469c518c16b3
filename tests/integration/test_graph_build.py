"""build_graph_mailer's certificate path and an expired delta answered 400 (issue 22 phase 2): the
certificate of a `certificate_secret` mailbox is read from Secret Manager and handed to MSAL (the
simulator's token endpoint sees its thumbprint), a malformed secret stops start-up without quoting it,
and a delta checkpoint answered 400 `syncStateNotFound` is an expired checkpoint like a 410."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from devstack.graph_sim import GraphSimulator
from safesend.adapters import graph_build, secret_manager
from safesend.adapters.graph_auth import GraphAuthError
from safesend.adapters.graph_mailer import GraphMailer
from safesend.config import Settings
from safesend.core.errors import ConfigurationError, HistoryExpiredError
from safesend.core.mailboxes import MailboxDirectory
from safesend.core.model import Accepted

USER = "certs@contoso.example"
CLIENT = "11111111-1111-1111-1111-111111111111"


@pytest.fixture
def sim() -> Iterator[GraphSimulator]:
    simulator = GraphSimulator().start()
    try:
        yield simulator
    finally:
        simulator.stop()


def raw(message_id: str) -> bytes:
    return (
        f"From: {USER}\r\nTo: rcpt@example.com\r\nSubject: hi\r\nMessage-ID: {message_id}\r\n"
        "MIME-Version: 1.0\r\nContent-Type: text/plain\r\n\r\nbody\r\n"
    ).encode()


def certificate() -> tuple[str, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "safesend")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(datetime(2020, 1, 1, tzinfo=UTC))
        .not_valid_after(datetime(2040, 1, 1, tzinfo=UTC))
        .sign(key, hashes.SHA256())
    )
    thumbprint = hashlib.sha1(cert.public_bytes(serialization.Encoding.DER)).hexdigest()  # noqa: S324 - x5t is SHA-1
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return pem, thumbprint


def certificate_mailbox(sim: GraphSimulator):  # type: ignore[no-untyped-def]
    doc = {
        "mailboxes": {
            "certs": {
                "address": USER,
                "kind": "graph",
                "tenant_id": "tenant-1",
                "client_id": CLIENT,
                "certificate_secret": "graph-cert-certs",
                "api_endpoint": sim.url,
                "login_endpoint": sim.url,
            }
        }
    }
    return MailboxDirectory.from_mapping(doc).get("certs")


SETTINGS = Settings.from_env({"GOOGLE_CLOUD_PROJECT": "proj-1", "SAFESEND_AUTH_API_KEYS": ""})


def test_the_certificate_is_read_from_its_secret_and_signs_the_token_request(sim, monkeypatch) -> None:
    sim.configure(require_auth=True)
    pem, thumbprint = certificate()
    reads: list[tuple[str, str]] = []

    def read_secret(project: str, secret_id: str) -> str:
        reads.append((project, secret_id))
        return json.dumps({"private_key": pem, "thumbprint": thumbprint})

    monkeypatch.setattr(secret_manager, "read_secret", read_secret)
    mailer = graph_build.build_graph_mailer(SETTINGS, certificate_mailbox(sim))
    assert isinstance(mailer, GraphMailer)
    assert isinstance(mailer.send(raw("<cert-1@safesend.test>")), Accepted)
    assert reads == [("proj-1", "graph-cert-certs")]
    (assertion,) = sim.assertions()
    assert assertion["claims"]["iss"] == CLIENT and assertion["claims"]["sub"] == CLIENT
    assert assertion["header"]["x5t"]  # MSAL names the certificate by its thumbprint


@pytest.mark.parametrize(
    "stored",
    ['{"private_key": "-----BEGIN PRIVATE KEY-----secret"}', "not json -----BEGIN PRIVATE KEY-----secret", "[1]"],
)
def test_a_malformed_certificate_secret_stops_start_up_without_quoting_it(sim, monkeypatch, stored) -> None:
    monkeypatch.setattr(secret_manager, "read_secret", lambda project, secret_id: stored)
    with pytest.raises(ConfigurationError, match="secret graph-cert-certs is not") as caught:
        graph_build.build_graph_mailer(SETTINGS, certificate_mailbox(sim))
    assert caught.value.__cause__ is None and "BEGIN PRIVATE KEY" not in str(caught.value)


def test_a_delta_checkpoint_answered_400_sync_state_not_found_is_expired(sim) -> None:
    mailer = GraphMailer(USER, None, api_endpoint=sim.url, send_timeout_s=3, read_timeout_s=3, sleep=lambda s: None)
    checkpoint = mailer.current_history_id()
    mailer.send(raw("<delta-1@safesend.test>"))
    assert len(mailer.added_since(checkpoint).messages) == 1
    sim.configure(sync_state_ttl_s=1, expired_sync_state_status=400)
    sim.advance_clock(2)
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
def test_a_national_cloud_mailbox_asks_its_own_clouds_token_scope(sim, monkeypatch, api_host, scope) -> None:
    """A national cloud refuses a global-service token: the mailer built for a mailbox on
    graph.microsoft.us (etc.) asks Entra for that host's `.default` scope. The simulator plays that
    cloud's token endpoint; the Graph host itself is never called here."""
    pem, thumbprint = certificate()
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
                "login_endpoint": sim.url,
            }
        }
    }
    mailer = graph_build.build_graph_mailer(SETTINGS, MailboxDirectory.from_mapping(doc).get("gov"))
    tokens = mailer._tokens  # the token source the mailer authorises its requests with
    assert tokens is not None
    sim.token_scope = scope
    assert tokens.token(time.monotonic() + 5.0)
    sim.token_scope = "https://graph.microsoft.com/.default"  # the global service refuses that token
    with pytest.raises(GraphAuthError):
        graph_build.build_graph_mailer(SETTINGS, MailboxDirectory.from_mapping(doc).get("gov"))._tokens.token(
            time.monotonic() + 5.0
        )
