"""Fault injection between a Firestore client and the REAL emulator: test tooling, never deployed.

Why: the dangerous failure of a conditional write is not "the server refused" but "the server
applied it and the answer never came back" (a dropped connection, a client deadline). Only a
real server can apply the write, so the fault sits on the client's gRPC channel:

- ``lose_answers``: the call runs on the server to completion, then the caller gets a gRPC error
  (UNAVAILABLE by default, or DEADLINE_EXCEEDED) instead of the server's answer, whatever it was;
- ``fail_before_send``: the caller gets the error and the call never leaves the client.

Each rule applies to the next ``times`` unary-unary calls of one RPC (``Commit`` by default;
``BeginTransaction``, ``Rollback``, ``BatchWrite`` work the same way) that pass an optional
``match(method, request)`` filter. The interceptor runs on the calling thread, so a filter may
look at ``threading.current_thread()`` to target some threads of a race. Streaming RPCs (reads,
queries) pass through untouched. Thread-safe; every injected fault is recorded.

Usage::

    faults = FirestoreFaults()
    with emulator_client("demo-project", faults) as client:   # needs FIRESTORE_EMULATOR_HOST
        faults.lose_answers("Commit", times=1)
        client.collection("c").document("d").create({"a": 1}, retry=None)  # stored, but raises
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from typing import Any

import grpc
from google.cloud import firestore
from google.cloud.firestore_v1.services.firestore import FirestoreClient
from google.cloud.firestore_v1.services.firestore.transports import FirestoreGrpcTransport

__all__ = [
    "FaultInjectionError",
    "FaultMode",
    "FirestoreFaults",
    "InjectedFault",
    "InjectedRpcError",
    "emulator_client",
]

Match = Callable[[str, Any], bool]
_CHANNEL_OPTIONS = (("grpc.enable_http_proxy", 0),)  # loopback emulator: never through a proxy


class FaultInjectionError(Exception):
    """The fault tooling was misused (e.g. pointed at something that is not an emulator)."""


class FaultMode(str, Enum):
    LOSE_ANSWER = "lose_answer"  # the server ran the call; its answer is replaced by an error
    FAIL_BEFORE_SEND = "fail_before_send"  # the call never reached the server


@dataclass(frozen=True)
class InjectedFault:
    """One fault as it happened; `server_code` is what the server really answered (lost answers only)."""

    method: str
    mode: FaultMode
    code: grpc.StatusCode
    thread: str
    server_code: grpc.StatusCode | None = None


@dataclass
class _Rule:
    method: str
    mode: FaultMode
    code: grpc.StatusCode
    remaining: int
    match: Match | None


class InjectedRpcError(grpc.RpcError, grpc.Call, grpc.Future):
    """What a dead connection looks like to the caller: like grpc's own failed-call object, an
    RpcError that is also a finished Call and Future, so interceptors stacked on top (the GAPIC
    logging one) and google.api_core's from_grpc_error treat it exactly like a real failure."""

    def __init__(self, code: grpc.StatusCode, details: str):
        super().__init__(f"{code.name}: {details}")
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def initial_metadata(self) -> tuple:
        return ()

    def trailing_metadata(self) -> None:
        return None

    def is_active(self) -> bool:
        return False

    def time_remaining(self) -> float | None:
        return None

    def cancel(self) -> bool:
        return False

    def add_callback(self, callback: Callable[[], None]) -> bool:
        return False

    def cancelled(self) -> bool:
        return False

    def running(self) -> bool:
        return False

    def done(self) -> bool:
        return True

    def result(self, timeout: float | None = None) -> Any:
        raise self

    def exception(self, timeout: float | None = None) -> InjectedRpcError:
        return self

    def traceback(self, timeout: float | None = None) -> None:
        return None

    def add_done_callback(self, fn: Callable[[Any], None]) -> None:
        fn(self)


