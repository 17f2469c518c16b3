"""The log lines alerts are built on: one `event` name each, with the fields its metric reads.

infra/modules/safesend/monitoring.json turns each event into a log-based metric (filter
`jsonPayload.event="<name>"`) and alerts on it. Renaming an event or dropping a field would make
an alert go quiet without any error, so the names and fields live here once, the code logs them
through `emit`, and tests/unit/test_signals.py pins both and drives the code through each path.
Never put bodies, addresses or secrets in these fields: ids, counts, reasons and codes only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..logs import log_always


@dataclass(frozen=True)
class Signal:
    event: str
    fields: tuple[str, ...]  # every line of this event carries these (None where unknown)
    meaning: str


JOB_NEEDS_REVIEW = "job_needs_review"
DUPLICATE_FOUND = "duplicate_found"
SWEEP_COMPLETED = "sweep_completed"
GMAIL_REFUSED = "gmail_refused"
STORE_UNAVAILABLE = "store_unavailable"
INDEX_MISSING = "index_missing"
NOTIFY_DELIVERY_FAILED = "notify_delivery_failed"
CALLBACK_GIVEN_UP = "callback_given_up"
REVIEWER_NOTICE_OVERDUE = "reviewer_notice_overdue"
INDEX_LAG_OBSERVED = "index_lag_observed"
INDEX_WINDOW_RAISED = "index_window_raised"
INDEX_LAG_BEYOND_HORIZON = "index_lag_beyond_horizon"
INTERNAL_CALL_REFUSED = "internal_call_refused"

SIGNALS: dict[str, Signal] = {
    s.event: s
    for s in (
        Signal(JOB_NEEDS_REVIEW, ("job_id", "state", "reason"), "a job entered review or failed: a person must decide"),
        Signal(DUPLICATE_FOUND, ("job_id", "reason", "copies"), "more than one copy of a message exists"),
        Signal(
            SWEEP_COMPLETED,
            ("due", "advanced", "overdue", "oldest_overdue_s", "oldest_review_s", "errors"),
            "a sweep ran to its end (the dead man's switch counts these)",
        ),
        Signal(
            GMAIL_REFUSED,
            ("job_id", "reason", "code", "status", "mailbox"),
            "Gmail refused a send (rate, daily limit...), from this sender mailbox",
        ),
        Signal(STORE_UNAVAILABLE, ("where", "error"), "the job store could not be reached"),
        Signal(INDEX_MISSING, ("error",), "a Firestore composite index is missing: no due job can be found"),
        Signal(NOTIFY_DELIVERY_FAILED, ("job_id", "kind", "notice_id", "status"), "a notice POST failed"),
        Signal(CALLBACK_GIVEN_UP, ("job_id", "kind", "notice_id", "error"), "a notice will never be delivered"),
        Signal(
            REVIEWER_NOTICE_OVERDUE,
            ("job_id", "kind", "notice_id", "tries", "error"),
            "a reviewer notice still fails past the callback horizon",
        ),
        Signal(
            INDEX_LAG_OBSERVED,
            ("mailbox", "kind", "lag_s", "beyond_horizon"),
            "a sampled send was found by the search (kind search) or in the change log (history) this long "
            "after its accept",
        ),
        Signal(
            INDEX_WINDOW_RAISED,
            ("mailbox", "window_s", "previous_s", "observed_s"),
            "a mailbox's index lag passed its unknown window: the window was raised (lag_watch.py)",
        ),
        Signal(
            INDEX_LAG_BEYOND_HORIZON,
            ("mailbox", "lag_s", "horizon_s"),
            "a sampled send was still not found by the search at the verification horizon",
        ),
        Signal(
            INTERNAL_CALL_REFUSED,
            ("path", "status", "reason"),
            "a call to an internal endpoint (sweep, reconcile, notify) was refused by authentication: the "
            "Scheduler, Cloud Tasks or Pub/Sub cannot reach the service",
        ),
    )
}

# A job due this long ago and still found by a sweep counts as overdue on the sweep line.
OVERDUE_AFTER_S = 300.0


def emit(event: str, level: int, message: str, **fields: Any) -> None:
    """One signal line: `event` plus every field the registry names (None when the caller has none),
    so a metric's label extractor always finds its field. Written at any SAFESEND_LOG_LEVEL."""
    required = {name: fields.pop(name, None) for name in SIGNALS[event].fields}
    log_always(level, message, event=event, **required, **fields)


def refusal_reason(code: str | None, status: int | None) -> str:
    """Gmail refusals grouped the way the alerts need them: the daily limit, the rate limits, the rest
    by their code."""
    text = code or ""
    if text == "daily_limit":
        return "daily_limit"
    if status == 429 or "RateLimitExceeded" in text or "rateLimitExceeded" in text:
        return "rate_limit"
    return text or "unknown"
