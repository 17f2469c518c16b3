"""JobStore on Firestore (collection `ai_jobs`).

Every write is one conditional commit, never a transaction: a claim is a create (precondition:
the document does not exist), a compare-and-set an update (precondition: the update time we read).

The client library never retries these commits. A retried commit whose first answer was lost
(UNAVAILABLE or DEADLINE_EXCEEDED after the server applied it) meets our own write, fails its
precondition, and would be reported as a lost race although our write is stored. Instead every
write carries a fresh id in the store-private field `_write_id` (not a Job field: Job.from_dict
ignores unknown keys), and after an ambiguous failure we re-read the document and decide:
our id and version are there -> our write landed; the document is as we read it -> it did not,
so we send it again (a bounded number of times); anything else -> someone else wrote first.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from google.api_core import exceptions as gexc
from google.api_core.retry import Retry, if_exception_type
from google.auth import exceptions as auth_exceptions
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from ..errors import ConcurrentUpdateError, IndexMissingError, StoreUnavailableError
from ..model import Job
from ..states import State
from .store_common import BoundedAttempts, readable_job

T = TypeVar("T")
Snapshot = firestore.DocumentSnapshot[firestore.DocumentReference]

WRITE_ID_FIELD = "_write_id"
MAX_WRITE_ATTEMPTS = 3  # and none started after the store's timeout; backoff 0.1 s, then 0.2 s
_BACKOFF_S = 0.1

# After these the server may or may not have applied a commit: only a re-read can tell.
_AMBIGUOUS = (
    gexc.ServiceUnavailable,
    gexc.DeadlineExceeded,
    gexc.Unknown,
    gexc.InternalServerError,
    gexc.Aborted,
    gexc.Cancelled,
    gexc.RetryError,
    auth_exceptions.TransportError,
)
# Transient failures of idempotent reads, retried by the library within the store's timeout.
_TRANSIENT_READ = (gexc.ServiceUnavailable, gexc.DeadlineExceeded, gexc.Unknown, gexc.InternalServerError, gexc.Aborted)


class FirestoreJobStore:
    """One document per job, id = job id. The client is created lazily, once per instance."""

    def __init__(
        self, project: str, collection: str = "ai_jobs", client: firestore.Client | None = None, timeout_s: float = 10.0
    ):
        self._project = project
        self._collection = collection
        self._client = client
        self._timeout_s = timeout_s
        # Reads only: the library default keeps retrying UNAVAILABLE for 60 s+. Writes: see _commit.
        self._read_retry = Retry(
            predicate=if_exception_type(*_TRANSIENT_READ), initial=0.1, maximum=1.0, multiplier=2.0, timeout=timeout_s
        )

    @property
    def client(self) -> firestore.Client:
        if self._client is None:
            self._client = firestore.Client(project=self._project)
        return self._client

    def _ref(self, job_id: str) -> firestore.DocumentReference:
        return self.client.collection(self._collection).document(job_id)

    def claim_or_get(self, job: Job) -> tuple[Job, bool]:
        """Atomic claim: a commit with the precondition "document does not exist" (Firestore `create`).

        Exactly one of any number of concurrent claims commits; the others get ALREADY_EXISTS
        and read the winner's job. Unlike a read-then-write transaction this takes no locks, so
        ten simultaneous webhooks do not queue on lock timeouts (bench/: 36 of 50 transactional
        claims failed). A new job costs one write; a duplicate one refused write and one read.
        Our own create is recognised by its write id, never by caller data such as lease_owner:
        a create that landed but was then overwritten counts as not ours (no send from a stale claim).
        """
        stored = job.copy()
        stored.version = 1
        ref, write_id = self._ref(job.id), _new_write_id()
        data = _document(stored, write_id)
        update_time = self._commit(
            ref,
            lambda: ref.create(data, retry=None, timeout=self._timeout_s),
            refused=gexc.AlreadyExists,
            is_ours=lambda snapshot: _written_by(snapshot, write_id, stored.version),
            untouched=lambda snapshot: not snapshot.exists,
        )
        if update_time is None:
            existing = self.get(job.id)
            if existing is None:
                raise StoreUnavailableError(f"job {job.id} reported as existing but cannot be read")
            return existing, False
        stored.store_token = update_time
        return stored, True

    def get(self, job_id: str) -> Job | None:
        snapshot = self._read(self._ref(job_id))
        return _job_from(snapshot) if snapshot.exists else None

    def compare_and_set(self, job: Job, expected_version: int) -> Job:
        """One conditional write on the document's update time: Firestore refuses it if anyone wrote
        since. A job without a store token (not read from this store) first costs one read, which
        must still show `expected_version`. Raises StoreUnavailableError when the outcome is unknown."""
        ref = self._ref(job.id)
        token = job.store_token if job.store_token is not None else self._token_at(ref, expected_version)
        stored = job.copy()
        stored.version = expected_version + 1
        write_id = _new_write_id()
        data = _document(stored, write_id)
        option = self.client.write_option(last_update_time=token)
        update_time = self._commit(
            ref,
            lambda: ref.update(data, option=option, retry=None, timeout=self._timeout_s),
            refused=(gexc.FailedPrecondition, gexc.NotFound),
            is_ours=lambda snapshot: _written_by(snapshot, write_id, stored.version),
            untouched=lambda snapshot: snapshot.exists and snapshot.update_time == token,
        )
        if update_time is None:
            raise ConcurrentUpdateError(job.id)
        stored.store_token = update_time
        return stored

    def find_due(self, state: State, now: datetime, limit: int) -> Sequence[Job]:
        """Needs the composite index (state ASC, next_check_at ASC): see infra/."""
        query = (
            self.client.collection(self._collection)
            .where(filter=FieldFilter("state", "==", state.value))
            .where(filter=FieldFilter("next_check_at", "<=", now))
            .order_by("next_check_at")
            .limit(limit)
        )
        docs = _reading(lambda: list(query.stream(retry=self._read_retry, timeout=self._timeout_s)))
        return _readable_jobs(docs)

    def find_open_reviews(self, limit: int) -> Sequence[Job]:
        """Needs the composite index (state ASC, updated_at ASC): see infra/."""
        query = (
            self.client.collection(self._collection)
            .where(filter=FieldFilter("state", "in", [State.REVIEW.value, State.FAILED.value]))
            .order_by("updated_at")
            .limit(limit)
        )
        docs = _reading(lambda: list(query.stream(retry=self._read_retry, timeout=self._timeout_s)))
        return _readable_jobs(docs)

    def find_notices_due(self, now: datetime, limit: int) -> Sequence[Job]:
        """One field, so Firestore's automatic single-field index serves it (no composite index)."""
        query = (
            self.client.collection(self._collection)
            .where(filter=FieldFilter("notice_due_at", "<=", now))
            .order_by("notice_due_at")
            .limit(limit)
        )
        docs = _reading(lambda: list(query.stream(retry=self._read_retry, timeout=self._timeout_s)))
        return _readable_jobs(docs)

    def _read(self, ref: firestore.DocumentReference) -> Snapshot:
        return _reading(lambda: ref.get(retry=self._read_retry, timeout=self._timeout_s))

    def _token_at(self, ref: firestore.DocumentReference, expected_version: int) -> datetime:
        """The update time to condition on, read now; the version must still be the expected one."""
        snapshot = self._read(ref)
        if not snapshot.exists or (snapshot.to_dict() or {}).get("version") != expected_version:
            raise ConcurrentUpdateError(ref.id)
        return _update_time(snapshot)

    def _commit(
        self,
        ref: firestore.DocumentReference,
        commit: Callable[[], Any],
        refused: type[Exception] | tuple[type[Exception], ...],
        is_ours: Callable[[Snapshot], bool],
        untouched: Callable[[Snapshot], bool],
    ) -> datetime | None:
        """Send one conditional commit until its fate is known: our write's update time, or None if
        another write won. `refused` (the precondition failure) is final unless an earlier attempt
        may have landed; after an ambiguous failure a re-read decides. Every attempt sends the same
        document under the same precondition, so at most one of them can ever apply."""
        maybe_landed = False
        error: Exception | None = None
        attempts = BoundedAttempts(MAX_WRITE_ATTEMPTS, self._timeout_s, _BACKOFF_S)
        for _ in attempts:
            try:
                written: datetime = commit().update_time  # the WriteResult's commit time
                return written
            except refused as exc:
                if not maybe_landed:
                    return None
                error = exc
            except _AMBIGUOUS as exc:
                error = exc
            except gexc.GoogleAPICallError as exc:  # refused for another reason: nothing was written
                raise StoreUnavailableError(f"firestore: {exc}") from exc
            maybe_landed = True
            snapshot = self._read(ref)
            if is_ours(snapshot):
                return _update_time(snapshot)
            if not untouched(snapshot):
                return None
        raise StoreUnavailableError(
            f"firestore: write of {ref.id} not stored after {attempts.made} attempt(s) "
            f"(a late one may still land): {error}"
        ) from error


