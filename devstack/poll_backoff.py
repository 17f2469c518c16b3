"""When a harness asks again about something that may change: soon after it changed, rarely while it
does not (the fault storm's settle loop polls each pending job's /status; a paced pool's queued jobs
wait their turn for a minute, and each GET costs the stack a Firestore read and a request)."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any


class PollBackoff:
    """Per key: asked every ``base_s`` while its answer changes, the gap doubled up to ``cap_s`` for as
    long as it stays the same. ``due`` is checked once a pass (passes ``base_s`` apart), so a key is
    due on the first pass at or after its time (``slack_s`` absorbs a pass that wakes a little early)."""

    def __init__(self, keys: Iterable[Hashable], base_s: float = 1.0, cap_s: float = 4.0, slack_s: float = 0.5):
        if not 0 < base_s <= cap_s:
            raise ValueError("need 0 < base_s <= cap_s")
        self.base_s, self.cap_s, self.slack_s = base_s, cap_s, slack_s
        self._gap = dict.fromkeys(keys, base_s)
        self._due = dict.fromkeys(self._gap, float("-inf"))
        self._last: dict[Hashable, Any] = {}

    def due(self, keys: Iterable[Hashable], now: float) -> list[Hashable]:
        """The keys (of those given, in their order) to ask in this pass."""
        return [key for key in keys if self._due[key] <= now]

    def record(self, key: Hashable, answer: Any, now: float) -> None:
        """The answer just got: the same as the last one doubles the key's gap, another resets it."""
        unchanged = key in self._last and self._last[key] == answer
        self._gap[key] = min(self._gap[key] * 2, self.cap_s) if unchanged else self.base_s
        self._last[key] = answer
        self._due[key] = now + self._gap[key] - self.slack_s
