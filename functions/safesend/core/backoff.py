"""Exponential backoff with full jitter (AWS architecture blog): spreads retries of many jobs apart."""

from __future__ import annotations

import random
from collections.abc import Callable


def backoff_delay(
    retry_number: int,
    base_s: float,
    cap_s: float,
    retry_after_s: float | None = None,
    uniform: Callable[[float, float], float] = random.uniform,
) -> float:
    """Delay before retry `retry_number` (1-based): uniform(0, min(cap, base*2^(n-1))).

    A server's Retry-After is a floor: retrying earlier only earns another 429.
    """
    if retry_number < 1:
        raise ValueError("retry_number is 1-based")
    ceiling = min(cap_s, base_s * (2 ** min(retry_number - 1, 32)))
    delay = uniform(0.0, ceiling)
    if retry_after_s is not None:
        delay = max(delay, min(retry_after_s, cap_s))
    return delay
