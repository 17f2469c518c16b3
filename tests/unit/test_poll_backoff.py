"""The settle loop's polling schedule (devstack/poll_backoff.py): every second while a job's view
changes, half as often while it stays the same, never rarer than the cap."""

from __future__ import annotations

import pytest

from devstack.poll_backoff import PollBackoff


def asked_at(backoff: PollBackoff, answers: dict[str, list[str]], passes: int) -> dict[str, list[int]]:
    """Run `passes` one-second passes; each asked key answers its next scripted value."""
    asked: dict[str, list[int]] = {key: [] for key in answers}
    for t in range(passes):
        for key in backoff.due(list(answers), float(t)):
            asked[key].append(t)
            script = answers[key]
            backoff.record(key, script[min(len(asked[key]) - 1, len(script) - 1)], float(t))
    return asked


def test_an_unchanged_answer_is_asked_ever_more_rarely_up_to_the_cap() -> None:
    asked = asked_at(PollBackoff(["queued"], cap_s=4.0), {"queued": ["queued"]}, passes=20)
    assert asked["queued"] == [0, 1, 3, 7, 11, 15, 19]  # gaps 1, 2, 4, 4, ...


def test_a_change_brings_the_key_back_to_every_pass() -> None:
    script = ["queued"] * 4 + ["sending", "sent", "sent"]
    asked = asked_at(PollBackoff(["job"], cap_s=4.0), {"job": script}, passes=16)
    assert asked["job"] == [0, 1, 3, 7, 11, 12, 13, 15]  # changed at its 5th and 6th asks: 1 s, then doubling


def test_each_key_keeps_its_own_gap() -> None:
    asked = asked_at(PollBackoff(["a", "b"]), {"a": ["x"], "b": [str(n) for n in range(10)]}, passes=8)
    assert asked["b"] == list(range(8)) and asked["a"] == [0, 1, 3, 7]


def test_a_cap_below_the_base_is_refused() -> None:
    with pytest.raises(ValueError):
        PollBackoff(["a"], base_s=2.0, cap_s=1.0)
