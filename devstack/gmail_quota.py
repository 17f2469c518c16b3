"""Gmail's per-mailbox limits, as the simulator enforces them: pure bookkeeping, no I/O, no clock.

Why: safesend must pace itself to these limits, and nothing can be tested against a simulator that has
none. The caller (devstack.gmail_sim) passes the time and holds its lock.

What Gmail documents, and what this models:
- Per-user API rate: quota units per minute per user per project (6,000 for projects created on or after
  2026-05-01, 15,000 before; older pages: "250 quota units per user per second, moving average (allows
  short bursts)"), at METHOD_UNITS per call. Modelled as a moving window (``window_s``, 60 s by default)
  over the units of the calls it let through; a refused call costs nothing. Above it Gmail answers 429
  (sometimes 403) reason ``rateLimitExceeded``, domain ``usageLimits``, with the Cloud quota text
  "Quota exceeded for quota metric 'Queries' and limit 'Queries per minute per user' of service
  'gmail.googleapis.com' ..." (reported in elie222/inbox-zero#480, mxngls/gmail-cleaner#5 and Nylas'
  support pages, as 429 and as 403), or, for ``userRateLimitExceeded``, "User Rate Limit Exceeded"
  (reported in jaredhanson/passport-google-oauth#75).
- Daily sending limits (Google Workspace Admin Help, "Gmail sending limits"): 2,000 messages per rolling
  24 h per user (500 on trial accounts), 10,000 recipients per day, 100 recipients per message through
  the API. Gmail's guide (handle-errors, "Mail sending limits"): exceeding them returns "HTTP 429 Too Many
  Requests 'User-rate limit exceeded' '(Mail sending)' error ... with time to retry"; the reported text
  of such answers is "User-rate limit exceeded.  Retry after <RFC 3339 time> (<which limit>)", reason
  ``rateLimitExceeded`` (googleapis/google-api-ruby-client#20544, taers232c/GAMADV-XTD3#337). The retry
  time here is the first moment the rolling window lets this message through.
- More than the per-message recipient limit: Gmail's exact answer was not found; a 400
  ``invalidArgument`` ("Too many recipients") stands in, and it accepts nothing.

Not modelled: the delay of "several minutes" before Gmail starts refusing past the daily limit (the guide
warns a 200 does not prove the limit was not reached), lockouts longer than the rolling window, and
account suspension.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime
from typing import Any

__all__ = ["DAY_S", "METHOD_UNITS", "PRESETS", "Limits", "MailboxQuota", "Refusal", "retry_after_text"]

METHOD_UNITS = {"send": 100, "list": 5, "get": 5, "history": 2, "profile": 1}  # Gmail API quota page
DAY_S = 24 * 3600.0
MAX_WINDOW_S = 3600.0
MAX_TRACKED = 1_000_000  # bounds each usage log: older entries are dropped first
PROJECT_NUMBER = "000000000000"  # what the quota text names as the consumer; no real project
RATE_STATUSES = (403, 429)
RATE_REASONS = ("rateLimitExceeded", "userRateLimitExceeded")
_RATE_MESSAGES = {
    "rateLimitExceeded": "Quota exceeded for quota metric 'Queries' and limit 'Queries per minute per user' of "
    f"service 'gmail.googleapis.com' for consumer 'project_number:{PROJECT_NUMBER}'.",
    "userRateLimitExceeded": "User Rate Limit Exceeded",
}
_STATUS_NAMES = {403: "PERMISSION_DENIED", 429: "RESOURCE_EXHAUSTED", 400: "INVALID_ARGUMENT"}


@dataclass(frozen=True)
class Limits:
    """One mailbox's limits; None means "no limit" (the simulator's default: today's behaviour)."""

    units_per_window: int | None = None
    window_s: float = 60.0
    messages_per_day: int | None = None
    recipients_per_day: int | None = None
    recipients_per_message: int | None = None
    rate_limit_status: int = 429
    rate_limit_reason: str = "rateLimitExceeded"

    def changed(self, changes: dict[str, Any]) -> Limits:
        """A copy with ``changes`` applied and checked (ValueError names the bad setting)."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ValueError(f"unknown limit(s): {', '.join(unknown)}")
        out = replace(self, **changes)
        for name in ("units_per_window", "messages_per_day", "recipients_per_day", "recipients_per_message"):
            value = getattr(out, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(f"{name} must be an int >= 0 or null")
        if isinstance(out.window_s, bool) or not isinstance(out.window_s, int | float):
            raise ValueError("window_s must be a number")
        if not 0.0 < float(out.window_s) <= MAX_WINDOW_S:
            raise ValueError(f"window_s must be within (0, {MAX_WINDOW_S}]")
        if out.rate_limit_status not in RATE_STATUSES:
            raise ValueError(f"rate_limit_status must be one of {RATE_STATUSES}")
        if out.rate_limit_reason not in RATE_REASONS:
            raise ValueError(f"rate_limit_reason must be one of {RATE_REASONS}")
        return replace(out, window_s=float(out.window_s))

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


# Google Workspace (Admin Help, sending limits) with the 2026 per-user API rate, and its trial accounts.
PRESETS = {
    "none": Limits(),
    "workspace": Limits(6000, 60.0, 2000, 10_000, 100),
    "workspace_legacy_rate": Limits(15_000, 60.0, 2000, 10_000, 100),
    "trial": Limits(6000, 60.0, 500, None, 100),
}


@dataclass(frozen=True)
class Refusal:
    """A Google-style refusal: nothing was accepted. ``kind`` is rate, daily or recipients."""

    kind: str
    status: int
    reason: str
    message: str
    domain: str = "usageLimits"

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "code": self.status,
                "message": self.message,
                "errors": [{"message": self.message, "domain": self.domain, "reason": self.reason}],
                "status": _STATUS_NAMES.get(self.status, "UNKNOWN"),
            }
        }


def retry_after_text(at: float) -> str:
    """Gmail's "Retry after" time: RFC 3339 UTC with milliseconds, e.g. 2024-11-12T11:16:42.247Z."""
    moment = datetime.fromtimestamp(at, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class MailboxQuota:
    """The usage of one mailbox against its Limits: units in the moving window, sends in the last 24 h."""

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self._units: deque[tuple[float, int]] = deque()  # (when, units) of calls let through
        self._units_sum = 0
        self._sends: deque[tuple[float, int]] = deque()  # (when, recipients) of accepted sends
        self._recipients_sum = 0
        self.refused: Counter[str] = Counter()

    def reset(self) -> None:
        """Forget the usage (the limits stay)."""
        self._units.clear()
        self._units_sum = 0
        self._sends.clear()
        self._recipients_sum = 0
        self.refused.clear()

    def charge(self, method: str, now: float) -> Refusal | None:
        """Count one call of ``method`` (a METHOD_UNITS key) or refuse it if the window has no room."""
        cost = METHOD_UNITS[method]
        self._prune(now)
        limit = self.limits.units_per_window
        if limit is not None and self._units_sum + cost > limit:
            self.refused["rate"] += 1
            reason = self.limits.rate_limit_reason
            return Refusal("rate", self.limits.rate_limit_status, reason, _RATE_MESSAGES[reason])
        self._units.append((now, cost))
        self._units_sum += cost
        if len(self._units) > MAX_TRACKED:
            self._units_sum -= self._units.popleft()[1]
        return None

    def admit_send(self, recipients: int, now: float) -> Refusal | None:
        """Refuse a message over the per-message or the rolling daily limits; record nothing."""
        limits = self.limits
        if limits.recipients_per_message is not None and recipients > limits.recipients_per_message:
            self.refused["recipients"] += 1
            return Refusal("recipients", 400, "invalidArgument", "Too many recipients", "global")
        self._prune(now)
        waits: list[float] = []
        if limits.messages_per_day is not None and len(self._sends) + 1 > limits.messages_per_day:
            waits.append(self._free_at(now, lambda at_count: at_count[0] + 1 <= limits.messages_per_day))
        if limits.recipients_per_day is not None and self._recipients_sum + recipients > limits.recipients_per_day:
            budget = limits.recipients_per_day - recipients
            waits.append(self._free_at(now, lambda at_count: at_count[1] <= budget))
        if not waits:
            return None
        self.refused["daily"] += 1
        message = f"User-rate limit exceeded.  Retry after {retry_after_text(max(waits))} (Mail sending)"
        return Refusal("daily", 429, "rateLimitExceeded", message)

    def record_send(self, recipients: int, now: float) -> None:
        self._sends.append((now, recipients))
        self._recipients_sum += recipients
        if len(self._sends) > MAX_TRACKED:
            self._recipients_sum -= self._sends.popleft()[1]

    def usage(self, now: float) -> dict[str, Any]:
        """Used and limit for the window and the day, plus the refusals counted by kind."""
        self._prune(now)
        return {
            "units_in_window": self._units_sum,
            "messages_today": len(self._sends),
            "recipients_today": self._recipients_sum,
            "refused": dict(self.refused),
            "limits": self.limits.as_dict(),
        }

    def _free_at(self, now: float, fits: Any) -> float:
        """When enough of today's sends have aged out of the 24 h window for ``fits((count, recipients))``."""
        count, recipients = len(self._sends), self._recipients_sum
        for at, rcpts in self._sends:  # oldest first; bounded by MAX_TRACKED
            count, recipients = count - 1, recipients - rcpts
            if fits((count, recipients)):
                return at + DAY_S
        return now + DAY_S  # this message alone is over the limit: "up to 24 hours"

    def _prune(self, now: float) -> None:
        window = self.limits.window_s
        while self._units and self._units[0][0] <= now - window:
            self._units_sum -= self._units.popleft()[1]
        while self._sends and self._sends[0][0] <= now - DAY_S:
            self._recipients_sum -= self._sends.popleft()[1]
