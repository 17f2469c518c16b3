"""Channel policies: server-side configuration, never chosen by the caller.

A channel names a kind of message (receipts, payouts...). Its policy says what
to do when an attempt's outcome stays unknown after the index-lag window:
`retry` (resend with the same Message-ID, then reconcile again) or `review`
(money or irreversible: a human decides, nothing is resent automatically).
A channel listed without `on_unknown` gets `review`: the safe default.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from enum import Enum
from pathlib import Path
from typing import Any

from .errors import ConfigurationError, UnknownChannelError

NOTIFY_TARGETS = ("chat", "slack", "email")


class OnUnknown(str, Enum):
    RETRY = "retry"
    REVIEW = "review"


@dataclass(frozen=True)
class ChannelPolicy:
    name: str
    on_unknown: OnUnknown = OnUnknown.REVIEW
    max_attempts: int = 3  # sends in total, across every path (quick retries, resends)
    quick_retries: int = 2  # extra tries inside one request for retryable Bucket-1 errors
    retry_base_s: float = 2.0  # backoff base for Bucket-1 retries
    retry_cap_s: float = 300.0  # backoff cap
    index_lag_s: float | None = None  # first mailbox check after an ambiguous attempt (None: global)
    unknown_window_s: float | None = None  # how long "not found" stays inconclusive (None: global)
    review_includes_body: bool = False  # review items carry text/html only if a channel opts in
    notify: tuple[str, ...] | None = None  # reviewer targets for its review items; None: all configured

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigurationError(f"channel {self.name}: max_attempts must be >= 1")
        if self.quick_retries < 0 or self.retry_base_s < 0 or self.retry_cap_s < self.retry_base_s:
            raise ConfigurationError(f"channel {self.name}: retry settings out of range")
        for value in (self.index_lag_s, self.unknown_window_s):
            if value is not None and value < 0:
                raise ConfigurationError(f"channel {self.name}: delays must be >= 0")
        unknown_targets = set(self.notify or ()) - set(NOTIFY_TARGETS)
        if unknown_targets:
            raise ConfigurationError(
                f"channel {self.name}: notify takes {list(NOTIFY_TARGETS)}, not {sorted(unknown_targets)}"
            )


_FIELD_NAMES = {f.name for f in fields(ChannelPolicy)} - {"name"}


def _policy_from(name: str, values: Mapping[str, Any], base: ChannelPolicy | None) -> ChannelPolicy:
    unknown = set(values) - _FIELD_NAMES
    if unknown:
        raise ConfigurationError(f"channel {name}: unknown settings {sorted(unknown)}")
    data = dict(values)
    if isinstance(data.get("notify"), list):
        data["notify"] = tuple(data["notify"])
    if "on_unknown" in data:
        try:
            data["on_unknown"] = OnUnknown(data["on_unknown"])
        except ValueError:
            raise ConfigurationError(f"channel {name}: on_unknown must be 'retry' or 'review'") from None
    try:
        return replace(base, name=name, **data) if base else ChannelPolicy(name=name, **data)
    except TypeError as exc:
        raise ConfigurationError(f"channel {name}: {exc}") from None


class ChannelPolicies:
    """The set of configured channels. A new send on anything else is an UnknownChannelError (400)."""

    def __init__(self, policies: Mapping[str, ChannelPolicy], defaults: ChannelPolicy | None = None):
        self._policies = dict(policies)
        self._defaults = defaults or ChannelPolicy(name="defaults")

    def get(self, channel: str) -> ChannelPolicy:
        try:
            return self._policies[channel]
        except KeyError:
            raise UnknownChannelError(channel) from None

    def for_job(self, channel: str) -> ChannelPolicy:
        """The policy for a job that already exists. Its channel may have been removed from the
        configuration since: then the safe policy (review, never an automatic resend) applies,
        so one such job neither stalls the sweeper nor is resent on a guess."""
        policy = self._policies.get(channel)
        if policy is not None:
            return policy
        return replace(self._defaults, name=channel, on_unknown=OnUnknown.REVIEW)

    def names(self) -> list[str]:
        return sorted(self._policies)

    @classmethod
    def from_mapping(cls, doc: Mapping[str, Any]) -> ChannelPolicies:
        """`{"defaults": {...}, "channels": {name: {...}}}`; defaults apply to every channel."""
        extra = set(doc) - {"defaults", "channels"}
        if extra:
            raise ConfigurationError(f"channel policy file: unknown sections {sorted(extra)}")
        defaults = doc.get("defaults") or {}
        if "on_unknown" in defaults:
            raise ConfigurationError("on_unknown cannot be a default: set it per channel (unset means review)")
        base = _policy_from("defaults", defaults, None)
        channels = doc.get("channels") or {}
        if not isinstance(channels, Mapping):
            raise ConfigurationError("channel policy file: [channels] must be a table")
        for name, values in channels.items():
            if values is not None and not isinstance(values, Mapping):
                raise ConfigurationError(f"channel {name}: settings must be a table")
        return cls({name: _policy_from(name, values or {}, base) for name, values in channels.items()}, base)

    @classmethod
    def load(cls, path: str | Path | None, override_json: str | None = None) -> ChannelPolicies:
        """Read the TOML file, then merge SAFESEND_CHANNELS_JSON (channel -> settings) over it."""
        doc: dict[str, Any] = {"defaults": {}, "channels": {}}
        if path:
            try:
                with open(path, "rb") as handle:
                    doc = tomllib.load(handle)
            except (OSError, tomllib.TOMLDecodeError) as exc:
                raise ConfigurationError(f"cannot read channel policy file {path}: {exc}") from None
        if override_json:
            try:
                override = json.loads(override_json)
            except json.JSONDecodeError as exc:
                raise ConfigurationError(f"SAFESEND_CHANNELS_JSON is not JSON: {exc}") from None
            if not isinstance(override, dict):
                raise ConfigurationError("SAFESEND_CHANNELS_JSON must be an object of channel -> settings")
            channels = dict(doc.get("channels") or {})
            for name, values in override.items():
                if values is not None and not isinstance(values, dict):
                    raise ConfigurationError(f"SAFESEND_CHANNELS_JSON: settings of {name!r} must be an object")
                channels[name] = {**(channels.get(name) or {}), **(values or {})}
            doc = {**doc, "channels": channels}
        policies = cls.from_mapping(doc)
        if not policies.names():
            raise ConfigurationError("no channels configured: every send would be refused")
        return policies
