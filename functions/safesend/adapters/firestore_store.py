"""JobStore on Firestore (collection `ai_jobs`).

It speaks Firestore's REST API through firestore_rest (standard library only: a cold instance
does not import grpc and google-cloud-firestore, ~250 ms). Every write is one conditional commit,
never a transaction: a claim is a create (precondition:
the document does not exist), a compare-and-set an update (precondition: the update time we read).

Commits are never retried underneath. A retried commit whose first answer was lost
(UNAVAILABLE or DEADLINE_EXCEEDED after the server applied it) meets our own write, fails its
precondition, and would be reported as a lost race although our write is stored. Instead every
write carries a fresh id in the store-private field `_write_id` (not a Job field: Job.from_dict
ignores unknown keys), and after an ambiguous failure we re-read the document and decide:
our id and version are there -> our write landed; the document is as we read it -> it did not,
so we send it again (a bounded number of times); anything else -> someone else wrote first.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from ..core.errors import ConcurrentUpdateError, IndexMissingError, StoreUnavailableError
from ..core.model import Job
from ..core.ports import Cursor
from ..core.states import State
from .firestore_rest import FirestoreApiError, FirestoreRestClient, FirestoreTransportError
from .firestore_values import decode_fields, encode_fields, encode_value
from .store_common import BoundedAttempts, readable_page

T = TypeVar("T")
Document = dict[str, Any]  # Firestore's REST document: name, fields, createTime, updateTime

WRITE_ID_FIELD = "_write_id"
OPS_SUFFIX = "_ops"  # <collection>_ops: the service's own records (the last sweep), not jobs
LAG_SUFFIX = "_lag"  # <collection>_lag: one record per sender mailbox, its measured index lag
MAX_LAG_RECORDS = 500  # mailboxes read by mailbox_lags (a pool has a few)
MAX_WRITE_ATTEMPTS = 3  # and none started after the call's deadline; jittered backoff up to 0.1 s, then 0.2 s
MAX_READ_ATTEMPTS = 5
_BACKOFF_S = 0.1
# Of a store call's deadline, the share a commit leaves for the re-read that settles it when its
# answer is lost: a commit that hangs to its timeout still leaves time to learn whether it landed.
SETTLE_SHARE = 1 / 3

# After these the server may or may not have applied a commit: only a re-read can tell.
AMBIGUOUS_STATUSES = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED", "UNKNOWN", "INTERNAL", "ABORTED", "CANCELLED"})
# Transient failures of idempotent reads, tried again within the call's deadline (RESOURCE_EXHAUSTED:
# a quota or rate refusal, which passes).
TRANSIENT_READ_STATUSES = frozenset(
    {"UNAVAILABLE", "DEADLINE_EXCEEDED", "UNKNOWN", "INTERNAL", "ABORTED", "RESOURCE_EXHAUSTED"}
)
# Refusals of a commit that wrote nothing and may pass when tried again after a backoff.
RETRYABLE_REFUSALS = frozenset({"RESOURCE_EXHAUSTED"})


class FirestoreJobStore:
    """One document per job, id = job id. The client is created lazily, once per instance."""

    def __init__(
        self,
        project: str,
        collection: str = "ai_jobs",
        client: FirestoreRestClient | None = None,
        timeout_s: float = 10.0,
    ):
        self._project = project
        self._collection = collection
        self._client = client
        self._timeout_s = timeout_s

    @property
    def client(self) -> FirestoreRestClient:
        if self._client is None:
            self._client = FirestoreRestClient(self._project)
        return self._client

    @property
    def collection(self) -> str:
        return self._collection

    def claim_or_get(self, job: Job) -> tuple[Job, bool]:
        """Atomic claim: a commit with the precondition "document does not exist" (Firestore `create`).

        Exactly one of any number of concurrent claims commits; the others get ALREADY_EXISTS
        and read the winner's job. Unlike a read-then-write transaction this takes no locks, so
        ten simultaneous webhooks do not queue on lock timeouts (bench/: 36 of 50 transactional
        claims failed). A new job costs one write; a duplicate one refused write and one read.
        Our own create is recognised by its write id, never by caller data such as lease_owner:
        a create that landed but was then overwritten counts as not ours (no send from a stale claim).
        """
        deadline = time.monotonic() + self._timeout_s
        stored = job.copy()
        stored.version = 1
        write_id = _new_write_id()
        write = {"update": self._document(stored, write_id), "currentDocument": {"exists": False}}
        update_time = self._commit(
            job.id,
            write,
            refused=frozenset({"ALREADY_EXISTS"}),
            is_ours=lambda doc: _written_by(doc, write_id, stored.version),
            untouched=lambda doc: doc is None,
            deadline=deadline,
        )
        if update_time is None:
            doc = self._read(job.id, deadline)
            existing = _job_from(doc) if doc is not None else None
            if existing is None:
                raise StoreUnavailableError(f"job {job.id} reported as existing but cannot be read")
            return existing, False
        stored.store_token = update_time
        return stored, True

    def get(self, job_id: str) -> Job | None:
        doc = self._read(job_id)
        return _job_from(doc) if doc is not None else None

    def compare_and_set(self, job: Job, expected_version: int) -> Job:
        """One conditional write on the document's update time: Firestore refuses it if anyone wrote
        since. A job without a store token (not read from this store) first costs one read, which
        must still show `expected_version`. Raises StoreUnavailableError when the outcome is unknown.

        The token is the update time exactly as Firestore wrote it (nanoseconds, as a string): a
        datetime would round it to microseconds and the precondition would never match."""
        deadline = time.monotonic() + self._timeout_s  # the token read, the commit and its settling re-read
        token = (
            job.store_token if isinstance(job.store_token, str) else self._token_at(job.id, expected_version, deadline)
        )
        stored = job.copy()
        stored.version = expected_version + 1
        write_id = _new_write_id()
        document = self._document(stored, write_id)
        write = {
            "update": document,
            "updateMask": {"fieldPaths": sorted(document["fields"])},  # top-level Job field names: no quoting
            "currentDocument": {"updateTime": token},
        }
        update_time = self._commit(
            job.id,
            write,
            refused=frozenset({"FAILED_PRECONDITION", "NOT_FOUND"}),
            is_ours=lambda doc: _written_by(doc, write_id, stored.version),
            untouched=lambda doc: doc is not None and doc.get("updateTime") == token,
            deadline=deadline,
        )
        if update_time is None:
            raise ConcurrentUpdateError(job.id)
        stored.store_token = update_time
        return stored

    def find_due(self, state: State, now: datetime, limit: int, start_after: Cursor | None = None) -> Sequence[Job]:
        """Needs the composite index (state ASC, next_check_at ASC): see infra/."""
        where = _all_of(_field("state", "EQUAL", state.value), _field("next_check_at", "LESS_THAN_OR_EQUAL", now))
        return self._query(where, "next_check_at", limit, start_after)

    def find_open_reviews(self, limit: int) -> Sequence[Job]:
        """Needs the composite index (state ASC, updated_at ASC): see infra/."""
        where = _field("state", "IN", [State.REVIEW.value, State.FAILED.value])
        return self._query(where, "updated_at", limit)

    def find_notices_due(self, now: datetime, limit: int, start_after: Cursor | None = None) -> Sequence[Job]:
        """One field, so Firestore's automatic single-field index serves it (no composite index)."""
        return self._query(_field("notice_due_at", "LESS_THAN_OR_EQUAL", now), "notice_due_at", limit, start_after)

    def record_sweep(self, summary: Mapping[str, Any]) -> None:
        """One unconditional write to `<collection>_ops/sweep`: the newest sweep's record wins."""
        name = self.client.document_name(self._collection + OPS_SUFFIX, "sweep")
        try:
            self.client.commit([{"update": {"name": name, "fields": encode_fields(dict(summary))}}], self._timeout_s)
        except (FirestoreApiError, FirestoreTransportError) as exc:
            raise StoreUnavailableError(f"firestore: sweep record: {exc}") from exc

    def last_sweep(self) -> dict[str, Any] | None:
        doc = self._reading(lambda timeout_s: self.client.get(self._collection + OPS_SUFFIX, "sweep", timeout_s))
        return decode_fields(doc.get("fields")) if doc is not None else None

    def record_op(self, name: str, doc: Mapping[str, Any]) -> None:
        """One unconditional write to `<collection>_ops/op-<name>`: last writer wins."""
        path = self.client.document_name(self._collection + OPS_SUFFIX, f"op-{name}")
        try:
            self.client.commit([{"update": {"name": path, "fields": encode_fields(dict(doc))}}], self._timeout_s)
        except (FirestoreApiError, FirestoreTransportError) as exc:
            raise StoreUnavailableError(f"firestore: {name} record: {exc}") from exc

    def read_op(self, name: str) -> dict[str, Any] | None:
        ops = self._collection + OPS_SUFFIX
        doc = self._reading(lambda timeout_s: self.client.get(ops, f"op-{name}", timeout_s))
        return decode_fields(doc.get("fields")) if doc is not None else None

    def read_mailbox_lag(self, mailbox: str) -> tuple[dict[str, Any] | None, Any]:
        """The token is the document's update time (None: no document)."""
        lags = self._collection + LAG_SUFFIX
        doc = self._reading(lambda timeout_s: self.client.get(lags, _lag_id(mailbox), timeout_s))
        if doc is None:
            return None, None
        record = decode_fields(doc.get("fields"))
        record.pop("mailbox", None)
        return record, str(doc["updateTime"])

    def write_mailbox_lag(self, mailbox: str, record: Mapping[str, Any], token: Any) -> bool:
        """One commit conditioned on the update time read (or on no document): a lost race is False.
        An answer lost after the commit is StoreUnavailableError (the caller keeps nothing)."""
        name = self.client.document_name(self._collection + LAG_SUFFIX, _lag_id(mailbox))
        precondition = {"exists": False} if token is None else {"updateTime": token}
        write = {
            "update": {"name": name, "fields": encode_fields({**record, "mailbox": mailbox})},
            "currentDocument": precondition,
        }
        try:
            self.client.commit([write], self._timeout_s)
        except FirestoreApiError as exc:
            if exc.status in ("FAILED_PRECONDITION", "ALREADY_EXISTS", "NOT_FOUND"):
                return False
            raise StoreUnavailableError(f"firestore: lag record of {mailbox}: {exc}") from exc
        except FirestoreTransportError as exc:
            raise StoreUnavailableError(f"firestore: lag record of {mailbox}: {exc}") from exc
        return True

    def mailbox_lags(self) -> dict[str, dict[str, Any]]:
        query = {"from": [{"collectionId": self._collection + LAG_SUFFIX}], "limit": MAX_LAG_RECORDS}
        docs = self._reading(lambda timeout_s: self.client.run_query(query, timeout_s))
        found: dict[str, dict[str, Any]] = {}
        for doc in docs:
            record = decode_fields(doc.get("fields"))
            mailbox = record.pop("mailbox", None)
            if isinstance(mailbox, str):
                found[mailbox] = record
        return found

    def _document(self, job: Job, write_id: str) -> Document:
        """The stored document: the job's fields plus the id of the write that put them there."""
        fields = encode_fields({**job.to_dict(), WRITE_ID_FIELD: write_id})
        return {"name": self.client.document_name(self._collection, job.id), "fields": fields}

    def _query(
        self, where: Mapping[str, Any], order_by: str, limit: int, start_after: Cursor | None = None
    ) -> list[Job]:
        """Ordered by (order_by, document id): the document id is written out, as Firestore adds it
        anyway (indexes end with __name__ in the last field's direction), so a keyset cursor
        (`start_after`: the last page's value and id) names both. Unreadable documents are left out
        and read past (store_common.readable_page), resuming at the raw value Firestore holds."""

        def fetch(after: tuple[dict[str, Any], str] | None, count: int) -> list[Document]:
            query: dict[str, Any] = {
                "from": [{"collectionId": self._collection}],
                "where": where,
                "orderBy": [
                    {"field": {"fieldPath": order_by}, "direction": "ASCENDING"},
                    {"field": {"fieldPath": "__name__"}, "direction": "ASCENDING"},
                ],
                "limit": count,
            }
            if after is not None:
                reference = self.client.document_name(self._collection, after[1])
                query["startAt"] = {"values": [after[0], {"referenceValue": reference}], "before": False}
            return self._reading(lambda timeout_s: self.client.run_query(query, timeout_s))

        def position(doc: Document) -> tuple[tuple[dict[str, Any], str], str]:
            job_id = _document_id(doc)
            return ((doc.get("fields") or {}).get(order_by) or {"nullValue": None}, job_id), job_id

        first = None if start_after is None else (encode_value(start_after[0]), start_after[1])
        return readable_page(fetch, _job_from, position, limit, first)

    def _read(self, job_id: str, deadline: float | None = None) -> Document | None:
        return self._reading(lambda timeout_s: self.client.get(self._collection, job_id, timeout_s), deadline)

    def _reading(self, read: Callable[[float], T], deadline: float | None = None) -> T:
        """Run an idempotent read, tried again on transient failures until `deadline` (the store call's;
        default: the store's timeout from now), each attempt with the time left. What is left after
        that means the store is unreachable, except a query's missing index, which no retry fixes
        (IndexMissingError)."""
        error: Exception | None = None
        attempts = BoundedAttempts(MAX_READ_ATTEMPTS, self._timeout_s, _BACKOFF_S, deadline)
        for _ in attempts:
            try:
                return read(attempts.time_left())
            except FirestoreApiError as exc:
                if exc.status == "FAILED_PRECONDITION" and "index" in exc.message.lower():
                    raise IndexMissingError(f"firestore_index_missing: {exc.message}") from exc
                if exc.status not in TRANSIENT_READ_STATUSES:
                    raise StoreUnavailableError(f"firestore: {exc}") from exc
                error = exc
            except FirestoreTransportError as exc:
                error = exc
        raise StoreUnavailableError(f"firestore: read failed after {attempts.made} attempt(s): {error}") from error

    def _token_at(self, job_id: str, expected_version: int, deadline: float) -> str:
        """The update time to condition on, read now; the version must still be the expected one."""
        doc = self._read(job_id, deadline)
        if doc is None or decode_fields(doc.get("fields")).get("version") != expected_version:
            raise ConcurrentUpdateError(job_id)
        return str(doc["updateTime"])

    def _commit(
        self,
        job_id: str,
        write: Mapping[str, Any],
        refused: frozenset[str],
        is_ours: Callable[[Document | None], bool],
        untouched: Callable[[Document | None], bool],
        deadline: float,
    ) -> str | None:
        """Send one conditional commit until its fate is known: our write's update time, or None if
        another write won. `refused` (the precondition failure) is final unless an earlier attempt
        may have landed; after an ambiguous failure a re-read decides. Every attempt sends the same
        document under the same precondition, so at most one of them can ever apply. Every attempt
        and re-read gets only the time left before `deadline`, the store call's; a commit leaves
        SETTLE_SHARE of the store's timeout of it for its settling re-read."""
        maybe_landed = False
        error: Exception | None = None
        attempts = BoundedAttempts(MAX_WRITE_ATTEMPTS, self._timeout_s, _BACKOFF_S, deadline)
        reserve = self._timeout_s * SETTLE_SHARE
        for attempt in attempts:
            if attempt > 1 and attempts.time_left(reserve, floor_s=0.0) == 0.0:
                break  # no time for another commit and its settling re-read
            try:
                answer = self.client.commit([write], attempts.time_left(reserve))
                return str(answer["writeResults"][0]["updateTime"])
            except FirestoreApiError as exc:
                error = exc
                if exc.status in refused:
                    if not maybe_landed:
                        return None
                elif exc.status in RETRYABLE_REFUSALS:  # refused before writing: try again after a backoff
                    continue
                elif exc.status not in AMBIGUOUS_STATUSES:  # refused for another reason: nothing written
                    raise StoreUnavailableError(f"firestore: {exc}") from exc
            except FirestoreTransportError as exc:
                error = exc
                if not exc.request_sent:  # it never reached Firestore: this attempt changed nothing
                    continue
            except (KeyError, IndexError, TypeError) as exc:  # a 2xx without the documented answer
                error = exc
            maybe_landed = True
            doc = self._read(job_id, deadline)
            if is_ours(doc):
                return str(doc["updateTime"]) if doc is not None else None
            if not untouched(doc):
                return None
        raise StoreUnavailableError(
            f"firestore: write of {job_id} not stored after {attempts.made} attempt(s) "
            f"(a late one may still land): {error}"
        ) from error


def _field(path: str, op: str, value: Any) -> dict[str, Any]:
    return {"fieldFilter": {"field": {"fieldPath": path}, "op": op, "value": encode_value(value)}}


def _all_of(*filters: dict[str, Any]) -> dict[str, Any]:
    return {"compositeFilter": {"op": "AND", "filters": list(filters)}}


def _lag_id(mailbox: str) -> str:
    """A document id for any mailbox id (an address may hold characters ids may not)."""
    return "m" + mailbox.encode("utf-8").hex()


def _new_write_id() -> str:
    return uuid.uuid4().hex


def _written_by(doc: Document | None, write_id: str, version: int) -> bool:
    """Exact: only our write carries our write id. The version check also rejects a later writer
    that does not set the field (e.g. an older deployment during a rollout)."""
    if doc is None:
        return False
    fields = doc.get("fields") or {}
    return fields.get(WRITE_ID_FIELD) == encode_value(write_id) and fields.get("version") == encode_value(version)


def _document_id(doc: Document) -> str:
    return str(doc.get("name", "")).rsplit("/", 1)[-1]


def _job_from(doc: Document) -> Job:
    job = Job.from_dict(decode_fields(doc.get("fields")))
    job.store_token = str(doc["updateTime"])
    return job
