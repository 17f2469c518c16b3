"""What `GET /mailboxes` answers: each sender mailbox's budget as operators need it. Pure.

For each mailbox: used and limit for the minute (quota units) and the day (messages, recipients),
its backlog of queued jobs, the next free slot, and its state (ok / slowed / exhausted), plus the
Retry-After a new job would get there. The limits shown are the ones safesend enforces (the
admitted rate, the safety share of the daily limits) beside Gmail's configured ones. Never a
credential, nor the name of the secret that holds one: only how the mailbox authenticates.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from .mailbox_budget import MailboxSnapshot
from .mailboxes import Mailbox, MailboxDirectory
from .model import iso
from .pacing import retry_after_s


def _auth(mailbox: Mailbox) -> str:
    if mailbox.token_secret:
        return "token"
    return "delegated" if mailbox.delegated_user else "settings"


def mailbox_view(mailbox: Mailbox, snapshot: MailboxSnapshot, backlog: int, now: datetime) -> dict[str, Any]:
    """One mailbox's entry of the /mailboxes answer."""
    limits = mailbox.limits
    return {
        "id": mailbox.id,
        "address": mailbox.address or None,
        "auth": _auth(mailbox),
        "state": snapshot.state,
        "minute": {
            "units_used": snapshot.minute_used,
            "units_limit": snapshot.minute_limit,
            "units_configured": snapshot.minute_configured,
        },
        "day": {
            "messages_used": snapshot.day_messages,
            "messages_limit": snapshot.day_messages_limit,
            "messages_configured": limits.messages_per_day,
            "recipients_used": snapshot.day_recipients,
            "recipients_limit": snapshot.day_recipients_limit,
            "recipients_configured": limits.recipients_per_day,
            "safety_share": mailbox.safety_share,
        },
        "recipients_per_message": limits.recipients_per_message,
        "backlog": backlog,
        "next_free_at": iso(snapshot.next_free_at) if snapshot.next_free_at and snapshot.next_free_at > now else None,
        "exhausted_until": iso(snapshot.exhausted_until),
        "retry_after_s": retry_after_s(snapshot, backlog, now) if backlog or snapshot.state != "ok" else None,
    }


def mailboxes_view(
    directory: MailboxDirectory,
    snapshots: Mapping[str, MailboxSnapshot],
    backlogs: Mapping[str, int],
    now: datetime,
) -> dict[str, Any]:
    """The whole answer: every configured mailbox in configuration order, and the pools. A mailbox
    without a snapshot (its ledger could not be read) is listed with state `unknown`, never as ok."""
    entries = []
    for mailbox in directory:
        snapshot = snapshots.get(mailbox.id)
        if snapshot is None:
            entries.append({"id": mailbox.id, "address": mailbox.address or None, "state": "unknown"})
        else:
            entries.append(mailbox_view(mailbox, snapshot, backlogs.get(mailbox.id, 0), now))
    pools = directory.pools
    return {
        "as_of": iso(now),
        "mailboxes": entries,
        "pools": {
            "default": list(pools.default),
            "channels": {name: list(ids) for name, ids in sorted(pools.channels.items())},
            "from": {key: list(ids) for key, ids in sorted(pools.senders.items())},
        },
    }
