"""An in-memory JobStore with the same semantics as the Firestore and PostgreSQL stores, for unit tests
and benchmarks. tests/integration/test_store_contract.py runs the same contract suite against all three.

Local tooling (devstack/), never deployed: the functions package holds only what production runs.

Like the real stores it keeps each job as a stored document, not as the caller's object: what a
read returns went through Job.to_dict / Job.from_dict, so nested values are never shared with a
caller, the store token is never kept, every timestamp (nested ones included) comes back as an
aware UTC datetime and tuples come back as lists. A document that cannot be read as a job
(put_document, for tests) is left out of the queries and logged, never raised.
"""

from __future__ import annotations

import dataclasses
import operator
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from safesend.adapters.store_common import readable_page
from safesend.core.errors import ConcurrentUpdateError
from safesend.core.model import Job, as_utc
from safesend.core.ports import Cursor
from safesend.core.states import State

# Values kept as they are, without a call: most of a document. Every store call copies whole
# documents (a job's events included), and as one call per value _stored was ~780k calls in one
# 300-example service property, each also a call event for coverage's tracer in the gate (the
# service properties under coverage 33.9 -> 26.5 CPU-s, 2026-12-02, 2-core machine).
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _stored(value: Any) -> Any:
    """A deep copy as a document store keeps it: dicts, lists, aware UTC datetimes, scalars."""
    if isinstance(value, dict):
        return {key: item if type(item) in _SCALARS else _stored(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [item if type(item) in _SCALARS else _stored(item) for item in value]
    if isinstance(value, datetime):
        return as_utc(value)
    return value


_OPEN_REVIEW_STATES = (State.REVIEW.value, State.FAILED.value)
_FIELD_THEN_ID = operator.itemgetter(0, 1)  # a query's order: (field, id), without a Python call per item
_FIELDS = tuple(f.name for f in dataclasses.fields(Job) if f.name != "store_token")


def _document(job: Job) -> dict[str, Any]:
    """What Job.to_dict() gives, stored: without dataclasses.asdict's deep copies (this one copies
    once, in _stored), which made every unit test's store call several times slower."""
    doc: dict[str, Any] = _stored({name: getattr(job, name) for name in _FIELDS})
    doc["state"] = job.state.value
    return doc


class InMemoryJobStore:
    """Thread-safe; documents in a dict under one lock."""

    def __init__(self) -> None:
        self._docs: dict[str, dict[str, Any]] = {}
        self._sweep: dict[str, Any] | None = None
        self._ops: dict[str, dict[str, Any]] = {}
        self._lags: dict[str, tuple[dict[str, Any], int]] = {}  # mailbox -> (record, version)
        self._lock = threading.Lock()

    def record_sweep(self, summary: Mapping[str, Any]) -> None:
        with self._lock:
            self._sweep = _stored(dict(summary))

    def last_sweep(self) -> dict[str, Any] | None:
        with self._lock:
            return _stored(self._sweep) if self._sweep is not None else None

    def record_op(self, name: str, doc: Mapping[str, Any]) -> None:
        with self._lock:
            self._ops[name] = _stored(dict(doc))

    def read_op(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            found = self._ops.get(name)
        return _stored(found) if found is not None else None

    def read_mailbox_lag(self, mailbox: str) -> tuple[dict[str, Any] | None, Any]:
        with self._lock:
            found = self._lags.get(mailbox)
        return (None, None) if found is None else (_stored(found[0]), found[1])

    def write_mailbox_lag(self, mailbox: str, record: Mapping[str, Any], token: Any) -> bool:
        with self._lock:
            found = self._lags.get(mailbox)
            if (found[1] if found else None) != token:
                return False
            self._lags[mailbox] = (_stored(dict(record)), (found[1] if found else 0) + 1)
            return True

    def mailbox_lags(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {mailbox: _stored(record) for mailbox, (record, _) in self._lags.items()}

    def claim_or_get(self, job: Job) -> tuple[Job, bool]:
        stored = job.copy()
        stored.version, stored.store_token = 1, None
        with self._lock:
            existing = self._docs.get(job.id)
            if existing is None:
                self._docs[job.id] = _document(stored)
        if existing is not None:
            return Job.from_dict(_stored(existing)), False
        return stored, True

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            doc = self._docs.get(job_id)
        return Job.from_dict(_stored(doc)) if doc is not None else None

    def compare_and_set(self, job: Job, expected_version: int) -> Job:
        stored = job.copy()
        stored.version, stored.store_token = expected_version + 1, None
        with self._lock:
            current = self._docs.get(job.id)
            if current is None or current.get("version") != expected_version:
                raise ConcurrentUpdateError(job.id)
            self._docs[job.id] = _document(stored)
        return stored

    def find_due(self, state: State, now: datetime, limit: int, start_after: Cursor | None = None) -> Sequence[Job]:
        now, wanted = as_utc(now), state.value  # read once, not per document
        return self._query(
            lambda d: d.get("state") == wanted and _at_or_before(d.get("next_check_at"), now),
            "next_check_at",
            limit,
            start_after,
        )

    def find_open_reviews(self, limit: int) -> Sequence[Job]:
        return self._query(
            lambda d: d.get("state") in _OPEN_REVIEW_STATES and isinstance(d.get("updated_at"), datetime),
            "updated_at",
            limit,
        )

    def find_notices_due(self, now: datetime, limit: int, start_after: Cursor | None = None) -> Sequence[Job]:
        now = as_utc(now)
        return self._query(lambda d: _at_or_before(d.get("notice_due_at"), now), "notice_due_at", limit, start_after)

    def all(self) -> list[Job]:
        with self._lock:
            docs = [_stored(d) for d in self._docs.values()]
        return [Job.from_dict(d) for d in docs]

    def put_document(self, job_id: str, document: dict[str, Any]) -> None:
        """Store a raw document, as a bug or a hand edit could leave one (tests only)."""
        with self._lock:
            self._docs[job_id] = _stored(document)

    def _query(
        self,
        matches: Callable[[dict[str, Any]], bool],
        order_by: str,
        limit: int,
        start_after: Cursor | None = None,
    ) -> list[Job]:
        """Like the real stores: match on the stored fields, order by (field, id), start after the
        cursor, limit, then read each document as a job, leaving out (and logging) the ones that are
        not and reading past them (store_common.readable_page)."""

        def fetch(after: tuple[Any, str] | None, count: int) -> list[tuple[tuple[Any, str], dict[str, Any]]]:
            with self._lock:
                found = [
                    (doc[order_by], job_id, doc)
                    for job_id, doc in self._docs.items()
                    if matches(doc) and (after is None or (doc[order_by], job_id) > after)
                ]
                found.sort(key=_FIELD_THEN_ID)
                return [((value, job_id), _stored(doc)) for value, job_id, doc in found[: max(count, 0)]]

        first = (as_utc(start_after[0]), start_after[1]) if start_after is not None else None
        return readable_page(
            fetch, lambda record: Job.from_dict(record[1]), lambda record: (record[0], record[0][1]), limit, first
        )


def _at_or_before(value: Any, now: datetime) -> bool:
    return isinstance(value, datetime) and value <= now
