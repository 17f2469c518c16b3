"""The notices nobody will hear, kept for /health (issue 20.4): the last notice given up for good and
the last reviewer notice past the callback horizon, each one small record in the store, so the
local /health and the console answer what the alerts `callback_given_up` and
`reviewer_notice_overdue` ask. Last writer wins: it says "the latest one, and when", not a count
(the log-based metrics count them)."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from ..core.errors import StoreUnavailableError
from ..core.model import iso
from ..core.ports import JobStore
from ..core.signals import CALLBACK_GIVEN_UP, REVIEWER_NOTICE_OVERDUE, emit
from ..logs import log

RECORDS = (CALLBACK_GIVEN_UP, REVIEWER_NOTICE_OVERDUE)


def note(store: JobStore, event: str, now: datetime, **fields: Any) -> None:
    """Keep the latest notice of `event`; a store that cannot say loses only this record (the signal
    line was written already)."""
    if event not in RECORDS:
        raise ValueError(f"not a notice record: {event}")
    try:
        store.record_op(
            event, {"at": now, **{k: v for k, v in fields.items() if v is None or isinstance(v, (str, int))}}
        )
    except StoreUnavailableError as exc:
        log(logging.WARNING, "notice record not stored", record=event, error=str(exc))


def notices_view(store: JobStore, now: datetime) -> dict[str, Any]:
    """/health's `notices`: per record the latest one (job, kind, notice id, error) and its age, or
    None. Raises StoreUnavailableError."""
    view: dict[str, Any] = {}
    for name in RECORDS:
        record = store.read_op(name)
        if record is None or not isinstance(record.get("at"), datetime):
            view[name] = None
            continue
        view[name] = {**record, "at": iso(record["at"]), "age_s": round((now - record["at"]).total_seconds(), 1)}
    return view


def incident_untold(store: JobStore, now: datetime, kind: str, incident: str, error: str) -> None:
    """A mailbox incident (daily limit, index lag) could not be published to the reviewers: it has no
    job and no outbox to retry it, so it is never silent another way: the `reviewer_notice_overdue`
    alert ("reviewers are not being told") fires on this line, and /health shows it."""
    emit(
        REVIEWER_NOTICE_OVERDUE,
        logging.ERROR,
        "mailbox incident not published: the reviewers were not told",
        job_id=None,
        kind=kind,
        notice_id=incident,
        tries=1,
        error=error[:200],
    )
    note(store, REVIEWER_NOTICE_OVERDUE, now, job_id=None, kind=kind, notice_id=incident)
