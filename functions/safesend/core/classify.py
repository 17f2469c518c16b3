"""Failure classification: Bucket 1 (definitely not accepted) vs Bucket 2 (maybe accepted).

The rule that matters: if the request may have reached Gmail, the outcome is
unknown until the mailbox says otherwise. Only failures that prove nothing was
accepted (no connection, or an explicit 4xx refusal) are safe to send again.
"""

from __future__ import annotations

import re
from enum import Enum

from .model import Bucket, Failure

# 403 reasons that mean "slow down", not "never": Gmail guide, handle-errors.
RATE_LIMIT_REASONS = frozenset(
    {
        "rateLimitExceeded",
        "userRateLimitExceeded",
        "quotaExceeded",
    }
)

# The mailbox's daily sending limit, which is not a rate limit: waiting a minute does not help, and
# an account that keeps hitting it may be suspended. Gmail's guide (handle-errors, "Mail sending
# limits") says exceeding it returns "HTTP 429 Too Many Requests 'User-rate limit exceeded' '(Mail
# sending)' ... with time to retry", and that it may last "for multiple hours". The reason field is
# the rate limit's own (`rateLimitExceeded`, domain `usageLimits`); only the message tells them apart,
# e.g. "User-rate limit exceeded.  Retry after 2024-11-12T11:16:42.247Z (Forwarding rules)" for a
# sibling per-user limit (googleapis/google-api-ruby-client#20544; taers232c/GAMADV-XTD3#337 shows the
# same "Retry after <time>" text). `dailyLimitExceeded` (domain usageLimits: "Daily Limit Exceeded",
# phw198/OutlookGoogleCalendarSync#14) is Google's generic daily-quota reason: daily as well.
DAILY_LIMIT_REASONS = frozenset({"dailyLimitExceeded"})
_MAIL_SENDING_LIMIT = re.compile(r"\(mail sending\)", re.IGNORECASE)
DAILY_LIMIT_CODE = "daily_limit"
# "can't send new messages for up to 24 hours" (Workspace Admin Help, Gmail sending limits): with no
# better estimate, the mailbox is exhausted for the whole rolling window.
DAILY_LIMIT_WAIT_S = 24 * 3600.0
# Retry-After as delta-seconds (RFC 9110 10.2.3): ASCII digits only. str.isdigit() accepts "²" (a
# latin-1 header byte) that float() refuses, and float() accepts "nan", "inf" and "-5".
_DELTA_SECONDS = re.compile(r"[0-9]{1,6}")
MAX_RETRY_AFTER_S = 24 * 3600.0


class RefusalKind(str, Enum):
    """Why Gmail refused a send (nothing was accepted): what the caller of classify_http should do next."""

    RATE_LIMIT = "rate_limit"  # slow this mailbox down, retry in seconds to minutes
    DAILY_LIMIT = "daily_limit"  # mailbox exhausted: do not send from it again for up to 24 h
    AUTH = "auth"  # credentials: retry after a refresh
    OTHER = "other"  # anything else


def is_daily_limit(status: int, reason: str | None, message: str = "") -> bool:
    """True for Gmail's daily sending-limit refusal (see DAILY_LIMIT_REASONS for the sources)."""
    if status not in (403, 429):
        return False
    return reason in DAILY_LIMIT_REASONS or _MAIL_SENDING_LIMIT.search(message or "") is not None


def refusal_kind(failure: Failure) -> RefusalKind | None:
    """The kind of a refusal (Bucket 1); None for a failure that may have been accepted."""
    if failure.bucket is not Bucket.NOT_ACCEPTED or failure.status is None:
        return None
    if failure.code == DAILY_LIMIT_CODE:
        return RefusalKind.DAILY_LIMIT
    if failure.status == 401:
        return RefusalKind.AUTH
    if failure.status == 429 or (failure.status == 403 and failure.retryable):
        return RefusalKind.RATE_LIMIT
    return RefusalKind.OTHER


class TransportErrorKind(str, Enum):
    """Where a transport failure happened, as far as the adapter can tell."""

    DNS = "dns"  # name did not resolve: no connection, nothing sent
    CONNECT_REFUSED = "connect_refused"  # nothing listening: nothing sent
    CONNECT_FAILED = "connect_failed"  # network unreachable etc. before any byte of the request
    TLS_HANDSHAKE = "tls_handshake"  # TLS failed before the request was written
    TIMEOUT = "timeout"  # any timeout, connect included (conservative, by design)
    DISCONNECTED_AFTER_WRITE = "disconnected_after_write"  # reset/closed once the request was (partly) written
    PROTOCOL = "protocol"  # garbage response, truncated body
    BODY_TOO_LARGE = "body_too_large"  # an answer (or its decompressed form) over the transport's cap
    UNEXPECTED = "unexpected"  # an exception we did not foresee: assume the worst


