"""A mailbox's kind: `graph` mailboxes parse with their Entra settings, get Exchange Online's limits by
default, pace at Exchange's 30 messages a minute, and the runtime builds a GraphMailer for them."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from safesend.adapters.graph_mailer import GraphMailer
from safesend.bootstrap import runtime
from safesend.config import Settings
from safesend.core import mailbox_budget
from safesend.core.errors import ConfigurationError
from safesend.core.mailbox_budget import Budget, Reservation
from safesend.core.mailboxes import PRESETS, MailboxDirectory

GRAPH = {
    "kind": "graph",
    "address": "Shop@Contoso.example",
    "tenant_id": "00000000-0000-0000-0000-000000000001",
    "client_id": "00000000-0000-0000-0000-000000000002",
    "federated": True,
}
GMAIL = {"address": "shop@example.com", "delegated_user": "shop@example.com"}


def directory(**graph: Any) -> MailboxDirectory:
    return MailboxDirectory.from_mapping(
        {"defaults": {"limits": "workspace"}, "mailboxes": {"m365": {**GRAPH, **graph}, "gmail": GMAIL}}
    )


def test_a_graph_mailbox_has_its_settings_its_upn_and_exchange_limits_by_default() -> None:
    mailboxes = directory()
    m365, gmail = mailboxes.get("m365"), mailboxes.get("gmail")
    assert (m365.kind, m365.user_id, m365.address) == ("graph", "shop@contoso.example", "shop@contoso.example")
    assert m365.graph is not None and m365.graph.federated and m365.graph.certificate_secret is None
    assert m365.graph.tenant_id == GRAPH["tenant_id"]
    assert m365.limits == PRESETS["exchange_online"]  # not the [defaults] Gmail preset
    assert (m365.limits.units_per_minute, m365.limits.recipients_per_day) == (3000, 10_000)
    assert (gmail.kind, gmail.graph, gmail.limits) == ("gmail", None, PRESETS["workspace"])


def test_a_graph_mailbox_may_name_its_own_limits_and_a_certificate() -> None:
    m365 = directory(federated=False, certificate_secret="graph-cert", limits={"recipients_per_day": 5000}).get("m365")
    assert m365.graph is not None and m365.graph.certificate_secret == "graph-cert"
    assert m365.limits.recipients_per_day == 5000


@pytest.mark.parametrize(
    ("changes", "fault"),
    [
        ({"kind": "outlook"}, "kind must be one of"),
        ({"certificate_secret": "cert"}, "exactly one of federated"),
        ({"federated": False}, "exactly one of federated"),
        ({"federated": "yes"}, "federated must be true or false"),
        ({"tenant_id": None}, "tenant_id is required"),
        ({"client_id": ""}, "client_id is required"),
        ({"delegated_user": "shop@contoso.example"}, "unknown settings"),
        ({"api_endpoint": "ftp://x"}, r"an http\(s\) URL"),
        ({"federated": False, "certificate_secret": "a/b"}, "Secret Manager secret id"),
    ],
)
def test_a_bad_graph_mailbox_is_refused_at_start_up(changes: dict[str, Any], fault: str) -> None:
    values = {k: v for k, v in {**GRAPH, **changes}.items() if v is not None}
    with pytest.raises(ConfigurationError, match=fault):
        MailboxDirectory.from_mapping({"mailboxes": {"m365": values}})


def test_a_gmail_mailbox_refuses_graph_settings() -> None:
    with pytest.raises(ConfigurationError, match="unknown settings"):
        MailboxDirectory.from_mapping({"mailboxes": {"g": {**GMAIL, "limits": "workspace", "tenant_id": "t"}}})


def test_exchange_limits_pace_sends_under_30_a_minute() -> None:
    m365 = directory().get("m365")
    budget, now = Budget(), datetime(2026, 12, 1, tzinfo=UTC)
    admitted = 0
    for _ in range(40):
        if isinstance(mailbox_budget.reserve(budget, m365, mailbox_budget.SEND_UNITS, 1, now), Reservation):
            admitted += 1
    assert 25 <= admitted <= 30
    later = now + timedelta(seconds=mailbox_budget.MINUTE_SPAN_S + 1)
    assert isinstance(mailbox_budget.reserve(budget, m365, mailbox_budget.SEND_UNITS, 1, later), Reservation)


def test_the_runtime_builds_a_graph_mailer_for_a_graph_mailbox_and_a_gmail_one_otherwise() -> None:
    doc = {
        "mailboxes": {
            "m365": {**GRAPH, "api_endpoint": "http://127.0.0.1:9"},
            "gmail": {**GMAIL, "limits": "workspace"},
        }
    }
    settings = Settings(project="p", mailboxes_json=json.dumps(doc), gmail_api_endpoint="http://127.0.0.1:9")
    mailboxes = MailboxDirectory.load(settings)
    graph_mailer = runtime.build_mailbox_mailer(settings, mailboxes.get("m365"))
    assert isinstance(graph_mailer, runtime.LazyMailer)
    built = graph_mailer._get()
    assert isinstance(built, GraphMailer) and built.user == "shop@contoso.example"
    gmail_built = runtime.build_mailbox_mailer(settings, mailboxes.get("gmail"))._get()
    assert not isinstance(gmail_built, GraphMailer)
