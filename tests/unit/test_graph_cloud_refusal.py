"""Issue 22 phase 2, security: a Graph mailbox's simulator endpoints are local-only switches. On Cloud
Run / Cloud Functions an api_endpoint without a login_endpoint (sends with no token) or any host that
is not Microsoft's stops the start-up check; Microsoft's hosts, national clouds included, start."""

from __future__ import annotations

import json

import pytest

from safesend.bootstrap.runtime import check_configuration
from safesend.config import CLOUD_MARKERS, Settings
from safesend.core.errors import ConfigurationError
from safesend.core.graph_hosts import token_scope

BASE = {"GOOGLE_CLOUD_PROJECT": "p", "SAFESEND_AUTH_API_KEYS": ""}
APP = {"tenant_id": "00000000-0000-0000-0000-000000000000", "client_id": "11111111-1111-1111-1111-111111111111"}


def env_with(marker: str | None, **endpoints: str) -> dict[str, str]:
    doc = {
        "mailboxes": {
            "shop": {"address": "shop@example.com", "delegated_user": "shop@example.com", "limits": "workspace"},
            "m365": {"address": "m365@contoso.com", "kind": "graph", **APP, "federated": True, **endpoints},
        }
    }
    env = {**BASE, "SAFESEND_MAILBOXES_JSON": json.dumps(doc)}
    return {**env, marker: "safesend-send"} if marker else env


@pytest.mark.parametrize("marker", CLOUD_MARKERS)
def test_a_graph_mailbox_that_asks_no_token_refuses_to_start_on_cloud(marker):
    env = env_with(marker, api_endpoint="http://127.0.0.1:8099")
    with pytest.raises(ConfigurationError, match=r"m365: api_endpoint without login_endpoint.*refused on Cloud Run"):
        Settings.from_env(env)
    with pytest.raises(ConfigurationError, match="no token"):
        check_configuration({**env, "SAFESEND_AUTH_HMAC_SECRET": "h" * 40})


@pytest.mark.parametrize(
    ("endpoints", "named"),
    [
        (
            {"api_endpoint": "https://graph.example.net", "login_endpoint": "https://login.microsoftonline.com"},
            "api_endpoint",
        ),
        (
            {"api_endpoint": "https://graph.microsoft.com", "login_endpoint": "https://login.example.net"},
            "login_endpoint",
        ),
        (
            {"api_endpoint": "http://graph.microsoft.com", "login_endpoint": "https://login.microsoftonline.com"},
            "api_endpoint",
        ),
        (
            {
                "api_endpoint": "https://graph.microsoft.com.evil.io",
                "login_endpoint": "https://login.microsoftonline.com",
            },
            "api_endpoint",
        ),
        ({"login_endpoint": "http://127.0.0.1:8099"}, "login_endpoint"),
    ],
)
def test_a_non_microsoft_graph_endpoint_refuses_to_start_on_cloud(endpoints, named):
    with pytest.raises(ConfigurationError, match=rf"m365\.{named}: .* not a Microsoft host"):
        Settings.from_env(env_with("K_SERVICE", **endpoints))


@pytest.mark.parametrize(
    ("api", "login"),
    [
        ("https://graph.microsoft.com", "https://login.microsoftonline.com"),
        ("https://graph.microsoft.us", "https://login.microsoftonline.us"),
        ("https://dod-graph.microsoft.us", "https://login.microsoftonline.us"),
        ("https://microsoftgraph.chinacloudapi.cn", "https://login.chinacloudapi.cn"),
    ],
)
def test_microsofts_hosts_national_clouds_included_start_on_cloud(api, login):
    settings = Settings.from_env(env_with("K_SERVICE", api_endpoint=api, login_endpoint=login))
    assert settings.mailboxes_json is not None


def test_a_graph_mailbox_without_endpoints_starts_on_cloud():
    check_configuration({**env_with("K_SERVICE"), "SAFESEND_AUTH_HMAC_SECRET": "h" * 40})


def test_the_simulator_endpoints_still_work_on_a_local_stack():
    settings = Settings.from_env(env_with(None, api_endpoint="http://127.0.0.1:8099"))
    assert settings.mailboxes_json is not None


def test_the_token_scope_follows_the_graph_host_and_defaults_to_the_global_service() -> None:
    assert token_scope(None) == "https://graph.microsoft.com/.default"
    assert token_scope("https://graph.microsoft.com") == "https://graph.microsoft.com/.default"
    assert token_scope("https://graph.microsoft.us/") == "https://graph.microsoft.us/.default"
    assert token_scope("https://dod-graph.microsoft.us") == "https://dod-graph.microsoft.us/.default"
    assert token_scope("https://microsoftgraph.chinacloudapi.cn") == "https://microsoftgraph.chinacloudapi.cn/.default"
    assert token_scope("http://127.0.0.1:8765") == "https://graph.microsoft.com/.default"  # a local simulator
