"""Fault injection between the job store's Firestore REST client and the REAL emulator: test tooling, never deployed.

Why: the dangerous failure of a conditional write is not "the server refused" but "the server
applied it and the answer never came back" (a dropped connection, a client deadline, a 503 from a
front end after the backend committed). Only a real server can apply the write, so the fault sits
in the client, around the real exchange with the emulator:

- ``lose_answers``: the request really goes to the emulator and runs to completion, then the caller
  gets an error instead of the emulator's answer, whatever it was;
- ``fail_before_send``: the caller gets the error and the request never leaves the client.

The error the caller gets is a ``FaultCode``: ``TRANSPORT`` (the default) is what a dropped
connection looks like to firestore_rest, a FirestoreTransportError whose ``request_sent`` tells the
truth (True for a lost answer, False before sending); ``UNAVAILABLE`` (503) and
``DEADLINE_EXCEEDED`` (504) are FirestoreApiErrors, what a front end or a proxy answers.

Each rule applies to the next ``times`` calls of one operation (``"commit"`` by default; ``"get"``
and ``"run_query"`` work the same way) that pass an optional ``match(operation, request)`` filter:
``request`` is the list of writes for a commit, ``(collection, document_id)`` for a get, the
structured query for a query. Calls run on the calling thread, so a filter may look at
``threading.current_thread()`` to target some threads of a race. Thread-safe; every injected fault
is recorded, with the request and what the emulator really answered.

Usage::

    faults = FirestoreFaults()
    with emulator_client("demo-project", faults) as client:   # needs FIRESTORE_EMULATOR_HOST
        store = FirestoreJobStore("demo-project", client=client)
        faults.lose_answers("commit", times=1)
        store.claim_or_get(job)   # the create lands, its answer is lost, the store must find out
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NoReturn

from safesend.adapters.access_tokens import AccessTokens
from safesend.adapters.firestore_rest import (
    DEFAULT_DATABASE,
    FirestoreApiError,
    FirestoreRestClient,
    FirestoreTransportError,
)

__all__ = [
    "OPERATIONS",
    "FaultCode",
    "FaultInjectionError",
    "FaultMode",
    "FaultyFirestoreClient",
    "FirestoreFaults",
    "InjectedApiError",
    "InjectedFault",
    "InjectedTransportError",
    "emulator_client",
]

OPERATIONS = ("commit", "get", "run_query")
Match = Callable[[str, Any], bool]


class FaultInjectionError(Exception):
    """The fault tooling was misused (e.g. pointed at something that is not an emulator)."""


class FaultMode(str, Enum):
    LOSE_ANSWER = "lose_answer"  # the emulator ran the call; its answer is replaced by an error
    FAIL_BEFORE_SEND = "fail_before_send"  # the call never reached the emulator


class FaultCode(str, Enum):
    """What the caller gets instead of an answer."""

    TRANSPORT = "transport"  # FirestoreTransportError: the connection failed (request_sent tells when)
    UNAVAILABLE = "UNAVAILABLE"  # FirestoreApiError 503
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"  # FirestoreApiError 504


_HTTP_STATUS = {FaultCode.UNAVAILABLE: 503, FaultCode.DEADLINE_EXCEEDED: 504}
OK = "OK"  # InjectedFault.server_status of a call the emulator answered with success
NO_ANSWER = "NO_ANSWER"  # ... of a call whose real answer did not come either (a real transport error)


class InjectedTransportError(FirestoreTransportError):
    """An injected FirestoreTransportError (callers handle it like the real one)."""


class InjectedApiError(FirestoreApiError):
    """An injected FirestoreApiError (callers handle it like the real one)."""


@dataclass(frozen=True)
class InjectedFault:
    """One fault as it happened. `server_status` is what the emulator really answered (lost answers
    only): OK, the error's canonical status (ALREADY_EXISTS, FAILED_PRECONDITION...) or NO_ANSWER."""

    operation: str
    mode: FaultMode
    code: FaultCode
    thread: str
    server_status: str | None = None
    request: Any = field(default=None, compare=False, repr=False)


@dataclass
class _Rule:
    operation: str
    mode: FaultMode
    code: FaultCode
    remaining: int
    match: Match | None


