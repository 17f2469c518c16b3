"""2. Claim under duplicate webhooks, on Google's Firestore emulator.

A: FirestoreJobStore.claim_or_get, as deployed: on its REST client (FirestoreRestClient, the
   standard library's http.client, one kept-alive connection per thread), a commit with the
   precondition "document does not exist" (Firestore's `create`); losers get ALREADY_EXISTS and
   read the winner's job.
B: TransactionalClaimStore (below): the naive claim, read-then-create inside
   @firestore.transactional of google-cloud-firestore (gRPC; a dev/test dependency only now).
   The emulator takes pessimistic locks for transactional reads, so K simultaneous claims queue
   on lock timeouts and the library retries aborted commits.
The two clients differ (REST vs gRPC) as they would in production: A is what safesend runs, B
what it ran before. B's jobs are read back through a REST store (documents written by either
client read the same: tests/integration/test_store_contract.py).

Each round: K threads wait on a barrier, then all claim the same brand-new job id. One sample
is the wall time of a round (barrier release -> last thread done). Rounds alternate A,B / B,A.
Correctness per round: exactly one thread got created=True, every thread that returned saw
that winner's lease owner, and the stored document carries it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol

from google.cloud import firestore

from devstack.emulators import FirestoreEmulator
from safesend.adapters.firestore_rest import FirestoreRestClient
from safesend.adapters.firestore_store import FirestoreJobStore
from safesend.core.lifecycle import Timing, new_job, start_attempt
from safesend.core.model import Job

from .common import CREATED_AT, Budget, progress
from .results import Comparison, Variant

PROJECT = "demo-safesend-bench"
BARRIER_TIMEOUT_S = 30.0
CALL_TIMEOUT_S = 30.0


class ClaimStore(Protocol):
    def claim_or_get(self, job: Job) -> tuple[Job, bool]: ...


class TransactionalClaimStore:
    """The naive claim: read the document in a transaction, create it if absent, commit.

    This is what safesend did before its create-precondition claim (git show b13c4cf), minus
    the plain read in front: the library's default of 5 commit attempts, no extra handling.
    """

    def __init__(self, client: firestore.Client, collection: str, timeout_s: float = CALL_TIMEOUT_S):
        self._client = client
        self._collection = collection
        self._timeout_s = timeout_s
        self.attempts = 0  # transaction function runs: 1 per claim plus 1 per retried commit
        self._attempts_lock = threading.Lock()

    def claim_or_get(self, job: Job) -> tuple[Job, bool]:
        ref = self._client.collection(self._collection).document(job.id)

        @firestore.transactional
        def claim(transaction: firestore.Transaction) -> tuple[Job, bool]:
            with self._attempts_lock:
                self.attempts += 1
            snapshot = ref.get(transaction=transaction, timeout=self._timeout_s)
            if snapshot.exists:
                return Job.from_dict(snapshot.to_dict() or {}), False
            stored = job.copy()
            stored.version = 1
            transaction.create(ref, stored.to_dict())
            return stored, True

        result: tuple[Job, bool] = claim(self._client.transaction())
        return result


def _draft(job_id: str, owner: str) -> Job:
    job = new_job(
        job_id,
        f"bench:claim:{job_id}",
        f"<job-{job_id}@mail.example.com>",
        "receipts",
        {
            "from": "Shop <shop@example.com>",
            "to": ["ann@example.com"],
            "cc": [],
            "bcc": [],
            "reply_to": [],
            "subject": "Receipt",
            "text": "Thanks for your order.",
            "html": None,
        },
        "h" * 64,
        CREATED_AT,
    )
    return start_attempt(job, CREATED_AT, owner, Timing())


def _round(
    store: ClaimStore, reader: FirestoreJobStore, k: int, join_timeout_s: float
) -> tuple[float, int, int, list[str], list[str]]:
    """One round of K concurrent claims of a new id: (wall s, winners, errors, problems, error texts)."""
    job_id = uuid.uuid4().hex
    barrier = threading.Barrier(k + 1)
    results: list[tuple[str, Any, Any] | None] = [None] * k

    def worker(i: int) -> None:
        try:
            barrier.wait(timeout=BARRIER_TIMEOUT_S)
        except threading.BrokenBarrierError:
            results[i] = ("error", "barrier broken", None)
            return
        try:
            job, created = store.claim_or_get(_draft(job_id, f"owner-{i}"))
            results[i] = ("ok", job.lease_owner, created)
        except Exception as exc:  # noqa: BLE001 - an error is a data point of this benchmark
            results[i] = ("error", f"{type(exc).__name__}: {exc}"[:160], None)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True, name=f"claim-{i}") for i in range(k)]
    for t in threads:
        t.start()
    barrier.wait(timeout=BARRIER_TIMEOUT_S)
    start = time.perf_counter()
    deadline = time.monotonic() + join_timeout_s
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    wall = time.perf_counter() - start

    problems: list[str] = []
    hung = sum(1 for t in threads if t.is_alive())
    if hung:
        problems.append(f"{hung} claims still running after {join_timeout_s:.0f} s")
    done = [r for r in results if r is not None]
    errors = [r for r in done if r[0] == "error"]
    winners = [r[1] for r in done if r[0] == "ok" and r[2]]
    seen = {r[1] for r in done if r[0] == "ok"}
    if len(winners) != 1:
        problems.append(f"{len(winners)} winners")
    elif seen != {winners[0]}:
        problems.append(f"threads saw different owners {sorted(seen)}")
    else:
        stored = reader.get(job_id)
        if stored is None or stored.lease_owner != winners[0]:
            problems.append("stored job does not carry the winner's lease")
    if errors and len(errors) + hung == k:
        problems.append("every claim failed")
    if problems and errors:
        problems.append(f"first error: {errors[0][1]}")
    return wall, len(winners), len(errors) + hung, problems, [str(e[1]) for e in errors]


@dataclass
class _Seen:
    """Per side (A, B): winners and errors of each round, the kinds of error, the first error's text."""

    winners: dict[str, list[int]] = field(default_factory=lambda: {"A": [], "B": []})
    errors: dict[str, list[int]] = field(default_factory=lambda: {"A": [], "B": []})
    kinds: dict[str, Counter[str]] = field(default_factory=lambda: {"A": Counter(), "B": Counter()})
    first: dict[str, str] = field(default_factory=dict)


