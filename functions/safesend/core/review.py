"""The review item: everything a human needs to settle a job, and nothing they must not see (no body)."""

from __future__ import annotations

from typing import Any

from .mailbox_search import MailboxSearch, gmail_search_link, mailbox_search
from .model import Job, event_as_json, iso

__all__ = ["gmail_search_link", "not_sent_hits", "review_attributes", "review_item"]

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


def not_sent_hits(hits: list[dict[str, Any]]) -> list[str]:
    """Gmail ids of search hits without the SENT label: received (or planted) messages carrying our
    Message-ID, never evidence that ours went out. Only SENT hits count as copies."""
    return [str(h.get("gmail_id")) for h in hits if "SENT" not in (h.get("label_ids") or [])]


def review_item(job: Job, include_body: bool = False, search: MailboxSearch | None = None) -> dict[str, Any]:
    """JSON-ready review item. `review_id` is stable per entry into review: consumers dedupe on it.

    The body stays out unless the channel's policy opts in (`review_includes_body`). `search` is how
    the job's mailbox is searched (mailbox_search.py; Gmail's when not given): a Graph job's item
    carries instructions and no Gmail link, which would find nothing.
    """
    payload = job.payload
    search = search or mailbox_search("gmail", job.message_id)
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
        "mailbox_kind": search.kind,
        "search_label": search.label,
        "gmail_search_url": search.url,  # None for a Graph mailbox: see search_instructions
        "gmail_sent_search_url": search.sent_url,
        "search_instructions": search.instructions,
        "graph_query": search.graph_query,
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
