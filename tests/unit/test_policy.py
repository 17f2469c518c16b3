"""policy: channel policies are server-side, default to review, and bad configuration fails at load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from safesend.core.errors import ConfigurationError, RequestValidationError, UnknownChannelError
from safesend.core.policy import ChannelPolicies, ChannelPolicy, OnUnknown

SHIPPED_CHANNELS = Path(__file__).resolve().parents[2] / "functions" / "channels.toml"

TOML = """
[defaults]
max_attempts = 5
retry_base_s = 1.5

[channels.receipts]
on_unknown = "retry"

[channels.payouts]
on_unknown = "review"
max_attempts = 1

[channels.plain]
"""


@pytest.fixture
def toml_file(tmp_path):
    path = tmp_path / "channels.toml"
    path.write_text(TOML, encoding="utf-8")
    return path


# --------------------------------------------------------------- from_mapping


def test_channel_without_on_unknown_defaults_to_review():
    policies = ChannelPolicies.from_mapping({"channels": {"plain": {}}})
    assert policies.get("plain").on_unknown is OnUnknown.REVIEW


def test_channel_given_as_none_gets_all_defaults():
    policy = ChannelPolicies.from_mapping({"channels": {"plain": None}}).get("plain")
    assert (policy.on_unknown, policy.max_attempts, policy.quick_retries) == (OnUnknown.REVIEW, 3, 2)
    assert (policy.retry_base_s, policy.retry_cap_s) == (2.0, 300.0)
    assert (policy.index_lag_s, policy.unknown_window_s) == (None, None)


def test_retry_and_review_channels_are_told_apart():
    policies = ChannelPolicies.from_mapping(
        {"channels": {"receipts": {"on_unknown": "retry"}, "payouts": {"on_unknown": "review"}}}
    )
    assert policies.get("receipts").on_unknown is OnUnknown.RETRY
    assert policies.get("payouts").on_unknown is OnUnknown.REVIEW


def test_defaults_apply_to_every_channel_and_channels_override_them():
    policies = ChannelPolicies.from_mapping(
        {
            "defaults": {"max_attempts": 7, "retry_cap_s": 60.0, "index_lag_s": 10},
            "channels": {"a": {}, "b": {"max_attempts": 2, "on_unknown": "retry"}},
        }
    )
    a, b = policies.get("a"), policies.get("b")
    assert (a.max_attempts, a.retry_cap_s, a.index_lag_s, a.on_unknown) == (7, 60.0, 10, OnUnknown.REVIEW)
    assert (b.max_attempts, b.retry_cap_s, b.index_lag_s, b.on_unknown) == (2, 60.0, 10, OnUnknown.RETRY)
    assert (a.name, b.name) == ("a", "b")


def test_unknown_channel_raises_unknown_channel_error_naming_the_channel():
    policies = ChannelPolicies.from_mapping({"channels": {"receipts": {}}})
    with pytest.raises(UnknownChannelError) as info:
        policies.get("marketing")
    assert info.value.channel == "marketing"
    assert isinstance(info.value, RequestValidationError)  # so it surfaces as a 400 on "channel"
    assert "channel" in info.value.fields


def test_names_are_sorted():
    policies = ChannelPolicies.from_mapping({"channels": {"b": {}, "a": {}}})
    assert policies.names() == ["a", "b"]


@pytest.mark.parametrize(
    "doc",
    [
        {"channels": {"x": {"on_unknown": "resend"}}},  # bad on_unknown
        {"channels": {"x": {"on_unknown": "RETRY"}}},
        {"channels": {"x": {"max_retries": 3}}},  # unknown setting
        {"defaults": {"colour": "red"}, "channels": {"x": {}}},
        {"defaults": {"on_unknown": "retry"}, "channels": {"x": {}}},  # on_unknown in defaults
        {"defaults": {"on_unknown": "review"}, "channels": {"x": {}}},
        {"channels": {"x": {"index_lag_s": -1}}},  # negative delays
        {"channels": {"x": {"unknown_window_s": -0.5}}},
        {"channels": {"x": {"max_attempts": 0}}},  # max_attempts < 1
        {"channels": {"x": {"max_attempts": -3}}},
        {"channels": {"x": {"quick_retries": -1}}},
        {"channels": {"x": {"retry_base_s": -1}}},
        {"channels": {"x": {"retry_base_s": 10, "retry_cap_s": 5}}},
        {"channels": {"x": {"max_attempts": "three"}}},  # wrong type
        {"channels": ["x"]},  # channels not a table
        {"channels": {"x": {}}, "extra": {}},  # unknown section
    ],
    ids=lambda d: json.dumps(d, sort_keys=True),
)
def test_bad_policy_document_raises_configuration_error(doc):
    with pytest.raises(ConfigurationError):
        ChannelPolicies.from_mapping(doc)


def test_zero_delays_are_allowed():
    policy = ChannelPolicies.from_mapping({"channels": {"x": {"index_lag_s": 0, "unknown_window_s": 0}}}).get("x")
    assert (policy.index_lag_s, policy.unknown_window_s) == (0, 0)


def test_channel_policy_validates_on_direct_construction():
    with pytest.raises(ConfigurationError):
        ChannelPolicy(name="x", max_attempts=0)
    assert ChannelPolicy(name="x").on_unknown is OnUnknown.REVIEW


# --------------------------------------------------------------- load


def test_load_reads_a_toml_file(toml_file):
    policies = ChannelPolicies.load(toml_file)
    assert policies.names() == ["payouts", "plain", "receipts"]
    assert policies.get("receipts").on_unknown is OnUnknown.RETRY
    assert policies.get("receipts").max_attempts == 5
    assert policies.get("receipts").retry_base_s == 1.5
    assert policies.get("payouts").max_attempts == 1
    assert policies.get("plain").on_unknown is OnUnknown.REVIEW


def test_json_override_merges_over_the_file(toml_file):
    override = json.dumps(
        {
            "receipts": {"max_attempts": 2},  # change one setting, keep on_unknown from the file
            "plain": {"on_unknown": "retry"},
            "refunds": {"on_unknown": "review", "max_attempts": 1},  # a new channel, file defaults apply
        }
    )
    policies = ChannelPolicies.load(toml_file, override)
    assert policies.names() == ["payouts", "plain", "receipts", "refunds"]
    receipts = policies.get("receipts")
    assert (receipts.on_unknown, receipts.max_attempts) == (OnUnknown.RETRY, 2)
    assert policies.get("plain").on_unknown is OnUnknown.RETRY
    refunds = policies.get("refunds")
    assert (refunds.on_unknown, refunds.max_attempts, refunds.retry_base_s) == (OnUnknown.REVIEW, 1, 1.5)
    payouts = policies.get("payouts")
    assert (payouts.on_unknown, payouts.max_attempts) == (OnUnknown.REVIEW, 1)


def test_json_override_alone_configures_channels():
    policies = ChannelPolicies.load(None, '{"receipts": {"on_unknown": "retry"}}')
    assert policies.names() == ["receipts"]
    assert policies.get("receipts").max_attempts == 3


def test_json_override_is_validated_like_the_file(toml_file):
    with pytest.raises(ConfigurationError):
        ChannelPolicies.load(toml_file, '{"receipts": {"on_unknown": "maybe"}}')
    with pytest.raises(ConfigurationError):
        ChannelPolicies.load(toml_file, '{"receipts": {"max_attempts": 0}}')


@pytest.mark.parametrize("override", ['{"receipts": "retry"}', '{"receipts": 5}', '{"receipts": ["retry"]}'])
def test_json_override_with_non_object_channel_settings_raises_configuration_error(toml_file, override):
    # load() promises ConfigurationError for a malformed SAFESEND_CHANNELS_JSON ("must be an object of
    # channel -> settings"); a non-object settings value currently escapes as a TypeError from {**values}.
    with pytest.raises(ConfigurationError):
        ChannelPolicies.load(toml_file, override)


def test_unreadable_file_raises_configuration_error(tmp_path):
    with pytest.raises(ConfigurationError):
        ChannelPolicies.load(tmp_path / "missing.toml")
    with pytest.raises(ConfigurationError):
        ChannelPolicies.load(tmp_path)  # a directory


def test_invalid_toml_raises_configuration_error(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[channels.x\non_unknown = ", encoding="utf-8")
    with pytest.raises(ConfigurationError):
        ChannelPolicies.load(path)


@pytest.mark.parametrize("override", ["{not json", "[1, 2]", '"receipts"', "42"])
def test_bad_json_override_raises_configuration_error(toml_file, override):
    with pytest.raises(ConfigurationError):
        ChannelPolicies.load(toml_file, override)


def test_no_channels_at_all_raises_configuration_error(tmp_path):
    path = tmp_path / "empty.toml"
    path.write_text("[defaults]\nmax_attempts = 3\n", encoding="utf-8")
    with pytest.raises(ConfigurationError):
        ChannelPolicies.load(path)
    with pytest.raises(ConfigurationError):
        ChannelPolicies.load(None)
    with pytest.raises(ConfigurationError):
        ChannelPolicies.load(None, "{}")


def test_shipped_channels_file_loads_with_retry_and_review_channels():
    policies = ChannelPolicies.load(SHIPPED_CHANNELS)
    modes = {policies.get(name).on_unknown for name in policies.names()}
    assert OnUnknown.RETRY in modes
    assert OnUnknown.REVIEW in modes
