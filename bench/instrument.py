"""Counters: Firestore requests and documents (at the REST client), JobStore calls, Gmail calls.

Firestore is counted on safesend's REST client (`FirestoreRestClient._call`, the one place every
request of the job store goes through), so what is counted is what reached the server (a request
the client itself repeats, after a 401 or on a stale pooled connection, is one call: the first try
was refused or never processed). Per operation, with Firestore's billing rules:
  reads   = GETs of a document: 1 each, found or absent (Firestore bills a lookup of an absent
            document, the 404, as one read) + runQuery: the documents returned, at least 1 per query;
  writes  = writes in commits that succeeded. A commit Firestore refused (a create meeting
            ALREADY_EXISTS, an update whose precondition failed) writes nothing: it is counted
            apart, as `failed_commits` (and `writes_refused` in the raw counts), the convention the
            earlier GAPIC-layer counter had, so the table keeps its meaning;
  rpcs    = every call, by operation (get, commit, run_query; begin_transaction and rollback would
            be counted too, but the job store sends neither).
Gmail is counted at the simulator (what reached "Gmail"), priced with Gmail's published quota units.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from safesend.adapters.firestore_rest import FirestoreApiError, FirestoreRestClient
from safesend.core.model import Job
from safesend.core.ports import JobStore
from safesend.core.states import State

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
GRAPH_CALLS = (  # GraphSimulator method -> label: what reached "Graph" (the token endpoint apart)
    ("send_mail", "sendMail"),
    ("list_sent", "search"),
    ("get_message", "message"),
    ("delta", "delta"),
    ("issue_token", "token"),
)
# The REST method of a POST, from the end of its path (`.../documents:commit`).
_POST_OPERATIONS = {
    "commit": "commit",
    "runQuery": "run_query",
    "beginTransaction": "begin_transaction",
    "rollback": "rollback",
    "batchGet": "batch_get",
}


def _operation(method: str, path: str) -> str:
    """get, commit, run_query, ... for one REST request of FirestoreRestClient."""
    if method == "GET":
        return "get"
    return _POST_OPERATIONS.get(path.rsplit(":", 1)[-1], "other")


class FirestoreRequestCounter:
    """Stands in for a FirestoreRestClient's `_call` (an instance attribute over the class's method)
    and counts each request by operation, documents read and writes committed (see above)."""

    def __init__(self, call: Any):
        self._call = call
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()

    def _add(self, **amounts: int) -> None:
        with self._lock:
            self.counts.update(amounts)

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.counts)

    def __call__(self, method: str, path: str, body: Any, timeout_s: float, idempotent: bool) -> Any:
        operation = _operation(method, path)
        self._add(**{f"rpc_{operation}": 1})
        try:
            answer = self._call(method, path, body, timeout_s, idempotent)
        except FirestoreApiError as exc:
            self._refused(operation, body, exc)
            raise
        except Exception:
            if operation == "commit":  # no answer: it may or may not have landed (the store re-reads)
                self._add(commit_failed=1, commit_unanswered=1)
            raise
        self._answered(operation, body, answer)
        return answer

    def _answered(self, operation: str, body: Any, answer: Any) -> None:
        if operation == "get":
            self._add(read_found=1)
        elif operation == "run_query":
            docs = sum(1 for item in answer if isinstance(item, dict) and "document" in item)
            self._add(read_query_docs=docs, read_query_min=0 if docs else 1)
        elif operation == "commit":
            self._add(writes=len(body.get("writes") or ()), tx_commits=1 if body.get("transaction") else 0)

    def _refused(self, operation: str, body: Any, exc: FirestoreApiError) -> None:
        if operation == "get" and exc.status == "NOT_FOUND":
            self._add(read_missing=1)  # billed: a lookup of an absent document is one read
        elif operation == "commit":
            self._add(commit_failed=1, writes_refused=len(body.get("writes") or ()))
        else:
            self._add(request_failed=1)


def count_firestore(client: FirestoreRestClient) -> FirestoreRequestCounter:
    """Install a counter on a FirestoreRestClient (idempotent): every request of its `_call`."""
    current = vars(client).get("_call")
    if isinstance(current, FirestoreRequestCounter):
        return current
    counter = FirestoreRequestCounter(client._call)
    setattr(client, "_call", counter)  # noqa: B010 - an instance attribute over the method (mypy: no assignment to a method)
    return counter


def firestore_summary(delta: Counter[str]) -> dict[str, int]:
    """The same keys the GAPIC-layer counter gave: `rpcs` are the REST client's requests."""
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

    def __init__(self, inner: JobStore):
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

    def find_open_reviews(self, limit: int) -> Sequence[Job]:
        self._note("find_open_reviews")
        return self.inner.find_open_reviews(limit)

    def find_notices_due(self, now: datetime, limit: int) -> Sequence[Job]:
        self._note("find_notices_due")
        return self.inner.find_notices_due(now, limit)

    # The change log's lag records (usecases/lag_watch.py): the service reads them on the reconcile path.
    def read_mailbox_lag(self, mailbox: str) -> tuple[dict[str, Any] | None, Any]:
        self._note("read_mailbox_lag")
        return self.inner.read_mailbox_lag(mailbox)

    def write_mailbox_lag(self, mailbox: str, record: Mapping[str, Any], token: Any) -> bool:
        self._note("write_mailbox_lag")
        return self.inner.write_mailbox_lag(mailbox, record, token)

    def mailbox_lags(self) -> dict[str, dict[str, Any]]:
        self._note("mailbox_lags")
        return self.inner.mailbox_lags()


class GmailCallCounter:
    """Counts the Gmail calls that reached a GmailSimulator (messages.send / list / get, history.list,
    getProfile) by wrapping its instance methods, until restore()."""

    def __init__(self, sim: Any, calls: tuple[tuple[str, str], ...] = GMAIL_CALLS):
        self._sim = sim
        self._calls = calls  # the simulator's methods and their labels (GRAPH_CALLS for a GraphSimulator)
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        for name, label in calls:
            original = getattr(sim, name)

            def wrapper(*args: Any, _original: Any = original, _label: str = label, **kwargs: Any) -> Any:
                with self.lock:
                    self.counts[_label] += 1
                return _original(*args, **kwargs)

            setattr(sim, name, wrapper)

    def restore(self) -> None:
        """The simulator's own methods again (the wrappers are instance attributes over the class's)."""
        for name, _ in self._calls:
            self._sim.__dict__.pop(name, None)

    def snapshot(self) -> Counter[str]:
        with self.lock:
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
