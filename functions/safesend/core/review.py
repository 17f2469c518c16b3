"""The review item: everything a human needs to settle a job, and nothing they must not see (no body)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from .keys import bare_message_id
from .model import Job, event_as_json, iso

GMAIL_SEARCH_URL = "https://mail.google.com/mail/u/0/#search/"
_ATTEMPT_EVENTS = frozenset(
    {
        "attempt_started",
        "accepted",
        "attempt_failed",
        "outcome_unknown",
        "late_failure",
        "late_accept",
        "mailbox_checked",
        "found_in_mailbox",
        "entered_review",
        "entered_failed",
        "verification_checked",
        "verified",
    }
)


def gmail_search_link(message_id: str, sent_only: bool = False) -> str:
    """Opens the sender's mailbox on a search for this Message-ID. Our Message-IDs are predictable,
    so anyone can mail the mailbox a message carrying one: `sent_only` narrows to our sent mail."""
    query = f"rfc822msgid:{bare_message_id(message_id)}" + (" in:sent" if sent_only else "")
    return GMAIL_SEARCH_URL + quote(query, safe="")


def not_sent_hits(hits: list[dict[str, Any]]) -> list[str]:
    """Gmail ids of search hits without the SENT label: received (or planted) messages carrying our
    Message-ID, never evidence that ours went out. Only SENT hits count as copies."""
    return [str(h.get("gmail_id")) for h in hits if "SENT" not in (h.get("label_ids") or [])]


def review_item(job: Job, include_body: bool = False) -> dict[str, Any]:
    """JSON-ready review item. `review_id` is stable per entry into review: consumers dedupe on it.

    The body stays out unless the channel's policy opts in (`review_includes_body`).
    """
    payload = job.payload
    item = {
        "review_id": f"{job.id}:{job.review_entries}",
        "job_id": job.id,
        "dedup_key": job.dedup_key,
        "message_id": job.message_id,
        "channel": job.channel,
        "state": job.state.value,
        "reason": job.review_reason,
        "recipients": {k: list(payload.get(k) or []) for k in ("to", "cc", "bcc")},
        "from": payload.get("from"),
        "subject": payload.get("subject"),
        "attempts": job.attempts,
        "last_error": job.last_error,
        "history": [event_as_json(e) for e in job.events if e.get("kind") in _ATTEMPT_EVENTS],
        "mailbox_hits": job.mailbox_hits,
        "not_sent_hits": not_sent_hits(job.mailbox_hits),  # found by the search, but not copies of ours
        "known_copies": list(job.known_copies),  # Gmail ids of every copy known to exist (SENT)
        "provider_ref": job.provider_ref,
        "gmail_search_url": gmail_search_link(job.message_id),
        "gmail_sent_search_url": gmail_search_link(job.message_id, sent_only=True),
        "created_at": iso(job.created_at),
        "entered_at": iso(job.updated_at),
    }
    if include_body:
        item["body"] = {"text": payload.get("text"), "html": payload.get("html")}
    return item


def review_attributes(job: Job) -> dict[str, str]:
    return {
        "job_id": job.id,
        "reason": job.review_reason or "",
        "channel": job.channel,
        "review_id": f"{job.id}:{job.review_entries}",
    }
