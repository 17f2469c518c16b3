"""How many examples a property test draws: its full count in the gate, a quarter in the inner loop.

`bash scripts/test.sh --fast` (SAFESEND_TEST_FAST=1) is the inner loop: every unit and property test
runs, each property on a quarter of its examples (at least FAST_FLOOR), so that a change is checked
in under two minutes. The gate (`bash scripts/test.sh`, CI) runs every property on its full count.
The property tests were about two thirds of --fast's time (2026-12-02, the 2-core test machine).
"""

from __future__ import annotations

import os

from hypothesis import settings

FAST_ENV = "SAFESEND_TEST_FAST"
FAST_SHARE = 4
FAST_FLOOR = 10
HYPOTHESIS_DEFAULT = 100  # hypothesis' own max_examples, for the tests that do not set theirs


def fast() -> bool:
    return os.environ.get(FAST_ENV) == "1"


def examples(full: int) -> int:
    """`full` in the gate; in the inner loop a quarter of it, at least FAST_FLOOR (or `full` if less)."""
    if not fast():
        return full
    return max(min(full, FAST_FLOOR), full // FAST_SHARE)


def load_profile() -> None:
    """The tests that keep hypothesis' default count get the same share in the inner loop."""
    if fast():
        settings.register_profile("fast", max_examples=examples(HYPOTHESIS_DEFAULT))
        settings.load_profile("fast")
