"""Crash injection for the local stack and the unit tests; the deployed package has no fault switch.

A request carrying `X-Safesend-Fault: after_claim` (or `after_send`) makes the worker die at that
point, like a killed instance: right after the job was claimed, or after Gmail answered but before
the outcome was recorded. devstack/local_app.py wraps the runtime's store and mailer with these
classes; unit tests pass their own `crash` (an exception) instead of os._exit.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

CRASH_HEADER = "X-Safesend-Fault"
POINTS = frozenset({"after_claim", "after_send"})
_armed: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar("safesend_crash_points", default=frozenset())


def exit_now(point: str) -> None:
    """The real thing: no cleanup, no outcome recorded, exit code 70 (gunicorn starts a new worker)."""
    print(f"crash point {point}: terminating the worker", file=sys.stderr, flush=True)
    os._exit(70)


@contextlib.contextmanager
def armed(header: str | None) -> Iterator[None]:
    """Arm the points a request names (each fires once, on this request's thread only)."""
    points = frozenset(p.strip() for p in (header or "").split(",") if p.strip()) & POINTS
    token = _armed.set(points)
    try:
        yield
    finally:
        _armed.reset(token)


def _fire(point: str, crash: Callable[[str], None]) -> None:
    if point in _armed.get():
        _armed.set(_armed.get() - {point})
        crash(point)


class CrashingStore:
    """A JobStore that dies right after a successful claim when `after_claim` is armed."""

    def __init__(self, inner: Any, crash: Callable[[str], None] = exit_now):
        self._inner = inner
        self._crash = crash

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def claim_or_get(self, job: Any) -> Any:
        result = self._inner.claim_or_get(job)
        if result[1]:
            _fire("after_claim", self._crash)
        return result


class CrashingMailer:
    """A Mailer that dies after Gmail answered a send (before the outcome is recorded) when `after_send` is armed."""

    def __init__(self, inner: Any, crash: Callable[[str], None] = exit_now):
        self._inner = inner
        self._crash = crash

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def send(self, raw: bytes) -> Any:
        outcome = self._inner.send(raw)
        _fire("after_send", self._crash)
        return outcome


def install(service: Any, crash: Callable[[str], None] = exit_now) -> Any:
    """Wrap a SafeSendService's store and mailer (once)."""
    if not isinstance(service.store, CrashingStore):
        service.store = CrashingStore(service.store, crash)
        service.mailer = CrashingMailer(service.mailer, crash)
    return service