Side = tuple[Variant, Any, Any, str]  # variant, store claimed on, store read back, tag


def run(k: int, rounds: int, budget_s: float, join_timeout_s: float) -> Comparison:
    a = Variant("claim_or_get: create precondition")
    b = Variant("read-then-create in @transactional")
    comp = Comparison("claim", f"2. claim, {k} dup webhooks", f"round of {k} concurrent claims", "claims/s", a, b)
    log_dir = tempfile.mkdtemp(prefix="safesend-bench-firestore-")
    emulator = FirestoreEmulator(project=PROJECT, log_dir=log_dir)
    previous_host = os.environ.get("FIRESTORE_EMULATOR_HOST")
    client = None
    rest: FirestoreRestClient | None = None
    finished = False
    progress("starting the Firestore emulator")
    try:
        emulator.start()
    except BaseException:
        progress(f"Firestore emulator logs kept in {log_dir}")
        raise
    try:
        progress(
            f"Firestore emulator on {emulator.host} (pid {emulator.pid}, started in {emulator.startup_seconds:.1f} s)"
        )
        os.environ["FIRESTORE_EMULATOR_HOST"] = emulator.host
        client = firestore.Client(project=PROJECT)  # B only: the transactional baseline
        rest = FirestoreRestClient(PROJECT, emulator_host=emulator.host)
        _compare(comp, rest, client, k, rounds, Budget(budget_s), join_timeout_s)
        finished = True
    finally:
        if client is not None:
            client.close()
        if rest is not None:
            rest.close()
        if previous_host is None:
            os.environ.pop("FIRESTORE_EMULATOR_HOST", None)
        else:
            os.environ["FIRESTORE_EMULATOR_HOST"] = previous_host
        emulator.stop()
        progress("Firestore emulator stopped")
        if finished and not comp.failures:
            shutil.rmtree(log_dir, ignore_errors=True)
        else:
            progress(f"Firestore emulator logs kept in {log_dir}")
    return comp


