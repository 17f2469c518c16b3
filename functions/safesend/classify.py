"""Failure classification: Bucket 1 (definitely not accepted) vs Bucket 2 (maybe accepted).

The rule that matters: if the request may have reached Gmail, the outcome is
unknown until the mailbox says otherwise. Only failures that prove nothing was
accepted (no connection, or an explicit 4xx refusal) are safe to send again.
"""

from __future__ import annotations

from enum import Enum

from .model import Bucket, Failure

# 403 reasons that mean "slow down", not "never": Gmail guide, handle-errors.
RATE_LIMIT_REASONS = frozenset(
    {
        "rateLimitExceeded",
        "userRateLimitExceeded",
        "dailyLimitExceeded",
        "quotaExceeded",
    }
)


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
    refresh) are worth retrying later, the rest are permanent.
    """
    code = f"http_{status}" + (f"_{reason}" if reason else "")
    if status >= 500:
        return Failure(Bucket.MAYBE_ACCEPTED, False, code, detail, status, retry_after_s)
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


def unbuildable_failure(detail: str) -> Failure:
    """The stored job cannot be turned into MIME: nothing was sent, and retrying cannot help."""
    return Failure(Bucket.NOT_ACCEPTED, False, "unbuildable_message", detail)
