"""tests/props.py: a property's example count is its own in the gate and a quarter in --fast."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import props

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("full", "fast"), [(400, 100), (300, 75), (200, 50), (60, 15), (25, 10), (15, 10), (6, 6)])
def test_fast_draws_a_quarter_but_never_fewer_than_the_floor(monkeypatch, full, fast):
    monkeypatch.setenv(props.FAST_ENV, "1")
    assert props.examples(full) == fast
    monkeypatch.setenv(props.FAST_ENV, "0")
    assert props.examples(full) == full
    monkeypatch.delenv(props.FAST_ENV)
    assert props.examples(full) == full


@pytest.mark.parametrize(("flag", "expected"), [("1", 25), ("", 100)])
def test_the_tests_without_their_own_count_follow_the_same_rule(flag, expected):
    """conftest.py loads the profile: hypothesis' default 100 examples become 25 in --fast."""
    code = (
        "from hypothesis import settings\n"
        "from tests.props import load_profile\n"
        "load_profile()\n"
        "print(settings.default.max_examples)\n"
    )
    env = {**os.environ, props.FAST_ENV: flag}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == str(expected)
