"""graph_classify: a Graph sendMail failure is 'not accepted' only when Graph refused before submitting."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safesend.core.classify import RefusalKind, refusal_kind
from safesend.core.graph_classify import classify_graph, graph_error_code, retry_after_seconds
from safesend.core.model import Bucket
from tests.props import examples

PROPS = settings(max_examples=examples(200), deadline=None)
NOT, MAYBE = Bucket.NOT_ACCEPTED, Bucket.MAYBE_ACCEPTED

# (status, Graph error code) -> (bucket, retryable), as documented in graph_classify.py.
TABLE = [
    (400, "ErrorMimeContentInvalidBase64String", NOT, False),
    (400, "ErrorInvalidRecipients", NOT, False),
    (401, "InvalidAuthenticationToken", NOT, True),
    (403, "ErrorAccessDenied", NOT, False),
    (404, "ErrorInvalidUser", NOT, False),
    (408, None, MAYBE, False),
    (429, "ApplicationThrottled", NOT, True),
    (500, "ErrorInternalServerError", MAYBE, False),
    (502, None, MAYBE, False),
    (503, "ServiceUnavailable", MAYBE, False),
    (504, "GatewayTimeout", MAYBE, False),
]


@pytest.mark.parametrize(("status", "code", "bucket", "retryable"), TABLE)
def test_documented_answers_fall_in_their_bucket(
    status: int, code: str | None, bucket: Bucket, retryable: bool
) -> None:
    failure = classify_graph(status, code, "detail", 12.0)
    assert (failure.bucket, failure.retryable, failure.status, failure.retry_after_s) == (
        bucket,
        retryable,
        status,
        12.0,
    )
    assert failure.code == f"graph_{status}" + (f"_{code}" if code else "")


def test_a_throttled_send_paces_the_mailbox_like_gmails_rate_limit() -> None:
    assert refusal_kind(classify_graph(429, "ApplicationThrottled", retry_after_s=30.0)) is RefusalKind.RATE_LIMIT
    assert refusal_kind(classify_graph(401)) is RefusalKind.AUTH
    assert refusal_kind(classify_graph(503, retry_after_s=30.0)) is None  # maybe accepted: no pacing


@PROPS
@given(status=st.integers(500, 599), code=st.none() | st.text(max_size=30), wait=st.none() | st.floats(0, 3600))
def test_every_5xx_is_maybe_accepted_even_with_retry_after(status: int, code: str | None, wait: float | None) -> None:
    failure = classify_graph(status, code, retry_after_s=wait)
    assert failure.bucket is MAYBE and not failure.retryable


@PROPS
@given(status=st.integers(400, 499).filter(lambda s: s != 408), code=st.none() | st.text(max_size=30))
def test_every_4xx_but_408_is_a_refusal(status: int, code: str | None) -> None:
    assert classify_graph(status, code).bucket is NOT


@PROPS
@given(status=st.integers(-1000, 1000), code=st.none() | st.text(max_size=80))
def test_never_raises_and_never_puts_an_implausible_code_in_the_failure_code(status: int, code: str | None) -> None:
    failure = classify_graph(status, code)
    assert failure.code.startswith(f"graph_{status}")
    suffix = failure.code[len(f"graph_{status}") :]
    assert suffix == "" or (suffix[1:] == code and graph_error_code(code) == code)
    if not 400 <= status < 500:
        assert failure.bucket is MAYBE


@pytest.mark.parametrize(
    ("header", "seconds"), [("30", 30.0), (" 7 ", 7.0), ("0", 0.0), ("-1", None), ("soon", None), (None, None)]
)
def test_retry_after_is_delta_seconds_only(header: str | None, seconds: float | None) -> None:
    assert retry_after_seconds(header) == seconds
    assert retry_after_seconds("Wed, 21 Oct 2026 07:28:00 GMT") is None
    assert retry_after_seconds(str(10 * 86400)) is None
