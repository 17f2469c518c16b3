"""The stores' retry skeleton stops: at the count, and at the deadline, whichever comes first. It
waits with the project's one jittered backoff, and one deadline covers a whole store call: the
Firestore store's commits and the re-read that settles an ambiguous one get only the time left in
it, and a RESOURCE_EXHAUSTED refusal (nothing written) is tried again."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest

from safesend.adapters import store_common
from safesend.adapters.firestore_rest import FirestoreApiError
from safesend.adapters.firestore_store import SETTLE_SHARE, FirestoreJobStore
from safesend.adapters.firestore_values import encode_fields
from safesend.adapters.store_common import BoundedAttempts
from safesend.core import backoff
from safesend.core.errors import StoreUnavailableError
from safesend.core.lifecycle import new_job
from safesend.core.model import Job


def test_runs_at_most_max_attempts_and_counts_them():
    attempts = BoundedAttempts(4, timeout_s=60.0, backoff_s=0.0)
    assert list(attempts) == [1, 2, 3, 4]
    assert attempts.made == 4


def test_the_first_attempt_runs_even_with_no_time_left():
    attempts = BoundedAttempts(5, timeout_s=0.0, backoff_s=0.0)
    assert list(attempts) == [1]
    assert attempts.made == 1


def test_no_retry_starts_after_the_deadline():
    attempts = BoundedAttempts(1000, timeout_s=0.05, backoff_s=0.01)
    started = time.monotonic()
    made = list(attempts)
    assert 2 <= len(made) < 1000  # a bounded number of attempts, not a thousand
    assert made == list(range(1, len(made) + 1))
    assert time.monotonic() - started < 1.0


def test_backoff_is_the_projects_one_full_jitter_backoff(monkeypatch):
    assert store_common.backoff_delay is backoff.backoff_delay
    calls: list[tuple[int, float, float]] = []

    def recorded(retry_number: int, base_s: float, cap_s: float) -> float:
        calls.append((retry_number, base_s, cap_s))
        return backoff.backoff_delay(retry_number, base_s, cap_s)

    monkeypatch.setattr(store_common, "backoff_delay", recorded)
    slept: list[float] = []
    assert list(BoundedAttempts(4, timeout_s=60.0, backoff_s=0.1, sleep=slept.append)) == [1, 2, 3, 4]
    assert calls == [(1, 0.1, store_common.BACKOFF_CAP_S), (2, 0.1, 1.0), (3, 0.1, 1.0)]
    assert all(0.0 <= s <= 0.1 * 2**i for i, s in enumerate(slept))
    # jittered: many runs do not all wait the same
    waits = set()
    for _ in range(20):
        one: list[float] = []
        list(BoundedAttempts(2, timeout_s=60.0, backoff_s=0.1, sleep=one.append))
        waits.add(one[0])
    assert len(waits) > 1


def test_a_given_deadline_is_shared_and_time_left_shrinks():
    deadline = time.monotonic() + 5.0
    attempts = BoundedAttempts(3, timeout_s=60.0, backoff_s=0.0, deadline=deadline)
    assert attempts.deadline == deadline
    assert 4.0 < attempts.time_left() <= 5.0
    assert BoundedAttempts(3, 60.0, 0.0, deadline=time.monotonic() - 1).time_left() == 0.001


def a_job(job_id: str, version: int = 0) -> Job:
    job = new_job(job_id, "c:e:o", "<j@mail.example.com>", "receipts", {"to": ["a@example.com"]}, "h" * 64, NOW)
    job.version = version
    return job


NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class ScriptedFirestore:
    """commit and get answer from scripts; each records the timeout it was given and may take time."""

    def __init__(self, clock: Clock, commits: list[Any], reads: list[Any]) -> None:
        self.clock, self.commits, self.reads = clock, commits, reads
        self.commit_timeouts: list[float] = []
        self.read_timeouts: list[float] = []

    def document_name(self, collection: str, job_id: str) -> str:
        return f"projects/p/databases/(default)/documents/{collection}/{job_id}"

    def commit(self, writes: list[Any], timeout_s: float) -> dict[str, Any]:
        self.commit_timeouts.append(timeout_s)
        return self._answer(self.commits.pop(0), writes)

    def get(self, collection: str, job_id: str, timeout_s: float) -> dict[str, Any] | None:
        self.read_timeouts.append(timeout_s)
        return self._answer(self.reads.pop(0), None)

    def _answer(self, step: Any, writes: list[Any] | None) -> Any:
        spent, outcome = step
        self.clock.now += spent
        if isinstance(outcome, Exception):
            raise outcome
        if outcome == "ours" and writes is not None:
            return {"writeResults": [{"updateTime": "2026-01-01T00:00:00.000001Z"}]}
        if outcome == "landed":  # the document as our (ambiguous) commit left it
            fields = self.last_write["update"]["fields"]
            return {"name": "x/job-1", "fields": fields, "updateTime": "2026-01-01T00:00:00.000002Z"}
        return outcome


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(time, "monotonic", fake)
    monkeypatch.setattr(time, "sleep", lambda s: setattr(fake, "now", fake.now + s))
    return fake


def test_a_commit_and_its_settling_re_read_share_one_deadline(clock):
    unavailable = FirestoreApiError(503, "UNAVAILABLE", "backend")
    client = ScriptedFirestore(clock, commits=[(6.0, unavailable)], reads=[(1.0, "landed")])
    original_commit = client.commit

    def remembering_commit(writes: list[Any], timeout_s: float) -> dict[str, Any]:
        client.last_write = writes[0]
        return original_commit(writes, timeout_s)

    client.commit = remembering_commit  # type: ignore[method-assign]
    store = FirestoreJobStore("p", client=client, timeout_s=10.0)  # type: ignore[arg-type]
    stored, created = store.claim_or_get(a_job("job-1"))
    assert created and stored.version == 1
    # the commit leaves a third of the 10 s for its settling re-read ...
    assert client.commit_timeouts == [pytest.approx(10.0 - 10.0 * SETTLE_SHARE)]
    # ... which, after the ambiguous commit spent 6 s, has the 4 s left, not a fresh 10 s
    assert client.read_timeouts == [pytest.approx(4.0)]


def test_a_later_commit_gets_only_the_time_left_and_none_starts_past_the_deadline(clock):
    exhausted = FirestoreApiError(429, "RESOURCE_EXHAUSTED", "quota")
    client = ScriptedFirestore(clock, commits=[(2.0, exhausted), (2.5, exhausted), (0.0, exhausted)], reads=[])
    store = FirestoreJobStore("p", client=client, timeout_s=10.0)  # type: ignore[arg-type]
    with pytest.raises(StoreUnavailableError):
        store.claim_or_get(a_job("job-1"))
    reserve = 10.0 * SETTLE_SHARE
    first, second, third = client.commit_timeouts
    assert first == pytest.approx(10.0 - reserve)
    assert second <= 10.0 - 2.0 - reserve + 1e-9  # after 2 s (and a backoff): only what is left
    assert third <= 10.0 - 4.5 - reserve + 1e-9
    assert client.read_timeouts == []  # RESOURCE_EXHAUSTED wrote nothing: no settling re-read


def test_no_commit_is_retried_without_time_for_it_and_its_settling_re_read(clock):
    exhausted = FirestoreApiError(429, "RESOURCE_EXHAUSTED", "quota")
    client = ScriptedFirestore(clock, commits=[(7.0, exhausted), (0.0, "ours")], reads=[])
    store = FirestoreJobStore("p", client=client, timeout_s=10.0)  # type: ignore[arg-type]
    with pytest.raises(StoreUnavailableError):
        store.claim_or_get(a_job("job-1"))
    assert len(client.commit_timeouts) == 1  # 3 s left < the re-read's reserve: the call ends
    assert clock.now < 1000.0 + 10.0


def test_resource_exhausted_is_retried_for_commits_and_reads(clock):
    exhausted = FirestoreApiError(429, "RESOURCE_EXHAUSTED", "quota")
    client = ScriptedFirestore(clock, commits=[(0.0, exhausted), (0.0, "ours")], reads=[])
    store = FirestoreJobStore("p", client=client, timeout_s=10.0)  # type: ignore[arg-type]
    _, created = store.claim_or_get(a_job("job-1"))
    assert created and len(client.commit_timeouts) == 2
    document = {"name": "x/job-2", "fields": encode_fields(a_job("job-2", 3).to_dict()), "updateTime": "t"}
    reader = ScriptedFirestore(clock, commits=[], reads=[(0.0, exhausted), (0.0, document)])
    job = FirestoreJobStore("p", client=reader, timeout_s=10.0).get("job-2")  # type: ignore[arg-type]
    assert job is not None and job.version == 3 and len(reader.read_timeouts) == 2


def _records(count: int, damaged: set[int]) -> list[tuple[int, dict[str, Any]]]:
    job = new_job("j" * 32, "k", "<m@x>", "payments", {}, "h", datetime(2026, 1, 1, tzinfo=UTC)).to_dict()
    return [(i, {**job, "id": f"j{i:031d}", **({"events": "x"} if i in damaged else {})}) for i in range(count)]


def _paged(records: list[tuple[int, dict[str, Any]]], calls: list[int]) -> Any:
    def fetch(after: int | None, count: int) -> list[tuple[int, dict[str, Any]]]:
        calls.append(count)
        start = 0 if after is None else after + 1
        return records[start : start + count]

    return fetch


def test_a_page_reads_past_unreadable_records_to_the_limit_and_no_further():
    calls: list[int] = []
    records = _records(10, damaged={0, 1, 2, 4})
    page = store_common.readable_page(
        _paged(records, calls), lambda r: Job.from_dict(r[1]), lambda r: (r[0], r[1]["id"]), 3
    )
    assert [j.id for j in page] == [f"j{i:031d}" for i in (3, 5, 6)]
    assert calls == [3, 3, 1]  # never more than the jobs still wanted


def test_reading_past_unreadable_records_is_bounded():
    calls: list[int] = []
    records = _records(1000, damaged=set(range(1000)))
    page = store_common.readable_page(
        _paged(records, calls), lambda r: Job.from_dict(r[1]), lambda r: (r[0], r[1]["id"]), 5
    )
    assert page == [] and len(calls) == 1 + store_common.MAX_PAGES_PAST_UNREADABLE
