"""The leased job every store test writes (Firestore, PostgreSQL, the shared contract): one draft, so
each store is exercised with the same fields, and its id follows from the dedup key on every run."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from safesend.core.lifecycle import Timing, new_job, start_attempt
from safesend.core.model import Job

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def draft(key: str = "c:e:o", owner: str = "owner-a", job_id: str | None = None) -> Job:
    """A new job for ``key`` with its first attempt leased to ``owner`` at NOW."""
    job = new_job(
        job_id or f"id{uuid.uuid5(uuid.NAMESPACE_URL, key).hex[:30]}",
        key,
        "<job-x@mail.example.com>",
        "receipts",
        {"to": ["a@example.com"], "subject": "s", "text": "t", "html": None},
        "h" * 64,
        NOW,
    )
    return start_attempt(job, NOW, owner, Timing())
