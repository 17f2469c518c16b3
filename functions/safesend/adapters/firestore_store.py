"""JobStore on Firestore (collection `ai_jobs`). Claims and compare-and-sets run in transactions."""

from __future__ import annotations

from datetime import datetime
from typing import Callable, Sequence, TypeVar

from google.api_core import exceptions as gexc
from google.api_core.retry import Retry
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from ..errors import ConcurrentUpdateError, StoreUnavailableError
from ..model import Job
from ..states import State

T = TypeVar("T")
_UNAVAILABLE = (gexc.ServiceUnavailable, gexc.DeadlineExceeded, gexc.InternalServerError,
                gexc.Unknown, gexc.RetryError, gexc.Unauthenticated, gexc.PermissionDenied)


class FirestoreJobStore:
    """One document per job, id = job id. The client is created lazily, once per instance."""

    def __init__(self, project: str, collection: str = "ai_jobs",
                 client: firestore.Client | None = None, timeout_s: float = 10.0):
        self._project = project
        self._collection = collection
        self._client = client
        self._timeout_s = timeout_s
        # Bounded retries for plain reads: the library default keeps retrying UNAVAILABLE for 60 s+.
        self._read_retry = Retry(initial=0.1, maximum=1.0, multiplier=2.0, timeout=timeout_s)
        # Retrying a create is safe: a repeat of one that landed answers ALREADY_EXISTS (see below).
        self._write_retry = Retry(initial=0.1, maximum=1.0, multiplier=2.0, timeout=timeout_s)

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
        """
        stored = job.copy()
        stored.version = 1
        try:
            result = self._call(lambda: self._ref(job.id).create(stored.to_dict(), retry=self._write_retry,
                                                                 timeout=self._timeout_s))
        except StoreUnavailableError as exc:
            if not isinstance(exc.__cause__, gexc.AlreadyExists):
                raise
            existing = self.get(job.id)
            if existing is None:
                raise StoreUnavailableError(f"job {job.id} reported as existing but cannot be read") from exc
            # A retried create whose first answer was lost finds our own document: still our claim.
            return existing, existing.lease_owner == stored.lease_owner and existing.version == 1
        stored.store_token = result.update_time
        return stored, True

    def get(self, job_id: str) -> Job | None:
        snapshot = self._call(lambda: self._ref(job_id).get(retry=self._read_retry, timeout=self._timeout_s))
        return _job_from(snapshot) if snapshot.exists else None

    def compare_and_set(self, job: Job, expected_version: int) -> Job:
        """One conditional write when we hold the document's update time (the usual case: every job
        comes from this store): Firestore refuses it if anyone wrote since. Otherwise a transaction
        that re-reads and compares `version`."""
        stored = job.copy()
        stored.version = expected_version + 1
        if job.store_token is not None:
            option = self.client.write_option(last_update_time=job.store_token)
            try:
                result = self._call(lambda: self._ref(job.id).update(stored.to_dict(), option=option,
                                                                     timeout=self._timeout_s))
            except StoreUnavailableError as exc:
                if isinstance(exc.__cause__, (gexc.FailedPrecondition, gexc.NotFound)):
                    raise ConcurrentUpdateError(job.id) from exc
                raise
            stored.store_token = result.update_time
            return stored
        ref = self._ref(job.id)

        @firestore.transactional
        def swap(transaction: firestore.Transaction) -> Job:
            snapshot = ref.get(transaction=transaction, timeout=self._timeout_s)
            current = snapshot.to_dict() if snapshot.exists else None
            if current is None or current.get("version") != expected_version:
                raise ConcurrentUpdateError(job.id)
            transaction.set(ref, stored.to_dict())
            return stored

        written = self._call(lambda: swap(self.client.transaction()), contention_error=ConcurrentUpdateError)
        written.store_token = None  # a transaction does not hand back the update time: re-read to get one
        return written

    def find_due(self, state: State, now: datetime, limit: int) -> Sequence[Job]:
        """Needs the composite index (state ASC, next_check_at ASC): see infra/."""
        query = (self.client.collection(self._collection)
                 .where(filter=FieldFilter("state", "==", state.value))
                 .where(filter=FieldFilter("next_check_at", "<=", now))
                 .order_by("next_check_at")
                 .limit(limit))
        docs = self._call(lambda: list(query.stream(retry=self._read_retry, timeout=self._timeout_s)))
        return [_job_from(d) for d in docs]

    def _call(self, fn: Callable[[], T], contention_error: type[Exception] = StoreUnavailableError) -> T:
        try:
            return fn()
        except ConcurrentUpdateError:
            raise
        except (gexc.Aborted, gexc.Conflict) as exc:
            raise contention_error(str(exc)) from exc
        except _UNAVAILABLE as exc:
            raise StoreUnavailableError(f"firestore: {exc}") from exc
        except gexc.GoogleAPICallError as exc:
            raise StoreUnavailableError(f"firestore: {exc}") from exc
        except ValueError as exc:
            # The transaction helper raises ValueError when `begin` failed ("cannot be rolled back")
            # or when every commit attempt was aborted ("Failed to commit transaction in N attempts").
            source = exc.__cause__ or exc.__context__
            if isinstance(source, (gexc.Aborted, gexc.Conflict)):
                raise contention_error(str(exc)) from source
            if isinstance(source, gexc.GoogleAPICallError):
                raise StoreUnavailableError(f"firestore: {source}") from exc
            raise



def _job_from(snapshot: firestore.DocumentSnapshot) -> Job:
    job = Job.from_dict(snapshot.to_dict())
    job.store_token = snapshot.update_time
    return job
