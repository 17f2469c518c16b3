"""classify: a failure is 'not accepted' only when it proves Gmail never took the message."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safesend.classify import TransportErrorKind, classify_http, classify_transport, crash_failure
from safesend.model import Bucket

PROPS = settings(max_examples=200, deadline=None)
NOT, MAYBE = Bucket.NOT_ACCEPTED, Bucket.MAYBE_ACCEPTED
RATE_LIMIT_REASONS = ["rateLimitExceeded", "userRateLimitExceeded", "dailyLimitExceeded", "quotaExceeded"]

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
    expected = status in (401, 408, 429) or (status == 403 and reason in RATE_LIMIT_REASONS)
    assert classify_http(status, reason).retryable is expected


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
