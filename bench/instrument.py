"""Counters: Firestore RPCs and documents (at the client's GAPIC layer), JobStore calls, Gmail calls.

Firestore is counted below google-cloud-firestore's DocumentReference/Transaction code, on the
GAPIC client every RPC goes through, so what is counted is what was sent to the server, transaction
retries and failed commits included:
  reads   = documents returned by BatchGetDocuments (found or missing: Firestore bills a lookup of an
            absent document as one read) + documents returned by RunQuery (at least 1 per query);
  writes  = writes in commits that succeeded (a create refused with ALREADY_EXISTS writes nothing);
  rpcs    = every call, by method.
Gmail is counted at the simulator (what reached "Gmail"), priced with Gmail's published quota units.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from safesend.model import Job
from safesend.states import State

# Gmail's published quota units: messages.send 100, messages.list 5, messages.get 5, history.list 2,
# getProfile 1.
GMAIL_UNITS = {"send": 100, "list": 5, "get": 5, "history": 2, "profile": 1}
GMAIL_CALLS = (  # simulator method -> label
    ("send", "send"),
    ("list_messages", "list"),
    ("get_message", "get"),
    ("list_history", "history"),
    ("get_profile", "profile"),
)


class FirestoreRpcCounter:
    """Stands in for `client._firestore_api` and counts what passes through."""

    def __init__(self, real: Any):
        self._real = real
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def _add(self, **amounts: int) -> None:
        with self._lock:
            self.counts.update(amounts)

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.counts)

    # -- counted RPCs
    def batch_get_documents(self, *args: Any, **kwargs: Any) -> Any:
        self._add(rpc_batch_get=1)
        responses = self._real.batch_get_documents(*args, **kwargs)

        def counted() -> Any:
            for response in responses:
                kind = response._pb.WhichOneof("result")
                if kind == "found":
                    self._add(read_found=1)
                elif kind == "missing":
                    self._add(read_missing=1)
                yield response

        return counted()

    def run_query(self, *args: Any, **kwargs: Any) -> Any:
        self._add(rpc_run_query=1)
        responses = self._real.run_query(*args, **kwargs)

        def counted() -> Any:
            docs = 0
            try:
                for response in responses:
                    if response._pb.HasField("document"):
                        docs += 1
                    yield response
            finally:
                self._add(read_query_docs=docs, read_query_min=0 if docs else 1)

        return counted()

    def commit(self, *args: Any, **kwargs: Any) -> Any:
        request = kwargs.get("request", args[0] if args else None)
        writes = request.get("writes") if isinstance(request, dict) else getattr(request, "writes", ())
        in_tx = bool(request.get("transaction") if isinstance(request, dict) else getattr(request, "transaction", b""))
        self._add(rpc_commit=1)
        try:
            result = self._real.commit(*args, **kwargs)
        except Exception:
            self._add(commit_failed=1)
            raise
        self._add(writes=len(writes or ()), tx_commits=1 if in_tx else 0)
        return result

    def begin_transaction(self, *args: Any, **kwargs: Any) -> Any:
        self._add(rpc_begin_transaction=1)
        return self._real.begin_transaction(*args, **kwargs)

    def rollback(self, *args: Any, **kwargs: Any) -> Any:
        self._add(rpc_rollback=1)
        return self._real.rollback(*args, **kwargs)


def count_firestore(client: Any) -> FirestoreRpcCounter:
    """Install a counter on a google.cloud.firestore.Client (idempotent)."""
    current = client._firestore_api  # creates the GAPIC client if needed
    if isinstance(current, FirestoreRpcCounter):
        return current
    counter = FirestoreRpcCounter(current)
    client._firestore_api_internal = counter
    return counter


def firestore_summary(delta: Counter[str]) -> dict[str, int]:
    reads = delta["read_found"] + delta["read_missing"] + delta["read_query_docs"] + delta["read_query_min"]
    rpcs = sum(v for k, v in delta.items() if k.startswith("rpc_"))
    return {
        "reads": reads,
        "reads_of_absent_docs": delta["read_missing"],
        "query_reads": delta["read_query_docs"] + delta["read_query_min"],
        "writes": delta["writes"],
        "transactions": delta["rpc_begin_transaction"],
        "commits": delta["rpc_commit"],
        "failed_commits": delta["commit_failed"],
        "rollbacks": delta["rpc_rollback"],
        "rpcs": rpcs,
    }


def postgres_summary(delta: Counter[str]) -> dict[str, int]:
    """What a devstack.postgres.PgFaultProxy saw on the wire: statements (extended-protocol executes
    and simple queries), round trips (ReadyForQuery), rows read and written, prepares (Parse), and
    the statements among them that only control a transaction (BEGIN, COMMIT...)."""
    return {
        "statements": delta["execute"] + delta["query"],
        "round_trips": delta["round_trips"],
        "rows_read": delta["rows_read"],
        "rows_written": delta["rows_written"],
        "prepares": delta["parse"],
        "transaction_statements": delta["transaction_control"],
        "connections": delta["startup"],
    }


class CountingStore:
    """A JobStore that counts which store operations the service asked for, then delegates."""

    def __init__(self, inner: Any):
        self.inner = inner
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        self.sequence: list[str] = []

    def _note(self, name: str) -> None:
        with self._lock:
            self.calls[name] += 1
            if len(self.sequence) < 200:
                self.sequence.append(name)

    def reset(self) -> None:
        with self._lock:
            self.calls.clear()
            self.sequence.clear()

    def claim_or_get(self, job: Job) -> tuple[Job, bool]:
        self._note("claim_or_get")
        return self.inner.claim_or_get(job)

    def get(self, job_id: str) -> Job | None:
        self._note("get")
        return self.inner.get(job_id)

    def compare_and_set(self, job: Job, expected_version: int) -> Job:
        self._note("compare_and_set")
        return self.inner.compare_and_set(job, expected_version)

    def find_due(self, state: State, now: datetime, limit: int) -> Sequence[Job]:
        self._note("find_due")
        return self.inner.find_due(state, now, limit)


class GmailCallCounter:
    """Counts the Gmail calls that reached a GmailSimulator (messages.send / list / get, history.list,
    getProfile) by wrapping its instance methods, until restore()."""

    def __init__(self, sim: Any):
        self._sim = sim
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        for name, label in GMAIL_CALLS:
            original = getattr(sim, name)

            def wrapper(*args: Any, _original: Any = original, _label: str = label, **kwargs: Any) -> Any:
                with self._lock:
                    self.counts[_label] += 1
                return _original(*args, **kwargs)

            setattr(sim, name, wrapper)

    def restore(self) -> None:
        """The simulator's own methods again (the wrappers are instance attributes over the class's)."""
        for name, _ in GMAIL_CALLS:
            self._sim.__dict__.pop(name, None)

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.counts)


def gmail_units(delta: Counter[str]) -> int:
    return sum(GMAIL_UNITS[k] * delta[k] for k in GMAIL_UNITS)


class CountingPublisher:
    """ReviewPublisher stand-in: keeps what would have gone to Pub/Sub."""

    def __init__(self) -> None:
        self.items: list[tuple[dict[str, Any], dict[str, str]]] = []

    def publish(self, item: dict[str, Any], attributes: dict[str, str]) -> str:
        self.items.append((item, attributes))
        return f"bench-{len(self.items)}"