_NOT_SENT = frozenset(
    {
        TransportErrorKind.DNS,
        TransportErrorKind.CONNECT_REFUSED,
        TransportErrorKind.CONNECT_FAILED,
        TransportErrorKind.TLS_HANDSHAKE,
    }
)


def classify_transport(kind: TransportErrorKind, detail: str = "") -> Failure:
    if kind in _NOT_SENT:
        return Failure(Bucket.NOT_ACCEPTED, retryable=True, code=kind.value, detail=detail)
    return Failure(Bucket.MAYBE_ACCEPTED, retryable=False, code=kind.value, detail=detail)


def classify_http(
    status: int, reason: str | None = None, detail: str = "", retry_after_s: float | None = None
) -> Failure:
    """Map a non-2xx Gmail answer to a bucket.

    5xx: maybe accepted (Gmail may have queued it before failing). 4xx: refused,
    so not accepted; 429, rate-limit 403s and 401 (after the auth layer's own
    refresh) are worth retrying later, the rest are permanent. The daily sending
    limit (429/403, `detail` is Gmail's message) is its own code: retryable, but
    not before the rolling day allows it (DAILY_LIMIT_WAIT_S at least).
    """
    code = f"http_{status}" + (f"_{reason}" if reason else "")
    if status >= 500:
        return Failure(Bucket.MAYBE_ACCEPTED, False, code, detail, status, retry_after_s)
    if is_daily_limit(status, reason, detail):
        wait_s = max(retry_after_s or 0.0, DAILY_LIMIT_WAIT_S)
        return Failure(Bucket.NOT_ACCEPTED, True, DAILY_LIMIT_CODE, detail, status, wait_s)
    if status in (401, 429) or (status == 403 and reason in RATE_LIMIT_REASONS):
        return Failure(Bucket.NOT_ACCEPTED, True, code, detail, status, retry_after_s)
    if status == 408:  # the server gave up reading the request: it was not processed
        return Failure(Bucket.NOT_ACCEPTED, True, code, detail, status, retry_after_s)
    if 400 <= status < 500:
        return Failure(Bucket.NOT_ACCEPTED, False, code, detail, status, retry_after_s)
    # 1xx/3xx as a final answer to a send is a protocol surprise: assume it may have landed.
    return Failure(Bucket.MAYBE_ACCEPTED, False, code, detail, status, retry_after_s)


def crash_failure(detail: str = "instance stopped between claim and recorded outcome") -> Failure:
    """A lease that expired in `sending`: whatever happened is unknown."""
    return Failure(Bucket.MAYBE_ACCEPTED, False, "lease_expired", detail)


def unsearchable_failure(mailbox: str) -> Failure:
    """The mailbox that may hold the job's copy is no longer configured: whether it went out is unknown."""
    return Failure(
        Bucket.MAYBE_ACCEPTED,
        False,
        "mailbox_not_configured",
        f"mailbox {mailbox} may hold a copy but is no longer configured: it cannot be searched",
    )


def unsendable_failure(mailbox: str, reason: str) -> Failure:
    """No mailbox of the job's pool can ever admit this send (mailbox_budget.Refusal without a next
    free time): nothing was sent, and waiting cannot help."""
    return Failure(
        Bucket.NOT_ACCEPTED,
        False,
        "mailbox_limit",
        f"mailbox {mailbox} can never admit this message ({reason}): its limits are below what it needs",
    )


def unbuildable_failure(detail: str) -> Failure:
    """The stored job cannot be turned into MIME: nothing was sent, and retrying cannot help."""
    return Failure(Bucket.NOT_ACCEPTED, False, "unbuildable_message", detail)


def retry_after_seconds(value: str | None) -> float | None:
    """A Retry-After header's wait (Gmail and Graph send delta-seconds); an HTTP date, a negative,
    fractional, non-ASCII or absurd value (past a day) is ignored: None, never an exception."""
    if value is None or not _DELTA_SECONDS.fullmatch(value.strip()):
        return None
    seconds = float(value.strip())
    return seconds if seconds <= MAX_RETRY_AFTER_S else None
