"""What callers see of a job, and the HTTP status that goes with each state."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .model import Job
from .states import SETTLED_STATES, State

# n8n's Retry On Fail retries every non-2xx: in-flight and reconciling must be 2xx (202).
_STATUS_BY_STATE = {State.SENT: 200, State.CANCELLED: 200, State.FAILED: 422}


def http_status_for(job: Job) -> int:
    return _STATUS_BY_STATE.get(job.state, 202)


def retry_after_s(job: Job, now: datetime, floor_s: int = 1, ceiling_s: int = 300) -> int | None:
    """When polling /status is worth it again (a 202 Retry-After): the job's next due time, bounded.
    None for settled jobs, including review: that one waits for a person, not for time."""
    if job.state in SETTLED_STATES:
        return None
    if job.next_check_at is None:
        return floor_s * 5
    seconds = (job.next_check_at - now).total_seconds()
    return int(min(max(seconds, floor_s), ceiling_s) + 0.999)


def job_view(job: Job, *, replayed: bool | None = None, with_events: bool = False) -> dict[str, Any]:
    view: dict[str, Any] = {
        "job_id": job.id,
        "message_id": job.message_id,
        "state": job.state.value,
        "provider_ref": job.provider_ref,
        "attempts": job.attempts,
        "verified": job.verified,
        "channel": job.channel,
        "next_check_at": _iso(job.next_check_at),
        "review_reason": job.review_reason,
        "error": job.last_error if job.state is not State.SENT else None,
        "created_at": _iso(job.created_at),
        "updated_at": _iso(job.updated_at),
    }
    if replayed is not None:
        view["replayed"] = replayed
    if with_events:
        view["dedup_key"] = job.dedup_key
        view["events"] = [{k: _iso(v) if isinstance(v, datetime) else v for k, v in e.items()}
                          for e in job.events]
        view["events_dropped"] = job.events_dropped
        view["mailbox_hits"] = job.mailbox_hits
    return view


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None
