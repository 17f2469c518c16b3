"""config: Settings.from_env reads a plain mapping and refuses bad values at start-up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from safesend.config import Settings
from safesend.core.errors import ConfigurationError

SHIPPED_CHANNELS = Path(__file__).resolve().parents[2] / "functions" / "channels.toml"


def settings(**env: str) -> Settings:
    return Settings.from_env({"GOOGLE_CLOUD_PROJECT": "proj-1", **env})


def test_defaults_with_only_a_project():
    s = settings()
    assert s.project == "proj-1"
    assert s.jobs_collection == "ai_jobs"
    assert s.message_id_domain == "safesend.localhost"
    assert s.default_from is None
    assert Path(s.channels_file).resolve() == SHIPPED_CHANNELS.resolve()
    assert s.channels_json is None
    assert s.gmail_user == "me"
    assert s.gmail_api_endpoint is None
    assert (s.send_timeout_s, s.read_timeout_s, s.request_budget_s) == (20.0, 15.0, 40.0)
    assert s.verify_message_id_every == 100
    assert (
        s.timing.lease_s,
        s.timing.index_lag_s,
        s.timing.unknown_window_s,
        s.timing.recheck_s,
        s.timing.publish_lease_s,
    ) == (120.0, 90.0, 300.0, 60.0, 60.0)
    assert (s.tasks_queue, s.reconcile_url, s.review_topic) == (None, None, None)
    assert (s.sweep_batch, s.sweep_budget_s) == (50, 90.0)
    assert not hasattr(s, "enable_fault_injection")  # the deployed package has no fault switch


def test_from_env_does_not_read_the_process_environment_when_given_a_mapping(monkeypatch):
    monkeypatch.setenv("SAFESEND_JOBS_COLLECTION", "from_os_environ")
    assert settings().jobs_collection == "ai_jobs"


@pytest.mark.parametrize("name", ["GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT", "SAFESEND_PROJECT"])
def test_project_is_read_from_any_of_its_names(name):
    assert Settings.from_env({name: "p-2"}).project == "p-2"


@pytest.mark.parametrize("env", [{}, {"GOOGLE_CLOUD_PROJECT": ""}, {"SAFESEND_DEFAULT_FROM": "a@example.com"}])
def test_missing_project_raises(env):
    with pytest.raises(ConfigurationError):
        Settings.from_env(env)


def test_values_are_read_from_the_mapping():
    s = settings(
        SAFESEND_JOBS_COLLECTION="jobs_test",
        SAFESEND_GMAIL_USER="ops@example.com",
        SAFESEND_SEND_TIMEOUT_S="5",
        SAFESEND_LEASE_S="30",
        SAFESEND_SWEEP_BATCH="7",
        SAFESEND_REVIEW_TOPIC="projects/p/topics/review",
        SAFESEND_VERIFY_MESSAGE_ID_EVERY="0",
        SAFESEND_AUTH_TRUST_CLOUD_RUN_IAM="yes",
        SAFESEND_CHANNELS_JSON='{"x": {}}',
    )
    assert s.jobs_collection == "jobs_test"
    assert s.gmail_user == "ops@example.com"
    assert (s.send_timeout_s, s.timing.lease_s, s.sweep_batch) == (5.0, 30.0, 7)
    assert s.review_topic == "projects/p/topics/review"
    assert s.verify_message_id_every == 0
    assert s.auth_trust_cloud_run_iam is True
    assert s.channels_json == '{"x": {}}'


def test_empty_values_mean_unset():
    s = settings(SAFESEND_LEASE_S="", SAFESEND_VERIFY_MESSAGE_ID_EVERY="", SAFESEND_JOBS_COLLECTION="")
    assert (s.timing.lease_s, s.verify_message_id_every, s.jobs_collection) == (120.0, 100, "ai_jobs")


# --------------------------------------------------------------- Message-ID domain


def test_domain_falls_back_to_the_default_sender_domain_lowercased():
    s = settings(SAFESEND_DEFAULT_FROM="Shop <Orders@Mail.Example.COM>")
    assert s.message_id_domain == "mail.example.com"
    assert s.default_from == "Shop <Orders@Mail.Example.COM>"


def test_explicit_domain_wins_over_the_sender_domain():
    s = settings(SAFESEND_DEFAULT_FROM="shop@example.com", SAFESEND_MESSAGE_ID_DOMAIN="ids.example.org")
    assert s.message_id_domain == "ids.example.org"


def test_sender_without_a_domain_falls_back_to_the_built_in_domain():
    assert settings(SAFESEND_DEFAULT_FROM="not an address").message_id_domain == "safesend.localhost"


@pytest.mark.parametrize("domain", ["localhost", "bad_domain.com", "-x.example.com", "exa mple.com", "ex..com"])
def test_invalid_message_id_domain_raises(domain):
    with pytest.raises(ConfigurationError):
        settings(SAFESEND_MESSAGE_ID_DOMAIN=domain)


# --------------------------------------------------------------- numbers and booleans


@pytest.mark.parametrize(
    "name",
    [
        "SAFESEND_LEASE_S",
        "SAFESEND_SEND_TIMEOUT_S",
        "SAFESEND_INDEX_LAG_S",
        "SAFESEND_SWEEP_BATCH",
        "SAFESEND_REQUEST_BUDGET_S",
    ],
)
@pytest.mark.parametrize("value", ["abc", "10s", "1,5", "-1"])
def test_non_number_or_negative_raises(name, value):
    with pytest.raises(ConfigurationError):
        settings(**{name: value})


@pytest.mark.parametrize(
    "env", [{"SAFESEND_SWEEP_BATCH": "0"}, {"SAFESEND_SWEEP_BATCH": "0.5"}, {"SAFESEND_SWEEP_BUDGET_S": "0"}]
)
def test_a_sweep_that_could_never_advance_a_job_is_refused_at_start(env):
    # Batch 0 reads empty pages and budget 0 stops before the first job, yet each sweep still logs
    # sweep_completed: the dead man's switch would stay quiet while nothing is ever swept.
    with pytest.raises(ConfigurationError, match=r"SAFESEND_SWEEP_(BATCH|BUDGET_S)"):
        settings(**env)


@pytest.mark.parametrize(
    "name", ["SAFESEND_SWEEP_BATCH", "SAFESEND_MAX_BODY_BYTES", "SAFESEND_VERIFY_MESSAGE_ID_EVERY"]
)
def test_a_fractional_count_is_refused_not_truncated(name):
    # "1.9" was read as 1 (int() truncates): a typo silently became another value.
    with pytest.raises(ConfigurationError, match=f"{name} must be a whole number"):
        settings(**{name: "1.9"})


@pytest.mark.parametrize(
    "name",
    [
        "SAFESEND_SEND_TIMEOUT_S",  # a socket timeout of 0: every send fails at once, taken as ambiguous
        "SAFESEND_READ_TIMEOUT_S",  # every mailbox search fails: no unclear attempt is ever settled
        "SAFESEND_POSTGRES_TIMEOUT_S",
        "SAFESEND_SWEEP_INTERVAL_S",  # /health calls every sweep late
        "SAFESEND_POSTGRES_POOL_MAX",  # no connection, ever
    ],
)
def test_a_zero_timeout_interval_or_pool_is_refused_at_start(name):
    with pytest.raises(ConfigurationError, match=f"{name} must be"):
        settings(**{name: "0"})


@pytest.mark.parametrize("name", ["SAFESEND_LEASE_S", "SAFESEND_INDEX_LAG_S"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_delay_raises(name, value):
    # float() accepts these. A NaN or infinite delay cannot become a timedelta (ValueError /
    # OverflowError), so it would fail mid-send (start_attempt: timedelta(seconds=lease_s); record_outcome:
    # Timing.index_lag) instead of at start-up as config.py promises.
    with pytest.raises(ConfigurationError):
        settings(**{name: value})


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("1", True),
        ("true", True),
        ("YES", True),
        (" on ", True),
        ("0", False),
        ("False", False),
        ("no", False),
        ("off", False),
    ],
)
def test_booleans_accept_the_usual_spellings(raw, expected):
    assert settings(SAFESEND_CALLBACK_ALLOW_HTTP=raw).callback_allow_http is expected


@pytest.mark.parametrize("raw", ["maybe", "2", "y", "enabled"])
def test_bad_boolean_raises(raw):
    with pytest.raises(ConfigurationError):
        settings(SAFESEND_CALLBACK_ALLOW_HTTP=raw)


# --------------------------------------------------------------- cross-field rules


def test_queue_without_reconcile_url_raises():
    with pytest.raises(ConfigurationError):
        settings(SAFESEND_TASKS_QUEUE="projects/p/locations/l/queues/q")


def test_queue_with_reconcile_url_is_accepted():
    s = settings(
        SAFESEND_TASKS_QUEUE="projects/p/locations/l/queues/q", SAFESEND_RECONCILE_URL="https://example.com/reconcile"
    )
    assert (s.tasks_queue, s.reconcile_url) == ("projects/p/locations/l/queues/q", "https://example.com/reconcile")


@pytest.mark.parametrize("lease,send_timeout", [("40", "20"), ("39.9", "20"), ("120", "60"), ("0", "0")])
def test_lease_not_exceeding_twice_the_send_timeout_raises(lease, send_timeout):
    with pytest.raises(ConfigurationError):
        settings(SAFESEND_LEASE_S=lease, SAFESEND_SEND_TIMEOUT_S=send_timeout)


@pytest.mark.parametrize("lease,send_timeout", [("40.5", "20"), ("121", "60"), ("1", "0.4")])
def test_lease_exceeding_twice_the_send_timeout_is_accepted(lease, send_timeout):
    s = settings(SAFESEND_LEASE_S=lease, SAFESEND_SEND_TIMEOUT_S=send_timeout)
    assert s.timing.lease_s > 2 * s.send_timeout_s


def test_default_send_timeout_limits_a_short_lease():
    with pytest.raises(ConfigurationError):
        settings(SAFESEND_LEASE_S="40")  # default send timeout 20 s -> lease must exceed 40 s


# --------------------------------------------------------------- issue 8.3 and 8.4: refuse to start
@pytest.mark.parametrize("lag,window", [("90", "89"), ("300", "60")])
def test_an_unknown_window_shorter_than_the_index_lag_refuses_to_start(lag, window):
    """ "Not found" before the index could have caught up is no evidence: a resend would duplicate."""
    with pytest.raises(ConfigurationError, match="index lag"):
        settings(SAFESEND_INDEX_LAG_S=lag, SAFESEND_UNKNOWN_WINDOW_S=window)


def test_a_verification_horizon_shorter_than_the_window_refuses_to_start():
    with pytest.raises(ConfigurationError, match="verification horizon"):
        settings(SAFESEND_VERIFY_HORIZON_S="120")


def test_horizons_are_read_with_their_defaults():
    s = settings()
    assert (s.timing.verify_horizon_s, s.timing.retry_horizon_s) == (1800.0, 3600.0)
    s = settings(SAFESEND_VERIFY_HORIZON_S="600", SAFESEND_RETRY_HORIZON_S="60")
    assert (s.timing.verify_horizon_s, s.timing.retry_horizon_s) == (600.0, 60.0)


@pytest.mark.parametrize("channel", [{"index_lag_s": 400}, {"unknown_window_s": 30}, {"unknown_window_s": 4000}])
def test_a_channel_whose_timing_breaks_the_guarantee_refuses_to_start(channel):
    from safesend.bootstrap.runtime import preflight

    with pytest.raises(ConfigurationError, match="channel late"):
        preflight(settings(SAFESEND_CHANNELS_JSON=json.dumps({"late": {"on_unknown": "retry", **channel}})))


@pytest.mark.parametrize(
    "domain",
    [
        "notifications.mail.example-shop.com",
        "a" * 28 + ".example",
        "b" * 38 + ".io",
        ".".join(["c" * 63] * 3) + ".example.com",
    ],
)
def test_long_message_id_domains_pass_the_start_up_probe(domain):
    """8.4: a Message-ID domain of 28-38 characters used to fold the header: every send answered 500."""
    from safesend.bootstrap.runtime import preflight

    preflight(settings(SAFESEND_MESSAGE_ID_DOMAIN=domain, SAFESEND_AUTH_DISABLED="1"))


def test_a_default_sender_that_cannot_make_a_message_refuses_to_start():
    from safesend.bootstrap.runtime import preflight

    with pytest.raises(ConfigurationError, match="SAFESEND_DEFAULT_FROM"):
        preflight(
            settings(
                SAFESEND_DEFAULT_FROM='"=?utf-8?q?x=0D=0ABcc:_e@evil.example?=" <shop@example.com>',
                SAFESEND_AUTH_DISABLED="1",
            )
        )


def test_log_level_is_a_declared_setting_checked_at_start():
    assert Settings.from_env({"GOOGLE_CLOUD_PROJECT": "p", "SAFESEND_LOG_LEVEL": "warning"}).log_level == "WARNING"
    assert Settings.from_env({"GOOGLE_CLOUD_PROJECT": "p"}).log_level == "INFO"
    with pytest.raises(ConfigurationError, match="SAFESEND_LOG_LEVEL"):
        Settings.from_env({"GOOGLE_CLOUD_PROJECT": "p", "SAFESEND_LOG_LEVEL": "chatty"})