def _reading(fn: Callable[[], T]) -> T:
    """Run an idempotent read; any failure left after the read retry means the store is unreachable,
    except a query's missing index, which no retry fixes (IndexMissingError)."""
    try:
        return fn()
    except gexc.FailedPrecondition as exc:
        if "index" in str(exc).lower():
            raise IndexMissingError(f"firestore_index_missing: {exc}") from exc
        raise StoreUnavailableError(f"firestore: {exc}") from exc
    except (gexc.GoogleAPIError, auth_exceptions.TransportError) as exc:
        raise StoreUnavailableError(f"firestore: {exc}") from exc


def _new_write_id() -> str:
    return uuid.uuid4().hex


def _document(job: Job, write_id: str) -> dict[str, Any]:
    """The stored document: the job's fields plus the id of the write that put them there."""
    return {**job.to_dict(), WRITE_ID_FIELD: write_id}


def _written_by(snapshot: Snapshot, write_id: str, version: int) -> bool:
    """Exact: only our write carries our write id. The version check also rejects a later writer
    that does not set the field (e.g. an older deployment during a rollout)."""
    data = snapshot.to_dict() if snapshot.exists else None
    return data is not None and data.get(WRITE_ID_FIELD) == write_id and data.get("version") == version


def _readable_jobs(docs: Sequence[Snapshot]) -> list[Job]:
    """The due documents that read as jobs (a damaged one is logged and skipped)."""
    return [job for doc in docs if (job := readable_job(_job_from, doc, doc.id)) is not None]


def _job_from(snapshot: Snapshot) -> Job:
    data = snapshot.to_dict()
    if data is None:  # never for a document that exists (get() and queries only pass those)
        raise ValueError(f"job document {snapshot.id} does not exist")
    job = Job.from_dict(data)
    job.store_token = _update_time(snapshot)
    return job


def _update_time(snapshot: Snapshot) -> datetime:
    """The document's update time: the token every conditional write of it is checked against."""
    updated: datetime = snapshot.update_time  # unannotated in the client library
    return updated
