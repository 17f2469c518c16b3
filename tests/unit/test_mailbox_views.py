"""The /mailboxes answer (safesend.core.mailbox_views), built from ledger snapshots."""

from __future__ import annotations

import json
from datetime import timedelta

from devstack.memory_ledger import InMemoryMailboxLedger
from safesend.core.mailbox_budget import ARRIVAL_MARGIN_S
from safesend.core.mailbox_views import mailboxes_view
from safesend.core.mailboxes import MailboxDirectory
from tests.ledger_properties import START

DOC = {
    "defaults": {"limits": "workspace"},
    "mailboxes": {
        "shop": {"address": "shop@example.com", "delegated_user": "shop@example.com"},
        "news": {"address": "news@example.com", "token_secret": "gmail-token-news", "limits": "trial"},
    },
    "pools": {"channels": {"newsletter": ["news"]}},
}


def at(seconds: float):
    return START + timedelta(seconds=seconds)


def test_each_mailbox_shows_used_and_limit_for_minute_and_day_backlog_next_slot_and_state():
    directory = MailboxDirectory.from_mapping(DOC)
    shop, news = directory.get("shop"), directory.get("news")
    ledger = InMemoryMailboxLedger()
    for i in range(60):
        ledger.reserve(shop, 100, 2, at(i * 0.1))
    ledger.penalise(news, "daily", at(1), until=at(7200))
    now = at(10)
    view = mailboxes_view(directory, {m.id: ledger.snapshot(m, now) for m in directory}, {"shop": 30, "news": 4}, now)
    assert json.loads(json.dumps(view)) == view  # plain JSON
    shop_view, news_view = view["mailboxes"]
    assert shop_view == {
        "id": "shop",
        "address": "shop@example.com",
        "auth": "delegated",
        "state": "ok",
        "minute": {"units_used": 6000, "units_limit": 6000, "units_configured": 6000},
        "day": {
            "messages_used": 60,
            "messages_limit": 1900,
            "messages_configured": 2000,
            "recipients_used": 120,
            "recipients_limit": 9500,
            "recipients_configured": 10_000,
            "safety_share": 0.95,
        },
        "recipients_per_message": 100,
        "backlog": 30,
        "next_free_at": at(61 + ARRIVAL_MARGIN_S).isoformat(),
        "exhausted_until": None,
        "retry_after_s": 51 + ARRIVAL_MARGIN_S + 30,  # the next slot in 53 s, then one send a second
    }
    assert news_view["state"] == "exhausted" and news_view["exhausted_until"] == at(7200).isoformat()
    assert news_view["retry_after_s"] == 7200 - 10 + 4 and news_view["auth"] == "token"
    assert view["pools"] == {"default": ["shop", "news"], "channels": {"newsletter": ["news"]}, "from": {}}
    assert "gmail-token-news" not in json.dumps(view)  # never the secret's name


def test_a_mailbox_whose_ledger_could_not_be_read_is_unknown_not_ok():
    directory = MailboxDirectory.from_mapping(DOC)
    view = mailboxes_view(directory, {}, {}, at(0))
    assert [entry["state"] for entry in view["mailboxes"]] == ["unknown", "unknown"]


def test_todays_single_mailbox_shows_no_limits():
    directory = MailboxDirectory.default("Shop <shop@example.com>")
    ledger = InMemoryMailboxLedger()
    only = directory.get("default")
    ledger.reserve(only, 100, 1, at(0))
    view = mailboxes_view(directory, {"default": ledger.snapshot(only, at(1))}, {}, at(1))
    entry = view["mailboxes"][0]
    assert (entry["state"], entry["auth"], entry["minute"]["units_limit"], entry["day"]["messages_limit"]) == (
        "ok",
        "settings",
        None,
        None,
    )
    assert entry["retry_after_s"] is None and entry["next_free_at"] is None