class FirestoreFaults:
    """The armed fault rules and the record of what was injected; shared by FaultyFirestoreClients."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[_Rule] = []
        self._injected: list[InjectedFault] = []

    def lose_answers(
        self,
        operation: str = "commit",
        times: int = 1,
        code: FaultCode = FaultCode.TRANSPORT,
        match: Match | None = None,
    ) -> None:
        """The next `times` matching calls complete on the emulator; the caller gets `code` instead."""
        self._arm(operation, FaultMode.LOSE_ANSWER, code, times, match)

    def fail_before_send(
        self,
        operation: str = "commit",
        times: int = 1,
        code: FaultCode = FaultCode.TRANSPORT,
        match: Match | None = None,
    ) -> None:
        """The next `times` matching calls fail with `code` without reaching the emulator."""
        self._arm(operation, FaultMode.FAIL_BEFORE_SEND, code, times, match)

    def clear(self) -> None:
        """Disarm every rule (the record of injected faults is kept)."""
        with self._lock:
            self._rules.clear()

    @property
    def injected(self) -> list[InjectedFault]:
        with self._lock:
            return list(self._injected)

    def count(self, mode: FaultMode | None = None, operation: str | None = None) -> int:
        return sum(
            1
            for f in self.injected
            if (mode is None or f.mode is mode) and (operation is None or f.operation == operation)
        )

    def _arm(self, operation: str, mode: FaultMode, code: FaultCode, times: int, match: Match | None) -> None:
        if operation not in OPERATIONS:
            raise FaultInjectionError(f"unknown operation {operation!r}; expected one of {', '.join(OPERATIONS)}")
        if isinstance(times, bool) or not isinstance(times, int) or times < 1:
            raise FaultInjectionError(f"times must be an int >= 1, got {times!r}")
        try:
            code = FaultCode(code)
        except ValueError:
            raise FaultInjectionError(
                f"an injected fault is one of {[c.value for c in FaultCode]}, not {code!r}"
            ) from None
        with self._lock:
            self._rules.append(_Rule(operation, mode, code, times, match))

    def _take(self, operation: str, request: Any) -> _Rule | None:
        """Claim one use of the first armed rule for this call, atomically (racing threads). The
        filter runs under the lock: keep it cheap and free of client calls."""
        with self._lock:
            for rule in self._rules:
                if rule.operation != operation or rule.remaining <= 0:
                    continue
                if rule.match is None or rule.match(operation, request):
                    rule.remaining -= 1
                    return rule
        return None

    def _record(self, operation: str, rule: _Rule, request: Any, server_status: str | None) -> InjectedFault:
        fault = InjectedFault(operation, rule.mode, rule.code, threading.current_thread().name, server_status, request)
        with self._lock:
            self._injected.append(fault)
        return fault


class FaultyFirestoreClient(FirestoreRestClient):
    """A FirestoreRestClient for the emulator only, whose calls go through `faults`' rules.

    Everything that is not faulted is the real client's behaviour (its connection per thread, its
    deadlines, its errors), so a store given this client is the store as deployed."""

    def __init__(
        self,
        project: str,
        faults: FirestoreFaults,
        database: str = DEFAULT_DATABASE,
        emulator_host: str | None = None,
        tokens: AccessTokens | None = None,
    ):
        host = emulator_host if emulator_host is not None else os.environ.get("FIRESTORE_EMULATOR_HOST")
        if not host:
            raise FaultInjectionError(
                "FIRESTORE_EMULATOR_HOST is not set: fault injection only runs against the emulator"
            )
        super().__init__(project, database=database, emulator_host=host, tokens=tokens)
        self.faults = faults

    def get(self, collection: str, document_id: str, timeout_s: float) -> dict[str, Any] | None:
        rule = self._before("get", (collection, document_id))
        if rule is None:
            return super().get(collection, document_id, timeout_s)
        try:
            document = super().get(collection, document_id, timeout_s)
        except (FirestoreApiError, FirestoreTransportError) as exc:
            self._lost("get", rule, (collection, document_id), exc)
        self._lost("get", rule, (collection, document_id), None if document is not None else "NOT_FOUND")

    def commit(self, writes: Sequence[Mapping[str, Any]], timeout_s: float) -> dict[str, Any]:
        request = list(writes)
        rule = self._before("commit", request)
        if rule is None:
            return super().commit(writes, timeout_s)
        try:
            super().commit(writes, timeout_s)  # the emulator applies (or refuses) it here
        except (FirestoreApiError, FirestoreTransportError) as exc:
            self._lost("commit", rule, request, exc)
        self._lost("commit", rule, request, None)

    def run_query(self, structured_query: Mapping[str, Any], timeout_s: float) -> list[dict[str, Any]]:
        rule = self._before("run_query", structured_query)
        if rule is None:
            return super().run_query(structured_query, timeout_s)
        try:
            super().run_query(structured_query, timeout_s)
        except (FirestoreApiError, FirestoreTransportError) as exc:
            self._lost("run_query", rule, structured_query, exc)
        self._lost("run_query", rule, structured_query, None)

    def _before(self, operation: str, request: Any) -> _Rule | None:
        """The rule that applies to this call, or None; a fail-before-send rule raises here."""
        rule = self.faults._take(operation, request)
        if rule is None or rule.mode is FaultMode.LOSE_ANSWER:
            return rule
        self.faults._record(operation, rule, request, server_status=None)
        raise _injected(rule.code, f"injected before send ({operation})", request_sent=False)

    def _lost(
        self,
        operation: str,
        rule: _Rule,
        request: Any,
        outcome: FirestoreApiError | FirestoreTransportError | str | None,
    ) -> NoReturn:
        """Record what the emulator answered (an error, a status such as NOT_FOUND, or None for
        success), then raise the injected error in its place."""
        server_status: str
        if isinstance(outcome, FirestoreApiError):
            server_status = outcome.status
        elif isinstance(outcome, FirestoreTransportError):
            server_status = NO_ANSWER
        else:
            server_status = outcome or OK
        self.faults._record(operation, rule, request, server_status=server_status)
        if rule.code is FaultCode.TRANSPORT:
            self.close()  # as after a real dropped connection: the next call opens a new one
        raise _injected(rule.code, f"injected: answer of {operation} lost ({server_status} on the server)", True)


def _injected(code: FaultCode, detail: str, request_sent: bool) -> Exception:
    if code is FaultCode.TRANSPORT:
        return InjectedTransportError(detail, request_sent=request_sent)
    return InjectedApiError(_HTTP_STATUS[code], code.value, detail)


@contextmanager
def emulator_client(
    project: str, faults: FirestoreFaults, emulator_host: str | None = None
) -> Iterator[FaultyFirestoreClient]:
    """A FaultyFirestoreClient to the emulator at `emulator_host` (default FIRESTORE_EMULATOR_HOST),
    closed on exit. Refuses to run without an emulator host: this must never touch a real database."""
    client = FaultyFirestoreClient(project, faults, emulator_host=emulator_host)
    try:
        yield client
    finally:
        client.close()
