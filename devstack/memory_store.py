"""An in-memory JobStore with the same semantics as Firestore's, for unit tests and benchmarks.

Local tooling (devstack/), never deployed: the functions package holds only what production runs.
"""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Sequence

from safesend.errors import ConcurrentUpdateError
from safesend.model import Job
from safesend.states import State


class InMemoryJobStore:
    """Thread-safe; every read and write copies, so callers cannot mutate stored state by accident."""

    def __init__(self) -> None:
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()

    def claim_or_get(self, job: Job) -> tuple[Job, bool]:
        with self._lock:
            existing = self._jobs.get(job.id)
            if existing is not None:
                return existing.copy(), False
            stored = job.copy()
            stored.version = 1
            self._jobs[job.id] = stored
            return stored.copy(), True

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            job = self._jobs.get(job_id)
            return job.copy() if job else None

    def compare_and_set(self, job: Job, expected_version: int) -> Job:
        with self._lock:
            current = self._jobs.get(job.id)
            if current is None or current.version != expected_version:
                raise ConcurrentUpdateError(job.id)
            stored = job.copy()
            stored.version = expected_version + 1
            self._jobs[job.id] = stored
            return stored.copy()

    def find_due(self, state: State, now: datetime, limit: int) -> Sequence[Job]:
        with self._lock:
            due = [j for j in self._jobs.values()
                   if j.state is state and j.next_check_at is not None and j.next_check_at <= now]
        due.sort(key=lambda j: j.next_check_at)  # type: ignore[arg-type, return-value]
        return [j.copy() for j in due[:limit]]

    def find_open_reviews(self, limit: int) -> Sequence[Job]:
        with self._lock:
            open_jobs = [j for j in self._jobs.values() if j.state in (State.REVIEW, State.FAILED)]
        open_jobs.sort(key=lambda j: j.updated_at)
        return [j.copy() for j in open_jobs[:limit]]

    def find_notices_due(self, now: datetime, limit: int) -> Sequence[Job]:
        with self._lock:
            due = [j for j in self._jobs.values() if j.notice_due_at is not None and j.notice_due_at <= now]
        due.sort(key=lambda j: j.notice_due_at)  # type: ignore[arg-type, return-value]
        return [j.copy() for j in due[:limit]]

    def all(self) -> list[Job]:
        with self._lock:
            return [j.copy() for j in self._jobs.values()]
