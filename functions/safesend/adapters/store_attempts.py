"""The retry skeleton the stores share: bounded in count and in time, with exponential backoff.

A store's read is tried again after a lost connection, and its conditional write is re-sent until
its fate is known; both must stop, so neither loops past `max_attempts` nor starts an attempt after
its deadline. What an attempt's failure means differs per store and stays in each adapter.
"""

from __future__ import annotations

import time
from collections.abc import Iterator


class BoundedAttempts:
    """Iterate to run attempts: the first at once; before each retry a backoff of `backoff_s`
    doubled per retry; none after `max_attempts`, and none started once `timeout_s` has passed
    since the iteration began. `made` counts the attempts started, for the final error."""

    def __init__(self, max_attempts: int, timeout_s: float, backoff_s: float):
        self.max_attempts = max_attempts
        self.timeout_s = timeout_s
        self.backoff_s = backoff_s
        self.made = 0

    def __iter__(self) -> Iterator[int]:
        deadline = time.monotonic() + self.timeout_s
        for attempt in range(1, self.max_attempts + 1):
            if attempt > 1:
                if time.monotonic() >= deadline:
                    return
                time.sleep(self.backoff_s * 2 ** (attempt - 2))
            self.made = attempt
            yield attempt
