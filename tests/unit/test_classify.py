"""classify: a failure is 'not accepted' only when it proves Gmail never took the message."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safesend.core import lifecycle
from safesend.core.classify import (
    DAILY_LIMIT_CODE,
    DAILY_LIMIT_WAIT_S,
    RefusalKind,
    TransportErrorKind,
    classify_http,
    classify_transport,
    crash_failure,
    is_daily_limit,
    refusal_kind,
)
from safesend.core.lifecycle import ReviewReason, Timing
from safesend.core.model import Bucket
from safesend.core.policy import ChannelPolicy
from safesend.core.states import State
from tests.props import examples

PROPS = settings(max_examples=examples(200), deadline=None)
NOT, MAYBE = Bucket.NOT_ACCEPTED, Bucket.MAYBE_ACCEPTED
RATE_LIMIT_REASONS = ["rateLimitExceeded", "userRateLimitExceeded", "quotaExceeded"]
# Gmail's daily sending-limit refusal, as its guide and reported answers word it (sources in classify.py).
MAIL_SENDING = "User-rate limit exceeded.  Retry after 2026-12-01T15:03:49.658Z (Mail sending)"
# The per-minute quota refusal, as reported (same reason, no "(Mail sending)").
PER_MINUTE = (
    "Quota exceeded for quota metric 'Queries' and limit 'Queries per minute per user' of service "
    "'gmail.googleapis.com' for consumer 'project_number:123'."
)

# (status, reason) -> (bucket, retryable), from the Gmail error guide as documented in classify.py.
HTTP_TABLE = [
    (400, None, NOT, False),
    (400, "invalidArgument", NOT, False),
    (403, None, NOT, False),
    (403, "forbidden", NOT, False),
    (403, "domainPolicy", NOT, False),
    (404, None, NOT, False),
    (404, "notFound", NOT, False),
    (401, None, NOT, True),
    (401, "authError", NOT, True),
    (408, None, NOT, True),
    (429, None, NOT, True),
    (429, "rateLimitExceeded", NOT, True),
    *[(403, r, NOT, True) for r in RATE_LIMIT_REASONS],
    (500, None, MAYBE, False),
    (500, "backendError", MAYBE, False),
    (502, None, MAYBE, False),
    (503, "backendError", MAYBE, False),
    (504, None, MAYBE, False),
]


@pytest.mark.parametrize("status,reason,bucket,retryable", HTTP_TABLE, ids=[f"{s}-{r}" for s, r, _, _ in HTTP_TABLE])
def test_http_status_maps_to_documented_bucket(status, reason, bucket, retryable):
    failure = classify_http(status, reason, detail="d", retry_after_s=None)
    assert (failure.bucket, failure.retryable) == (bucket, retryable)
    assert failure.status == status
    assert failure.code == (f"http_{status}_{reason}" if reason else f"http_{status}")
    assert failure.detail == "d"


@PROPS
@given(status=st.integers(500, 599), reason=st.none() | st.sampled_from(["backendError", "x", *RATE_LIMIT_REASONS]))
def test_every_5xx_is_maybe_accepted_and_never_blindly_retried(status, reason):
    failure = classify_http(status, reason)
    assert failure.bucket is MAYBE
    assert failure.retryable is False


@PROPS
@given(status=st.integers(400, 499), reason=st.none() | st.text(max_size=20))
def test_every_4xx_is_not_accepted(status, reason):
    assert classify_http(status, reason).bucket is NOT


@PROPS
@given(status=st.integers(400, 499), reason=st.none() | st.text(max_size=20))
def test_4xx_is_retryable_only_for_401_408_429_and_rate_limit_403(status, reason):
    expected = status in (401, 408, 429) or (status == 403 and reason in [*RATE_LIMIT_REASONS, "dailyLimitExceeded"])
    assert classify_http(status, reason).retryable is expected


DAILY_TABLE = [
    (429, "rateLimitExceeded", MAIL_SENDING),
    (403, "rateLimitExceeded", MAIL_SENDING),
    (403, "userRateLimitExceeded", "User-rate limit exceeded (mail SENDING)"),
    (403, "dailyLimitExceeded", "Daily Limit Exceeded"),
    (429, "dailyLimitExceeded", ""),
]


@pytest.mark.parametrize("status,reason,message", DAILY_TABLE)
def test_the_daily_sending_limit_is_its_own_kind_not_a_rate_limit(status, reason, message):
    failure = classify_http(status, reason, detail=message)
    assert is_daily_limit(status, reason, message)
    assert failure.bucket is NOT  # a refusal: Gmail took nothing
    assert failure.code == DAILY_LIMIT_CODE and failure.status == status
    assert refusal_kind(failure) is RefusalKind.DAILY_LIMIT
    assert failure.retryable  # it may go out later, from this mailbox once the day allows, or another
    assert failure.retry_after_s == DAILY_LIMIT_WAIT_S  # not before the rolling 24 h allow it
    assert classify_http(status, reason, detail=message, retry_after_s=2 * DAILY_LIMIT_WAIT_S).retry_after_s == (
        2 * DAILY_LIMIT_WAIT_S
    )


RATE_TABLE = [
    (429, "rateLimitExceeded", PER_MINUTE),
    (403, "rateLimitExceeded", PER_MINUTE),
    (429, "rateLimitExceeded", "Resource has been exhausted (e.g. check quota)."),
    (403, "userRateLimitExceeded", "User-rate limit exceeded"),
    (429, None, ""),
]


@pytest.mark.parametrize("status,reason,message", RATE_TABLE)
def test_per_minute_rate_limits_stay_rate_limits(status, reason, message):
    failure = classify_http(status, reason, detail=message, retry_after_s=3.0)
    assert not is_daily_limit(status, reason, message)
    assert (failure.bucket, failure.retryable, failure.retry_after_s) == (NOT, True, 3.0)
    assert refusal_kind(failure) is RefusalKind.RATE_LIMIT


@PROPS
@given(status=st.integers(100, 599).filter(lambda s: s not in (403, 429)), reason=st.none() | st.text(max_size=20))
def test_only_403_and_429_can_be_the_daily_limit(status, reason):
    assert not is_daily_limit(status, reason, MAIL_SENDING)
    assert classify_http(status, reason, detail=MAIL_SENDING).code != DAILY_LIMIT_CODE


def test_refusal_kinds_of_other_failures():
    assert refusal_kind(classify_http(401, "authError")) is RefusalKind.AUTH
    assert refusal_kind(classify_http(400, "invalidArgument")) is RefusalKind.OTHER
    assert refusal_kind(classify_http(403, "forbidden")) is RefusalKind.OTHER
    assert refusal_kind(classify_http(503, "backendError", detail=MAIL_SENDING)) is None  # maybe accepted
    assert refusal_kind(classify_transport(TransportErrorKind.DNS)) is None  # no HTTP answer at all


T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _refused_once(outcome):
    job = lifecycle.new_job("j1", "k1", "<m1@x>", "default", {}, "h", T0)
    job = lifecycle.start_attempt(job, T0, "owner-1", Timing())
    return lifecycle.record_outcome(job, outcome, "owner-1", T0, ChannelPolicy(name="default"), Timing(), min)


def test_a_daily_limit_refusal_is_not_retried_against_the_exhausted_mailbox_within_the_hour():
    # Filed with the rate limits, it was retried with backoff for the whole 1 h retry horizon, each
    # retry refused again (and repeated excess can get an account suspended). Until pacing moves it to
    # another mailbox or queues it, it stops at once: nothing went out, a person hears it.
    job = _refused_once(classify_http(429, "rateLimitExceeded", detail=MAIL_SENDING))
    assert job.state is State.FAILED and job.review_reason == ReviewReason.RETRY_HORIZON
    assert job.attempts == 1 and job.maybe_landed == 0
    rate_limited = _refused_once(classify_http(429, "rateLimitExceeded", detail=PER_MINUTE))
    assert rate_limited.state is State.RETRY_WAIT  # a per-minute refusal is still retried soon


@PROPS
@given(status=st.integers(100, 399))
def test_a_success_or_odd_status_given_to_classify_http_is_never_treated_as_safe_to_resend(status):
    # 2xx is handled as Accepted by the mailer and never reaches classify_http; should a 1xx/2xx/3xx
    # ever get here, it must fall on the conservative side (maybe accepted -> ask the mailbox).
    failure = classify_http(status)
    assert failure.bucket is MAYBE
    assert failure.retryable is False


@pytest.mark.parametrize("status,reason", [(429, None), (403, "rateLimitExceeded"), (503, None), (400, None)])
def test_retry_after_is_carried(status, reason):
    assert classify_http(status, reason, retry_after_s=17.5).retry_after_s == 17.5
    assert classify_http(status, reason).retry_after_s is None


TRANSPORT_TABLE = {
    "dns": (NOT, True),
    "connect_refused": (NOT, True),
    "connect_failed": (NOT, True),
    "tls_handshake": (NOT, True),
    "timeout": (MAYBE, False),
    "disconnected_after_write": (MAYBE, False),
    "protocol": (MAYBE, False),
    "body_too_large": (MAYBE, False),
    "unexpected": (MAYBE, False),
}


def test_transport_table_covers_every_fault():
    assert {f.value for f in TransportErrorKind} == set(TRANSPORT_TABLE)


@pytest.mark.parametrize("fault", sorted(TRANSPORT_TABLE))
def test_transport_fault_maps_to_documented_bucket(fault):
    failure = classify_transport(TransportErrorKind(fault), "some detail")
    assert (failure.bucket, failure.retryable) == TRANSPORT_TABLE[fault]
    assert failure.code == fault
    assert failure.detail == "some detail"
    assert failure.status is None


def test_crash_failure_is_maybe_accepted():
    failure = crash_failure()
    assert failure.bucket is MAYBE
    assert failure.retryable is False
    assert failure.code == "lease_expired"
    assert crash_failure("boom").detail == "boom"


def test_failure_as_dict_is_json_ready_and_truncates_detail():
    data = classify_http(503, "backendError", detail="x" * 2000).as_dict()
    assert data == {
        "bucket": "maybe_accepted",
        "retryable": False,
        "code": "http_503_backendError",
        "detail": "x" * 500,
        "status": 503,
    }
