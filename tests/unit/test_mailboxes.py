"""Sender mailboxes and pools (safesend.core.mailboxes): parsing, start-up checks, and the candidates of a job."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from safesend.config import Settings
from safesend.core.errors import ConfigurationError, RequestValidationError
from safesend.core.mailboxes import PRESETS, MailboxDirectory, MailboxLimits

DOC: dict[str, Any] = {
    "defaults": {"limits": "workspace"},
    "mailboxes": {
        "shop": {
            "address": "Shop@Example.com",
            "delegated_user": "shop@example.com",
            "send_as": ["orders@example.com"],
        },
        "shop2": {
            "address": "shop2@example.com",
            "delegated_user": "shop2@example.com",
            "send_as": ["billing@example.com"],
        },
        "news": {
            "address": "news@example.org",
            "token_secret": "gmail-token-news",
            "limits": {"preset": "trial", "messages_per_day": 300},
            "safety_share": 0.9,
        },
    },
    "pools": {
        "default": ["shop", "shop2"],
        "channels": {"newsletter": ["news"]},
        "from": {"billing@example.com": ["shop2"], "example.org": ["news"]},
    },
}


def directory(**changes: Any) -> MailboxDirectory:
    return MailboxDirectory.from_mapping({**DOC, **changes})


def test_presets_carry_gmails_published_limits():
    assert PRESETS["workspace"] == MailboxLimits(6000, 2000, 10_000, 100)
    assert PRESETS["workspace_legacy_rate"].units_per_minute == 15_000
    assert PRESETS["trial"].messages_per_day == 500
    assert PRESETS["consumer"].messages_per_day == 500


def test_mailboxes_are_parsed_with_auth_aliases_limits_and_share():
    mailboxes = directory()
    shop = mailboxes.get("shop")
    assert (shop.address, shop.user_id, shop.delegated_user, shop.token_secret) == (
        "shop@example.com",
        "shop@example.com",
        "shop@example.com",
        None,
    )
    assert shop.limits == PRESETS["workspace"] and shop.safety_share == 0.95
    news = mailboxes.get("news")
    assert (news.user_id, news.token_secret) == ("me", "gmail-token-news")
    assert news.limits == MailboxLimits(6000, 300, 10_000, 100)
    assert news.day_allowance(news.limits.messages_per_day) == 270  # 0.9 x 300: stop before Gmail does


def test_candidates_follow_from_address_then_domain_then_channel_then_default():
    mailboxes = directory()
    assert [m.id for m in mailboxes.candidates("receipts", "Shop <shop@example.com>")] == ["shop"]
    assert [m.id for m in mailboxes.candidates("receipts", "orders@example.com")] == ["shop"]
    assert [m.id for m in mailboxes.candidates("receipts", "billing@example.com")] == ["shop2"]
    assert [m.id for m in mailboxes.candidates("receipts", "news@example.org")] == ["news"]
    assert [m.id for m in mailboxes.candidates("newsletter", None)] == ["news"]
    assert [m.id for m in mailboxes.candidates("receipts", None)] == ["shop", "shop2"]


def test_a_from_no_mailbox_of_the_pool_may_send_as_is_a_400_on_from():
    mailboxes = directory()
    with pytest.raises(RequestValidationError) as refused:
        mailboxes.candidates("receipts", "stranger@example.com")
    assert set(refused.value.fields) == {"from"}
    assert "stranger@example.com" in refused.value.fields["from"]
    with pytest.raises(RequestValidationError):  # an alias of another pool's mailbox does not count
        mailboxes.candidates("newsletter", "orders@example.com")


def test_unset_means_todays_single_mailbox_that_accepts_any_sender():
    settings = Settings(project="p", default_from="Shop <shop@example.com>", gmail_user="me")
    mailboxes = MailboxDirectory.load(settings)
    assert mailboxes.ids() == ["default"]
    only = mailboxes.get("default")
    assert only.limits.unlimited and only.address == "shop@example.com"
    assert [m.id for m in mailboxes.candidates("anything", "whoever@elsewhere.test")] == ["default"]


def test_loaded_from_json_setting_and_from_a_toml_file(tmp_path):
    settings = Settings.from_env({"GOOGLE_CLOUD_PROJECT": "p", "SAFESEND_MAILBOXES_JSON": json.dumps(DOC)})
    assert sorted(MailboxDirectory.load(settings).ids()) == ["news", "shop", "shop2"]
    path = tmp_path / "mailboxes.toml"
    path.write_text(
        '[defaults]\nlimits = "trial"\n[mailboxes.solo]\naddress = "solo@example.com"\ntoken_secret = "t"\n'
    )
    loaded = MailboxDirectory.load(SimpleNamespace(mailboxes_file=str(path), mailboxes_json=None))
    assert loaded.get("solo").limits == PRESETS["trial"]
    with pytest.raises(ConfigurationError, match="not both"):
        MailboxDirectory.load(SimpleNamespace(mailboxes_file=str(path), mailboxes_json="{}"))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"mailboxes": {"Bad_Id": {"address": "a@b.co", "token_secret": "t"}}}, "an id is"),
        ({"mailboxes": {"a": {"token_secret": "t"}}}, "address is required"),
        ({"mailboxes": {"a": {"address": "a@b.co"}}}, "exactly one of"),
        ({"mailboxes": {"a": {"address": "a@b.co", "token_secret": "t", "delegated_user": "a@b.co"}}}, "exactly one"),
        ({"mailboxes": {"a": {"address": "a@b.co", "token_secret": "t", "limits": "huge"}}}, "unknown limits preset"),
        ({"mailboxes": {"a": {"address": "a@b.co", "token_secret": "t", "limits": {"units_per_minute": 0}}}}, ">= 1"),
        (
            {"mailboxes": {"a": {"address": "a@b.co", "token_secret": "t", "limits": {"recipients_per_message": 500}}}},
            "may not exceed",
        ),
        ({"mailboxes": {"a": {"address": "a@b.co", "token_secret": "t", "safety_share": 1.5}}}, "safety_share"),
        ({"mailboxes": {"a": {"address": "a@b.co", "token_secret": "t", "send_as": "x"}}}, "send_as"),
        ({"mailboxes": {"a": {"address": "a@b.co", "token_secret": "t", "colour": "red"}}}, "unknown settings"),
        ({"pools": {"default": ["nope"]}}, "unknown mailbox"),
        ({"pools": {"channels": {"x": []}}}, "empty pool"),
        ({"pools": {"from": {"not a domain": ["shop"]}}}, "neither an email address nor a domain"),
        ({"mailboxes": {}}, "is empty"),
    ],
)
def test_bad_configuration_fails_at_start_up_naming_the_fault(changes, message):
    with pytest.raises(ConfigurationError, match=message):
        directory(**changes)


def test_limits_are_required_for_a_configured_mailbox():
    with pytest.raises(ConfigurationError, match="limits are required"):
        MailboxDirectory.from_mapping({"mailboxes": {"a": {"address": "a@b.co", "token_secret": "t"}}})


def test_a_pool_for_an_unknown_channel_is_a_start_up_error():
    directory().check_channels(["newsletter", "receipts"])
    with pytest.raises(ConfigurationError, match="newsletter"):
        directory().check_channels(["receipts"])


def test_bad_json_setting_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match="not JSON"):
        MailboxDirectory.load(SimpleNamespace(mailboxes_file=None, mailboxes_json="{oops"))


def test_preflight_checks_the_mailbox_configuration_at_start_up():
    from safesend.bootstrap.runtime import preflight

    base = {
        "GOOGLE_CLOUD_PROJECT": "p",
        "SAFESEND_AUTH_DISABLED": "1",
        "SAFESEND_DEFAULT_FROM": "Shop <shop@example.com>",
    }
    preflight(Settings.from_env(base))  # unset: today's mailbox
    good = {**DOC, "pools": {"channels": {"transactional": ["shop"]}}}
    preflight(Settings.from_env({**base, "SAFESEND_MAILBOXES_JSON": json.dumps(good)}))
    with pytest.raises(ConfigurationError, match="unknown channel"):
        preflight(Settings.from_env({**base, "SAFESEND_MAILBOXES_JSON": json.dumps(DOC)}))  # no newsletter channel
    only_news = {**DOC, "pools": {"default": ["news"]}}
    with pytest.raises(ConfigurationError, match="SAFESEND_DEFAULT_FROM"):
        preflight(Settings.from_env({**base, "SAFESEND_MAILBOXES_JSON": json.dumps(only_news)}))
    with pytest.raises(ConfigurationError, match="limits are required"):
        bad = {"mailboxes": {"a": {"address": "a@b.co", "token_secret": "t"}}}
        preflight(Settings.from_env({**base, "SAFESEND_MAILBOXES_JSON": json.dumps(bad)}))
