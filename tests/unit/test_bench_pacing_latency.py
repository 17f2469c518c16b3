"""bench.pacing's single-send latency row compares two paths by their medians on the wall clock: they
take turns send by send, so a burst of load on a shared machine slows both alike, not one block of
30 sends (the verdict is 'within noise, <= 1.25x')."""

from __future__ import annotations

from typing import Any

from bench import pacing


def test_the_unconfigured_and_the_paced_sends_take_turns(monkeypatch):
    order: list[str] = []
    request = pacing._request

    def recorded(key: str) -> Any:
        order.append(key)
        return request(key)

    monkeypatch.setattr(pacing, "_request", recorded)
    plain, paced = pacing.single_send_latency(samples=3)
    assert len(plain) == len(paced) == 3
    assert order == ["lat-False-0", "lat-True-0", "lat-False-1", "lat-True-1", "lat-False-2", "lat-True-2"]
