"""Hostile or broken answers from the providers (review of session 3): a Retry-After header is read
as ASCII delta-seconds only, for Graph and Gmail alike. Python's str.isdigit() says yes to "²" (a
byte an HTTP header can carry: headers are latin-1), which float() then refuses, and float() says yes
to "nan", "inf" and "-5": each would raise later (timedelta of nan or inf) or wait backwards."""

from __future__ import annotations

import json
import math

import httplib2
import pytest
from googleapiclient.errors import HttpError

from safesend.adapters.gmail_mailer import _classify_http_error
from safesend.core.graph_classify import retry_after_seconds

HOSTILE = ["²", "³", "¹0", "nan", "NaN", "inf", "-inf", "-5", "1e400", "1e3", "0x10", "5.5", "9" * 400, ""]


@pytest.mark.parametrize("header", HOSTILE)
def test_a_hostile_retry_after_is_ignored_never_raised_on(header: str) -> None:
    assert retry_after_seconds(header) is None


def _gmail_refusal(
    status: int, retry_after: str, reason: str = "rateLimitExceeded", message: str = "slow"
) -> HttpError:
    resp = httplib2.Response({"status": status, "retry-after": retry_after})
    body = {"error": {"code": status, "message": message, "errors": [{"reason": reason, "message": message}]}}
    return HttpError(resp, json.dumps(body).encode())


@pytest.mark.parametrize("header", HOSTILE)
def test_gmail_reads_retry_after_as_graph_does(header: str) -> None:
    failure = _classify_http_error(_gmail_refusal(429, header))
    assert failure.retry_after_s is None


@pytest.mark.parametrize("header", ["nan", "inf", "1e400"])
def test_gmail_daily_limit_wait_stays_a_finite_day_whatever_the_header(header: str) -> None:
    failure = _classify_http_error(_gmail_refusal(429, header, message="User-rate limit exceeded (Mail sending)"))
    assert failure.code == "daily_limit"
    assert failure.retry_after_s is not None and math.isfinite(failure.retry_after_s)
    assert failure.retry_after_s == 24 * 3600.0


def test_plain_delta_seconds_still_count() -> None:
    assert retry_after_seconds(" 30 ") == 30.0
    assert _classify_http_error(_gmail_refusal(429, "30")).retry_after_s == 30.0
