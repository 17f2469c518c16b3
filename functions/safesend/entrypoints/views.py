"""What callers see of a job, and the HTTP status that goes with each state."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from ..core.lifecycle import current_review_id
from ..core.model import Job, event_as_json, iso
from ..core.pacing import MAX_RETRY_AFTER_S
from ..core.states import SETTLED_STATES, State
from ..logs import mask_emails

# n8n's Retry On Fail retries every non-2xx: in-flight and reconciling must be 2xx (202).
_STATUS_BY_STATE = {State.SENT: 200, State.CANCELLED: 200, State.FAILED: 422}


def http_status_for(job: Job) -> int:
    return _STATUS_BY_STATE.get(job.state, 202)


# A queued job's Retry-After is its honest send estimate, up to pacing's bound (a daily limit: hours).
QUEUED_CEILING_S = MAX_RETRY_AFTER_S


def retry_after_s(job: Job, now: datetime, floor_s: int = 1, ceiling_s: int = 300) -> int | None:
    """When polling /status is worth it again (a 202 Retry-After): the job's next due time, bounded.
    None for settled jobs, including review: that one waits for a person, not for time. A queued
    job: when its mailbox's budget should let it go (its estimate from the mailbox's backlog and
    admitted rate, pacing.retry_after_s), however far."""
    if job.state in SETTLED_STATES:
        return None
    if job.state is State.QUEUED and job.queue_eta is not None:
        seconds = (job.queue_eta - now).total_seconds()
        return int(min(max(seconds, floor_s), QUEUED_CEILING_S) + 0.999)
    if job.next_check_at is None:
        return floor_s * 5
    seconds = (job.next_check_at - now).total_seconds()
    return int(min(max(seconds, floor_s), ceiling_s) + 0.999)


def what_to_do(job: Job) -> str:
    """The first-level `message` of every job answer: what the caller (an n8n workflow) should do."""
    if job.state is State.SENT:
        if job.verified is not False:
            return "sent once; nothing more to do"
        if job.next_check_at is None:  # acknowledged, or marked sent with no copy to show
            return (
                "sent, accepted by a person (a reviewer's decision, see events): safesend no longer checks "
                "the mailbox for it; nothing more to do"
            )
        return "sent; safesend still checks the mailbox for a second copy (a duplicate would go to review)"
    if job.state is State.FAILED:
        return (
            "Gmail refused this message for good and nothing was sent: fix the cause (see error) and send "
            "it with a new dedup key; retrying this request replays the same answer"
        )
    if job.state is State.REVIEW:
        return (
            f"a person must decide ({job.review_reason}); nothing is sent automatically: wait for the "
            "callback or poll /status, do not resend with a new dedup key"
        )
    if job.state is State.CANCELLED:
        return "cancelled by a reviewer; nothing more will be sent"
    if job.state is State.QUEUED:
        return (
            "queued: its sender mailbox has used its Gmail budget for now (rate or daily limit); it is "
            "sent in order when the mailbox's turn comes, about Retry-After seconds from now. Nothing "
            "failed: wait for the callback or poll /status; never resend with a new dedup key"
        )
    return (
        "accepted; the outcome is not settled yet and safesend works on it by itself: wait for the "
        "callback, or poll /status after Retry-After seconds; never resend with a new dedup key"
    )


def job_view(
    job: Job, *, replayed: bool | None = None, with_events: bool = False, place: int | None = None
) -> dict[str, Any]:
    view: dict[str, Any] = {
        "job_id": job.id,
        "dedup_key": job.dedup_key,
        "message": what_to_do(job),
        "message_id": job.message_id,
        "state": job.state.value,
        "provider_ref": job.provider_ref,
        "attempts": job.attempts,
        "verified": job.verified,
        "channel": job.channel,
        "next_check_at": iso(job.next_check_at),
        "review_reason": job.review_reason,
        # What POST /decide (and the console) must name: the review entry a decision answers.
        "review_id": current_review_id(job),
        # Not `error`: n8n's HTTP Request node takes a top-level `error` in a 2xx body for a failure.
        "last_error": job.last_error if job.state is not State.SENT else None,
        "created_at": iso(job.created_at),
        "updated_at": iso(job.updated_at),
    }
    if job.mailboxes:
        view["mailbox"] = job.mailboxes[-1]
    if job.state is State.QUEUED:
        view["queue"] = {
            "mailbox": job.mailboxes[-1] if job.mailboxes else None,
            "reason": job.queue_reason,
            "since": iso(job.queued_since),
            "eta": iso(job.queue_eta),
            "place": place,  # jobs queued before it at its mailbox (GET /status), 0: next
        }
    if replayed is not None:
        view["replayed"] = replayed
    if with_events:
        view["events"] = [event_as_json(_masked(e)) for e in job.events]
        view["events_dropped"] = job.events_dropped
        view["mailbox_hits"] = job.mailbox_hits
        view["callbacks"] = [_notice_view(n) for n in job.notices]
    return view


def _masked(event: dict[str, Any]) -> dict[str, Any]:
    """A reviewer's address is masked as the logs mask it: callers see that a person decided, not who."""
    return {**event, "reviewer": mask_emails(event["reviewer"])} if event.get("reviewer") else event


def _notice_view(notice: dict[str, Any]) -> dict[str, Any]:
    """A callback notice without its URL (an n8n resume URL is a capability): the host only."""
    state = "delivered" if notice.get("delivered_at") else "given_up" if notice.get("gave_up_at") else "pending"
    return {
        "notice_id": notice["id"],
        "kind": notice.get("kind") or "callback",
        "host": urlsplit(notice["url"]).hostname if notice.get("url") else None,
        "state": state,
        "outcome": notice["payload"].get("state"),
        "tries": notice.get("tries", 0),
        "last_error": notice.get("last_error"),
        "due_at": iso(notice.get("due_at")),
    }
