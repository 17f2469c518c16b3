"""bench.quota_burst measures what a burst does to a rate-limited mailbox (issue 24's first
measurement). These are the invariants its numbers must keep whatever the pacing: the measurement
itself (today: every job retries alone; `python -m bench.quota_burst` prints the refusals) is the
point of the module, not an assertion here."""

from __future__ import annotations

import pytest

from bench.quota_burst import run

pytestmark = pytest.mark.integration


def test_a_burst_against_a_rate_limited_mailbox_is_measured_consistently() -> None:
    report = run(jobs=30, units_per_minute=600)  # 6 sends a minute: 5 minutes of work at best
    assert report.sent + report.failed == report.jobs and report.other_states == {}  # every caller has an outcome
    assert report.duplicates == 0
    assert report.review_items == report.failed
    # every attempt was either accepted once or refused for rate by the simulator, nothing else
    assert report.attempts_total == report.sent + report.rate_refusals
    assert set(report.gmail_refusals) <= {"rate"}
    # nobody beats the window the simulator enforces: 30 sends at 6 a minute take 5 minutes at least
    assert report.physical_limit_s == pytest.approx(report.sent * 10.0)
    assert report.completion_s is not None and report.completion_s >= report.physical_limit_s - 60.0
