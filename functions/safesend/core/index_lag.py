"""Gmail's index lag, measured: the pure rules (no I/O, no clock of its own).

The guarantee rests on the search index showing an accepted message within the unknown window, and
on it never lagging past the verification horizon (issue 20). Sampled accepted sends are searched
(and looked for in the change log) until found; each mailbox keeps its last `KEEP` observations per
kind in one small record, from which /health shows p50/p99/max and the service derives the
mailbox's EFFECTIVE unknown window:

- a search lag past the effective window raises it to twice the largest lag seen (never above the
  verification horizon, never below the configured window), once: the next raise needs a lag past
  the raised window. The max, not the p99: one copy indexed after the window is already a job that
  could have been resent; with 200 samples p99 is the second largest anyway, and the max reacts on
  the first late copy instead of the second;
- a message still not found at the horizon is a lag past the horizon itself: nothing the window can
  cover (the verification can miss a second copy). Recorded once, for an alert and the reviewers.

The record (a dict, as every store keeps it): {"search_s": [...], "history_s": [...], "window_s":
raised window or None, "raised_at", "beyond_horizon_at", "updated_at", and "untold_*" while a raise's
notice is not confirmed told}; lags are seconds, newest last. The raise and its notice cannot be one
write: the raise stays untold in the record until its teller confirms, and one unconfirmed past
TELL_LEASE_S is claimed and told again (at least once; once when all goes well).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from .model import Job
from .policy import ChannelPolicy

KEEP = 200  # observations per mailbox and kind: the rolling window the percentiles read
KINDS = ("search", "history")  # the search index (rfc822msgid:), the change log (history.list)
HEADROOM = 2.0  # a raised window is this many times the largest lag seen
PROBE_FIRST_S = 0.5  # the first look after the accept
PROBE_GROWTH = 1.25  # each later look this much later (since the accept): a lag is measured within 25 %
CLOCK_SKEW_S = 60.0  # the instance that created a job and the one that sent it may disagree this much
MAX_PROBES = 64  # 0.5 s * 1.25^63 is far past any horizon: the horizon ends a probe first
STEP_PREFIX = "lag"
TELL_LEASE_S = 30.0  # a raise's teller confirms within this, else the next writer or the sweep tells it
UNTOLD_KEYS = ("untold_previous_s", "untold_window_s", "untold_observed_s", "untold_beyond", "untold_at")
# A step as Probe.step writes it, read from a request body: ASCII digits (str.isdigit() also says yes
# to "²"), an instant before the year 2286 (13 digits of ms, within datetime's range), at most
# MAX_PROBES looks, each kind once and in KINDS' order.
_STEP = re.compile(rf"{STEP_PREFIX}-([0-9]{{1,13}})-([0-9]{{1,2}})-(sh|s|h)")


def samples_key(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"unknown lag kind {kind!r}")
    return f"{kind}_s"


def stats(samples: Sequence[float]) -> dict[str, Any]:
    """Nearest-rank p50/p99 and the max of the kept observations (None when there are none)."""
    ordered = sorted(samples)
    if not ordered:
        return {"count": 0, "p50_s": None, "p99_s": None, "max_s": None}

    def rank(q: float) -> float:
        return ordered[max(0, math.ceil(q * len(ordered)) - 1)]

    return {"count": len(ordered), "p50_s": rank(0.5), "p99_s": rank(0.99), "max_s": ordered[-1]}


def effective_window_s(configured_s: float, record: Mapping[str, Any] | None, horizon_s: float) -> float:
    """The window a mailbox's checks use: the configured one, or the raised one when larger, never
    above the horizon (nor below the configured window, which the settings already keep <= it)."""
    raised = (record or {}).get("window_s")
    if not isinstance(raised, (int, float)) or raised <= configured_s:
        return configured_s
    return max(configured_s, min(float(raised), horizon_s))


def effective_policy(policy: ChannelPolicy, configured_s: float, raised_s: float) -> ChannelPolicy:
    """The channel's policy with its unknown window lifted to `raised_s` where that is larger: what
    lifecycle.apply_mailbox_check reads (the policy stays pure: the window is passed in)."""
    if raised_s <= configured_s:
        return policy
    return dataclasses.replace(policy, unknown_window_s=raised_s)


@dataclass(frozen=True)
class Raise:
    """A mailbox's effective window went up (or its lag passed the horizon): told once, by the writer
    whose observation caused it."""

    mailbox: str
    previous_s: float
    window_s: float
    observed_s: float
    beyond_horizon: bool  # the lag passed the verification horizon itself


def observe(
    record: Mapping[str, Any] | None,
    mailbox: str,
    kind: str,
    lag_s: float,
    now: datetime,
    configured_s: float,
    horizon_s: float,
    beyond_horizon: bool = False,
) -> tuple[dict[str, Any], Raise | None]:
    """The record with one observation added, and the raise this writer must tell, if any: the one
    its observation caused (merged with one still untold), or an untold one past its lease (claimed
    by this write). The raise stays in the record as `untold` until its teller confirms (told())."""
    changed, raised = _observe(record, mailbox, kind, lag_s, now, configured_s, horizon_s, beyond_horizon)
    pending = untold(record, mailbox)
    if raised is None:
        return claim_untold(changed, mailbox, now)
    if pending is not None:  # an earlier raise not yet confirmed: told together with this one
        earlier = pending[0]
        raised = Raise(
            mailbox,
            min(earlier.previous_s, raised.previous_s),
            max(earlier.window_s, raised.window_s),
            max(earlier.observed_s, raised.observed_s),
            earlier.beyond_horizon or raised.beyond_horizon,
        )
    return _with_untold(changed, raised, now), raised


def untold(record: Mapping[str, Any] | None, mailbox: str) -> tuple[Raise, datetime] | None:
    """The raise the record holds as not yet told, and when it was last claimed (None: none)."""
    if record is None or not isinstance(record.get("untold_at"), datetime):
        return None
    try:
        raised = Raise(
            mailbox,
            float(record["untold_previous_s"]),
            float(record["untold_window_s"]),
            float(record["untold_observed_s"]),
            bool(record["untold_beyond"]),
        )
    except (KeyError, TypeError, ValueError):
        return None
    return raised, record["untold_at"]


def claim_untold(record: Mapping[str, Any] | None, mailbox: str, now: datetime) -> tuple[dict[str, Any], Raise | None]:
    """The record claimed for telling its untold raise again, when its last claim is older than
    TELL_LEASE_S (its teller's publish failed, its instance died, or its write's answer was lost)."""
    changed = dict(record or {})
    pending = untold(record, mailbox)
    if pending is None or now - pending[1] < timedelta(seconds=TELL_LEASE_S):
        return changed, None
    return _with_untold(changed, pending[0], now), pending[0]


def told(record: Mapping[str, Any] | None, raised: Raise) -> dict[str, Any] | None:
    """The record without its untold raise now that `raised` was told; None when it holds another
    (a later raise, its own writer tells it) or none."""
    pending = untold(record, raised.mailbox)
    if record is None or pending is None or pending[0] != raised:
        return None
    return {key: value for key, value in record.items() if key not in UNTOLD_KEYS}


def _with_untold(changed: dict[str, Any], raised: Raise, now: datetime) -> dict[str, Any]:
    changed.update(
        untold_previous_s=raised.previous_s,
        untold_window_s=raised.window_s,
        untold_observed_s=raised.observed_s,
        untold_beyond=raised.beyond_horizon,
        untold_at=now,
    )
    return changed


def _observe(
    record: Mapping[str, Any] | None,
    mailbox: str,
    kind: str,
    lag_s: float,
    now: datetime,
    configured_s: float,
    horizon_s: float,
    beyond_horizon: bool = False,
) -> tuple[dict[str, Any], Raise | None]:
    """The record with one observation added (the oldest beyond KEEP dropped), and the raise it
    causes, if any. Only the search lag moves the window: "not found" is read from the search."""
    changed: dict[str, Any] = {
        key: list(value) if isinstance(value, list) else value for key, value in (record or {}).items()
    }
    key = samples_key(kind)
    kept = [float(v) for v in changed.get(key) or [] if isinstance(v, (int, float))]
    kept.append(round(float(lag_s), 3))
    changed[key] = kept[-KEEP:]
    changed["updated_at"] = now
    if kind != "search":
        return changed, None
    current = effective_window_s(configured_s, record, horizon_s)
    largest = max(changed[key])
    first_beyond = beyond_horizon and changed.get("beyond_horizon_at") is None
    if first_beyond:
        changed["beyond_horizon_at"] = now
    if largest <= current and not first_beyond:
        return changed, None
    wanted = min(horizon_s, max(configured_s, HEADROOM * largest))
    if wanted <= current and not first_beyond:
        return changed, None  # already at the horizon: nothing left to raise
    if wanted > current:
        changed["window_s"] = wanted
        changed["raised_at"] = now
    return changed, Raise(mailbox, current, max(wanted, current), largest, first_beyond)


# ----------------------------------------------------------------------------------- probe steps
@dataclass(frozen=True)
class Probe:
    """One look for a sampled accepted send, carried whole by its Cloud Tasks step (no stored state):
    when Gmail accepted it, how many looks were made, and which kinds are still not found."""

    accepted_at: datetime
    looks: int
    pending: tuple[str, ...]

    @property
    def step(self) -> str:
        codes = "".join(kind[0] for kind in self.pending)
        return f"{STEP_PREFIX}-{int(self.accepted_at.timestamp() * 1000)}-{self.looks}-{codes}"

    def look_at(self, horizon_s: float) -> datetime:
        """Due this long after the accept, and never after the horizon: the last look is there."""
        offset_s = min(PROBE_FIRST_S * PROBE_GROWTH**self.looks, horizon_s)
        return self.accepted_at + timedelta(seconds=offset_s)


def first_probe(accepted_at: datetime, history: bool) -> Probe:
    return Probe(accepted_at, 0, KINDS if history else ("search",))


def parse_step(step: object) -> Probe | None:
    """The probe a task's step names (None: not a probe step, or malformed)."""
    match = _STEP.fullmatch(step) if isinstance(step, str) else None
    if match is None:
        return None
    by_code = {kind[0]: kind for kind in KINDS}
    accepted_at = datetime.fromtimestamp(int(match[1]) / 1000, UTC)
    return Probe(accepted_at, int(match[2]), tuple(by_code[code] for code in match[3]))


def plausible_probe(probe: Probe, job: Job, now: datetime) -> bool:
    """Whether a probe can be this job's: the job was accepted (it names a copy) and the step's accept
    lies within its life, after its creation and not after now (give or take CLOCK_SKEW_S). A step
    that fails this was not written by start(): measuring it would record a made-up lag."""
    skew = timedelta(seconds=CLOCK_SKEW_S)
    return job.provider_ref is not None and job.created_at - skew <= probe.accepted_at <= now + skew


def is_probe_step(step: object) -> bool:
    """A reconcile task's step that names an index-lag look rather than a check of the job."""
    return parse_step(step) is not None


def next_probe(probe: Probe, found: Sequence[str], now: datetime, horizon_s: float) -> Probe | None:
    """The next look, for the kinds still not found. None when all were found, or when this look
    was at (or past) the horizon: the caller records what is still missing as beyond the horizon."""
    pending = tuple(kind for kind in probe.pending if kind not in found)
    if not pending or now >= probe.accepted_at + timedelta(seconds=horizon_s) or probe.looks + 1 >= MAX_PROBES:
        return None
    return Probe(probe.accepted_at, probe.looks + 1, pending)
