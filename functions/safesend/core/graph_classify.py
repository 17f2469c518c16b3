"""Microsoft Graph's answers to sendMail, in the two buckets (classify.py does the same for Gmail).

What Microsoft documents (docs/graph-provider.md has the sources):
- 202 Accepted, no body: accepted (the adapter returns Accepted; it never reaches this module).
- 400 on malformed MIME or base64 ("Invalid base64 string for MIME content"): refused before anything
  was submitted. 401 (token), 403 (permission, application access policy) and 404 (no such mailbox)
  are authorization and addressing refusals made before the message exists: not accepted.
- 429 Too Many Requests with Retry-After: "the requests fail" (throttling guidance): not accepted,
  retry after the wait. The same when Exchange refuses for the mailbox's sending limits.
- 503 Service Unavailable and 504: the throttling guidance lists them among answers to back off from
  (with Retry-After), but nowhere says that a sendMail answered so was not submitted; a gateway error
  can also come after the mailbox accepted. So every 5xx is MAYBE accepted, Retry-After or not: a
  resend before asking Sent Items could be a second email. 408 too: the gateway may have forwarded.
- Any other status: 4xx refused (permanent), anything unexpected maybe accepted.
"""

from __future__ import annotations

import re

from .classify import retry_after_seconds
from .model import Bucket, Failure

__all__ = ["classify_graph", "graph_error_code", "retry_after_seconds"]

# Graph error codes ("ErrorInvalidRecipients", "ApplicationThrottled", ...): safe to put in a code.
_ERROR_CODE = re.compile(r"[A-Za-z][A-Za-z0-9_.]{0,59}")
RETRYABLE_REFUSALS = frozenset({401, 429})  # a new token, or the throttling wait, may let it through
MAYBE_ACCEPTED_4XX = frozenset({408})


def graph_error_code(code: object) -> str | None:
    """Graph's `error.code` if it is a plausible one (it goes into logs and failure codes)."""
    return code if isinstance(code, str) and _ERROR_CODE.fullmatch(code) else None


def classify_graph(
    status: int, error_code: str | None = None, detail: str = "", retry_after_s: float | None = None
) -> Failure:
    """The bucket of a non-2xx sendMail answer. Pure: never raises for any int status."""
    code = f"graph_{status}" + (f"_{error_code}" if graph_error_code(error_code) else "")
    if status >= 500 or status in MAYBE_ACCEPTED_4XX:
        return Failure(Bucket.MAYBE_ACCEPTED, False, code, detail, status, retry_after_s)
    if status in RETRYABLE_REFUSALS:
        return Failure(Bucket.NOT_ACCEPTED, True, code, detail, status, retry_after_s)
    if 400 <= status < 500:
        return Failure(Bucket.NOT_ACCEPTED, False, code, detail, status, retry_after_s)
    # 1xx/3xx (a redirect is never followed) or a 2xx other than 202: assume it may have landed.
    return Failure(Bucket.MAYBE_ACCEPTED, False, code, detail, status, retry_after_s)
