"""What /health answers: the questions the alerts ask (infra/modules/safesend/monitoring.json),
from the store, so they can be asked locally too. Pure: the service reads, this decides."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .model import Job

LATE_AFTER_SWEEPS = 3  # the dead man's switch: as the alert, late after 3 intervals without a sweep


def health_view(
    last_sweep: dict[str, Any] | None,
    oldest_review: Job | None,
    now: datetime,
    interval_s: float,
    index_lag: dict[str, Any] | None = None,
    notices: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`status` is "ok", or "sweep_late" when no sweep completed for 3 intervals (or ever).
    `index_lag`: per sender mailbox, its measured lags and effective window (lag_watch.lag_view);
    `notices`: the last notice given up and the last reviewer notice overdue (notice_watch)."""
    sweep: dict[str, Any] | None = None
    late = True
    if last_sweep is not None:
        age_s = (now - last_sweep["at"]).total_seconds()
        late = age_s > LATE_AFTER_SWEEPS * interval_s
        sweep = {**last_sweep, "at": last_sweep["at"].isoformat(), "age_s": round(age_s, 1), "late": late}
    review = (
        None
        if oldest_review is None
        else {
            "job_id": oldest_review.id,
            "state": oldest_review.state.value,
            "reason": oldest_review.review_reason,
            "age_s": round((now - oldest_review.updated_at).total_seconds(), 1),
        }
    )
    return {
        "status": "sweep_late" if late else "ok",
        "sweep_interval_s": interval_s,
        "last_sweep": sweep,
        "overdue_jobs": None if last_sweep is None else last_sweep.get("overdue"),
        "oldest_overdue_s": None if last_sweep is None else last_sweep.get("oldest_overdue_s"),
        "oldest_review": review,
        "index_lag": index_lag or {},
        "notices": notices or {},
    }