class FirestoreFaults(grpc.UnaryUnaryClientInterceptor):
    """A gRPC client interceptor holding armed fault rules and the record of what it injected."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[_Rule] = []
        self._injected: list[InjectedFault] = []

    def lose_answers(
        self,
        method: str = "Commit",
        times: int = 1,
        code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE,
        match: Match | None = None,
    ) -> None:
        """The next `times` matching calls complete on the server; the caller gets `code` instead."""
        self._arm(method, FaultMode.LOSE_ANSWER, code, times, match)

    def fail_before_send(
        self,
        method: str = "Commit",
        times: int = 1,
        code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE,
        match: Match | None = None,
    ) -> None:
        """The next `times` matching calls fail with `code` without reaching the server."""
        self._arm(method, FaultMode.FAIL_BEFORE_SEND, code, times, match)

    def clear(self) -> None:
        """Disarm every rule (the record of injected faults is kept)."""
        with self._lock:
            self._rules.clear()

    @property
    def injected(self) -> list[InjectedFault]:
        with self._lock:
            return list(self._injected)

    def count(self, mode: FaultMode | None = None, method: str | None = None) -> int:
        return sum(
            1 for f in self.injected if (mode is None or f.mode is mode) and (method is None or f.method == method)
        )

    def intercept_unary_unary(
        self, continuation: Callable[[Any, Any], Any], client_call_details: grpc.ClientCallDetails, request: Any
    ) -> Any:
        method = client_call_details.method.rsplit("/", 1)[-1]
        rule = self._take(method, request)
        if rule is None:
            return continuation(client_call_details, request)
        if rule.mode is FaultMode.FAIL_BEFORE_SEND:
            self._record(method, rule, server_code=None)
            return InjectedRpcError(rule.code, f"injected before send ({method})")
        outcome = continuation(client_call_details, request)  # the server applies the call here
        error = outcome.exception()
        server_code = error.code() if isinstance(error, grpc.Call) else grpc.StatusCode.OK
        self._record(method, rule, server_code=server_code)
        return InjectedRpcError(rule.code, f"injected: answer of {method} lost ({server_code.name} on the server)")

    def _arm(self, method: str, mode: FaultMode, code: grpc.StatusCode, times: int, match: Match | None) -> None:
        if times < 1:
            raise FaultInjectionError(f"times must be >= 1, got {times}")
        if code is grpc.StatusCode.OK:
            raise FaultInjectionError("an injected fault needs an error status, not OK")
        with self._lock:
            self._rules.append(_Rule(method, mode, code, times, match))

    def _take(self, method: str, request: Any) -> _Rule | None:
        """Claim one use of the first armed rule for this call, atomically (racing threads)."""
        with self._lock:
            for rule in self._rules:
                if rule.method == method and rule.remaining > 0 and (rule.match is None or rule.match(method, request)):
                    rule.remaining -= 1
                    return rule
        return None

    def _record(self, method: str, rule: _Rule, server_code: grpc.StatusCode | None) -> None:
        fault = InjectedFault(method, rule.mode, rule.code, threading.current_thread().name, server_code)
        with self._lock:
            self._injected.append(fault)


@contextmanager
def emulator_client(project: str, faults: FirestoreFaults) -> Iterator[firestore.Client]:
    """A firestore.Client whose every RPC goes through `faults`, to the emulator in FIRESTORE_EMULATOR_HOST.

    The library has no public hook for a channel or an interceptor, so the GAPIC client is built
    here on an intercepted channel and installed as the client's (lazily created) API object.
    Refuses to run without an emulator host: this must never touch a real database.
    """
    host = os.environ.get("FIRESTORE_EMULATOR_HOST")
    if not host:
        raise FaultInjectionError("FIRESTORE_EMULATOR_HOST is not set: fault injection only runs against the emulator")
    client = firestore.Client(project=project)  # emulator mode: anonymous credentials, owner metadata
    channel = grpc.intercept_channel(grpc.insecure_channel(host, options=list(_CHANNEL_OPTIONS)), faults)
    transport = FirestoreGrpcTransport(host=host, channel=channel)
    client._firestore_api_internal = FirestoreClient(transport=transport)  # no public hook
    try:
        yield client
    finally:
        transport.close()