def _compare(
    comp: Comparison,
    rest: FirestoreRestClient,
    client: firestore.Client,
    k: int,
    rounds: int,
    budget: Budget,
    join_timeout_s: float,
) -> None:
    """Both claim implementations on one emulator: a checked warm-up, then rounds in alternating order.
    A on the REST client `rest`, B on the gRPC `client`; both read back through REST stores."""
    suffix = uuid.uuid4().hex[:8]
    safesend = FirestoreJobStore(PROJECT, collection=f"bench_a_{suffix}", client=rest, timeout_s=CALL_TIMEOUT_S)
    naive = TransactionalClaimStore(client, f"bench_b_{suffix}")
    reader_b = FirestoreJobStore(PROJECT, collection=f"bench_b_{suffix}", client=rest)
    sides: list[Side] = [(comp.a, safesend, safesend, "A"), (comp.b, naive, reader_b, "B")]
    # Warm-up, not timed: JVM JIT, B's gRPC channel; one uncontended claim each, checked too. A's
    # claim threads are new each round: each opens its own HTTP connection inside the timed round.
    for _, store, reader, tag in sides:
        for _ in range(3):
            _, _, _, problems, _ = _round(store, reader, 1, join_timeout_s)
            if problems:
                comp.failures.append(f"{tag} warm-up: " + ", ".join(problems))
    attempts_before = naive.attempts  # after the warm-up
    seen = _Seen()
    for r in range(rounds):
        if r and budget.exhausted:
            comp.notes.append(f"claim: time budget {budget.seconds:.0f} s reached after {r} rounds (asked {rounds})")
            break
        for side in sides if r % 2 == 0 else sides[::-1]:
            _timed_round(comp, side, seen, k, r, rounds, join_timeout_s)
    _summarise(comp, sides, seen, k, naive.attempts - attempts_before)


def _timed_round(comp: Comparison, side: Side, seen: _Seen, k: int, r: int, rounds: int, join_timeout_s: float) -> None:
    variant, store, reader, tag = side
    wall, winners, errors, problems, texts = _round(store, reader, k, join_timeout_s)
    seen.kinds[tag].update(t.split(":", 1)[0] for t in texts)
    if texts and tag not in seen.first:
        seen.first[tag] = texts[0]
    variant.latencies.append(wall)
    variant.ops += k
    variant.busy_s += wall
    seen.winners[tag].append(winners)
    seen.errors[tag].append(errors)
    progress(f"claim round {r + 1}/{rounds} {tag}: {wall:.2f} s, winners {winners}, errors {errors}")
    if tag == "B" and problems == ["0 winners"]:  # the baseline's lock contention: every claim gave up
        comp.notes.append(f"B round {r + 1}: 0 winners, every transactional claim exhausted its attempts")
    elif problems:
        comp.failures.append(f"{tag} round {r + 1}: " + ", ".join(problems))
        progress(f"!!! CLAIM CORRECTNESS FAILURE {tag} round {r + 1}: {', '.join(problems)}")


def _summarise(comp: Comparison, sides: list[Side], seen: _Seen, k: int, tx_attempts: int) -> None:
    for variant, _, _, tag in sides:
        win = seen.winners[tag]
        exact = sum(1 for w in win if w == 1)
        variant.check = (
            f"winners/round {','.join(map(str, win))} ({exact}/{len(win)} exactly 1), "
            f"errors {sum(seen.errors[tag])}/{k * len(win)} claims"
        )
        if tag == "B":
            variant.check += f", {tx_attempts} tx attempts"
        if seen.kinds[tag]:
            kinds = ", ".join(f"{n}x {kind}" for kind, n in seen.kinds[tag].most_common())
            comp.notes.append(f"claim {tag} errors: {kinds}; first: {seen.first[tag]}")
