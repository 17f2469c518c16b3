"""Issue 18.9: a local-only switch set on a deployed function (Cloud Run / Cloud Functions, known by
K_SERVICE, K_REVISION or K_CONFIGURATION) stops the start-up check, whatever its value."""

from __future__ import annotations

import pytest

from safesend.bootstrap.runtime import check_configuration
from safesend.config import CLOUD_MARKERS, LOCAL_ONLY_ENVIRONMENT, Settings, local_only_settings, on_google_cloud
from safesend.core.errors import ConfigurationError

BASE = {"GOOGLE_CLOUD_PROJECT": "p", "SAFESEND_AUTH_API_KEYS": ""}
SWITCHES = {
    "SAFESEND_AUTH_DISABLED": "1",
    "SAFESEND_CALLBACK_ALLOW_HTTP": "1",
    "SAFESEND_TASKS_EMULATOR_HOST": "127.0.0.1:8123",
    "SAFESEND_TASKS_API_KEY": "ssk_tasks_x",
    "SAFESEND_AUTH_INTERNAL_API_KEYS": "tasks:" + "0" * 64,
    "SAFESEND_REVIEW_DEV_IDENTITY": "dev@localhost",
    "FIRESTORE_EMULATOR_HOST": "127.0.0.1:8080",
    "PUBSUB_EMULATOR_HOST": "127.0.0.1:8085",
}


def test_every_local_only_switch_is_covered_here():
    assert set(SWITCHES) == set(local_only_settings()) | set(LOCAL_ONLY_ENVIRONMENT)


@pytest.mark.parametrize("marker", CLOUD_MARKERS)
@pytest.mark.parametrize("name", sorted(SWITCHES))
def test_a_local_only_switch_on_cloud_run_refuses_to_start(name, marker):
    env = {**BASE, marker: "safesend-send", name: SWITCHES[name]}
    with pytest.raises(ConfigurationError, match=f"{name}.*refused on Cloud Run"):
        Settings.from_env(env)
    with pytest.raises(ConfigurationError, match=name):
        check_configuration({**env, "SAFESEND_AUTH_HMAC_SECRET": "h" * 40})


@pytest.mark.parametrize("value", ["0", "false", "off"])
def test_even_switched_off_a_local_only_setting_has_no_place_in_a_deployment(value):
    with pytest.raises(ConfigurationError, match="SAFESEND_AUTH_DISABLED"):
        Settings.from_env({**BASE, "K_SERVICE": "safesend-send", "SAFESEND_AUTH_DISABLED": value})


def test_the_same_switches_still_work_on_a_local_stack():
    """functions-framework sets FUNCTION_TARGET on a laptop too: it is not a sign of Cloud Run."""
    env = {**BASE, "FUNCTION_TARGET": "router", "SAFESEND_AUTH_DISABLED": "1", "SAFESEND_CALLBACK_ALLOW_HTTP": "1"}
    settings = Settings.from_env(env)
    assert settings.auth_disabled and settings.callback_allow_http
    assert not on_google_cloud(env)


def test_a_deployment_without_local_switches_starts():
    env = {**BASE, "K_SERVICE": "safesend-send", "SAFESEND_AUTH_HMAC_SECRET": "h" * 40}
    check_configuration(env)
