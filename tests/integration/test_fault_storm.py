"""The fault storm: many jobs, duplicate webhooks, every relay fault, worker crashes and frozen
emulators at once, against the whole local stack (devstack/stack.py), in two phases:

  inside-window   the simulator's search-index lag (0.5 s) is inside SAFESEND_UNKNOWN_WINDOW_S (3 s):
                  no message may be accepted twice.
  beyond-window   the index lag (4 s) exceeds the window: a `retry` channel may resend a copy that
                  already landed, but every such duplicate must end in `review` / `duplicate` with a
                  review item (SAFESEND_VERIFY_HORIZON_S re-checks `sent` jobs).
  reviewers       as beyond-window, with fewer jobs, while a scripted reviewer (devstack.chaos.
                  ScriptedReviewer) decides every open item through the console's form POST (CSRF
                  token, Origin) as attempts still land late: each kind (resend, mark sent, cancel,
                  acknowledge) at least once. After it, README guarantee 5: a job a person made
                  `sent` holds no copy the person did not see, a cancelled job has no copy, and any
                  other copy is in `review` with a review item.

In both phases: 0 jobs lost (every job exists and settles; a `sent` job has a copy; no job with a
copy is `failed`; every `review` / `failed` job has a review item on Pub/Sub), 0 `failed` jobs (the
storm injects nothing permanent, so a `failed` job means rate limits alone exhausted it), and no 5xx
from /send except 503 `store_unavailable` before a claim.

Truth is Gmail's side: the simulator's acceptance log (`sim.effects()`), never a counter of ours.
Random choices are seeded (SAFESEND_STORM_SEED, printed); the assertions are invariants that hold
for any interleaving, so they do not depend on which fault hit which job. Sizes: SAFESEND_STORM_JOBS.
A summary table is printed whether the test passes or not; the full report (every job's final view,
every webhook try, the chaos log) is written to storm-report.json in the stack's log directory.
"""

from __future__ import annotations

import html
import json
import os
import random
import re
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests

from devstack import relay as relay_module
from devstack.chaos import (
    DECISION_KINDS,
    ChaosAction,
    ChaosRunner,
    ReceiverFlapper,
    RecordingSweepTicker,
    RelayCycler,
    ScriptedReviewer,
)
from devstack.emulators import EmulatorStack
from devstack.receiver import RecordingReceiver
from devstack.stack import LocalStack, StackConfig

if TYPE_CHECKING:  # imported where used, as plan_jobs does: the tracer is paused while the test runs
    from safesend.adapters.firestore_rest import FirestoreRestClient

pytestmark = [pytest.mark.integration, pytest.mark.functions_out_of_process]

DEFAULT_SEED = 20240611
SETTLED = {"sent", "review", "failed", "cancelled"}
HUMAN = {"review", "failed"}
MESSAGE_ID_DOMAIN = "mail.safesend.localhost"  # LocalStack.service_env()

N_JOBS = int(os.environ.get("SAFESEND_STORM_JOBS", "120"))
ARRIVAL_SPACING_S = 0.3  # one new job every 0.3 s: ~36 s of traffic for 120 jobs
# Besides the SIGKILLs at random moments, a few jobs' first webhook try asks the worker to die at
# the two worst points (X-Safesend-Fault, honoured with SAFESEND_ENABLE_FAULT_INJECTION on local
# stacks): right after the claim, and after Gmail accepted but before the outcome was recorded.
CRASH_POINTS = ("after_claim", "after_send", "after_send", "after_claim")
WEBHOOK_TRIES = 5  # n8n HTTP Request node, Retry On Fail: 5 tries in total ...
WEBHOOK_RETRY_WAIT_S = 1.0  # ... 1 s apart, on any non-2xx or connection error
WEBHOOK_TIMEOUT_S = 15.0  # per try; the service's request budget is 8 s (StackConfig)
# Cloud Scheduler stand-in (production: every few minutes). 2 s still sweeps a `sent` job ~5 times
# inside the beyond-window phases' 10 s verify horizon; 1 s cost the storm 6 % more CPU for the same
# verdicts (the whole storm alone, no coverage: 197 vs 185 CPU-s, 2-core machine, 2026-12-03).
SWEEP_INTERVAL_S = 2.0
TRAFFIC_TAIL_S = 90.0  # webhooks still running this long after the last one started: give up waiting
MAX_PLANNED_FREEZE_S = 3.0  # each emulator freeze lasts 2-3 s
SETTLE_TIMEOUT_S = 90.0  # a job that has not settled although nothing settled for this long is lost
# A paced pool drains at its admitted rate, which refusals halve (AIMD): under a slow machine 100 jobs
# take longer than 90 s to send (CI stop 27: the budget's minute window then 1 send a second). The
# wait goes on while jobs keep settling, never past this cap: progress, not a stopwatch, is the test.
SETTLE_CAP_S = 300.0
REVIEW_PULL_TIMEOUT_S = 30.0
RATE_LIMIT_MARKERS = ("http_429", "rateLimitExceeded", "userRateLimitExceeded")

# The payments channel gets the same short backoff as the others in StackConfig's defaults.
SHORT_CHANNELS = {
    "transactional": {"retry_base_s": 0.2, "retry_cap_s": 1.0},
    "notifications": {"retry_base_s": 0.2, "retry_cap_s": 1.0},
    "payments": {"retry_base_s": 0.2, "retry_cap_s": 1.0},
}


@dataclass(frozen=True)
class Phase:
    name: str
    sim_index_lag_s: float
    env: dict[str, str]
    beyond_window: bool
    reviewer: bool = False  # a scripted reviewer decides through the console while the storm runs
    jobs: int | None = None  # None: SAFESEND_STORM_JOBS
    mailboxes: dict[str, Any] | None = None  # a paced pool of sender mailboxes (issue 24)
    units_per_minute: int | None = None  # each pool mailbox's limit, enforced by the simulator too


# Issue 24: two sender mailboxes whose Gmail budget (each 60 sends a minute, reads included) is well
# below the storm's arrival rate (200 jobs a minute): jobs are queued and sent in turn while every
# fault above still hits them.
PACED_UNITS_PER_MINUTE = 6000
PACED_POOL = {
    "defaults": {"limits": {"units_per_minute": PACED_UNITS_PER_MINUTE, "messages_per_day": 2000}},
    "mailboxes": {
        name: {
            "address": f"{name}@safesend.localhost",
            "delegated_user": f"{name}@safesend.localhost",
            "send_as": ["sender@safesend.localhost"],
        }
        for name in ("shop", "shop2")
    },
}


# Issue 22: a pool that mixes a Gmail mailbox and a Microsoft 365 one (Graph simulator behind its own
# fault relay, cycled through every fault too): the same invariants, whichever provider took the job.
# Each mailbox's budget stays above its half of the arrival rate even halved by a 429 (AIMD): faults,
# not pacing, are under test here (the paced-pool phase tests pacing).
GRAPH_UNITS_PER_MINUTE = 24_000
GRAPH_POOL = {
    "defaults": {"limits": {"units_per_minute": GRAPH_UNITS_PER_MINUTE, "messages_per_day": 2000}},
    "mailboxes": {
        "shop": {
            "address": "shop@safesend.localhost",
            "delegated_user": "shop@safesend.localhost",
            "send_as": ["sender@safesend.localhost"],
        },
        "m365": {
            "kind": "graph",
            "address": "m365@safesend.localhost",
            "tenant_id": "storm-tenant",
            "client_id": "storm-app",
            "federated": True,
            "send_as": ["sender@safesend.localhost"],
            "limits": {"preset": "exchange_online", "units_per_minute": GRAPH_UNITS_PER_MINUTE},
        },
    },
}


PHASES = [
    Phase("inside-window", 0.5, {"SAFESEND_UNKNOWN_WINDOW_S": "3"}, beyond_window=False),
    # SAFESEND_RETRY_HORIZON_S is left at its default (3600 s).
    Phase(
        "beyond-window", 4.0, {"SAFESEND_UNKNOWN_WINDOW_S": "3", "SAFESEND_VERIFY_HORIZON_S": "10"}, beyond_window=True
    ),
    Phase(
        "reviewers",
        4.0,
        {"SAFESEND_UNKNOWN_WINDOW_S": "3", "SAFESEND_VERIFY_HORIZON_S": "10"},
        beyond_window=True,
        reviewer=True,
        jobs=int(os.environ.get("SAFESEND_STORM_REVIEW_JOBS", "60")),
    ),
    Phase(
        "paced-pool",
        0.5,
        {"SAFESEND_UNKNOWN_WINDOW_S": "3"},
        beyond_window=False,
        jobs=int(os.environ.get("SAFESEND_STORM_PACED_JOBS", "100")),
        mailboxes=PACED_POOL,
        units_per_minute=PACED_UNITS_PER_MINUTE,
    ),
    Phase(
        "graph-pool",
        0.5,
        {"SAFESEND_UNKNOWN_WINDOW_S": "3"},
        beyond_window=False,
        # Each relay sees half the sends: twice the traffic, so every fault is applied on both.
        jobs=int(os.environ.get("SAFESEND_STORM_GRAPH_JOBS", "200")),
        mailboxes=GRAPH_POOL,
        units_per_minute=GRAPH_UNITS_PER_MINUTE,
    ),
]
REVIEWER_TAIL_S = 8.0  # the reviewer keeps deciding this long after the traffic, then leaves
PERSON_RESULTS = ("marked_sent", "acknowledged")  # decisions that make a job `sent` on a person's word


# --------------------------------------------------------------------------- the traffic
@dataclass
class JobSpec:
    index: int
    body: dict[str, Any]
    job_id: str
    message_id: str
    channel: str
    webhooks: int
    start_at_s: float
    crash_point: str | None = None  # X-Safesend-Fault on the first try of webhook 1


@dataclass
class Try:
    job_id: str
    webhook: int
    number: int
    trace: str
    status: int | None = None  # None: no HTTP answer (connection error or timeout)
    error: str | None = None
    body: Any = None
    elapsed_s: float = 0.0


@dataclass
class Webhook:
    job_id: str
    number: int
    tries: list[Try] = field(default_factory=list)

    @property
    def final(self) -> Try | None:
        return self.tries[-1] if self.tries else None

    @property
    def succeeded(self) -> bool:
        return bool(self.final and self.final.status is not None and 200 <= self.final.status < 300)


def plan_jobs(rng: random.Random, phase: Phase, seed: int) -> list[JobSpec]:
    from safesend.core.keys import compose_dedup_key, job_id_for, message_id_for

    jobs = []
    count = phase.jobs or N_JOBS
    for i in range(count):
        channel = "transactional" if rng.random() < 0.55 else "payments"
        body = {
            "customer_id": f"storm-{seed}-{phase.name}-{i:03d}",
            "event_type": "order_paid",
            "order_id": str(1000 + i),
            "channel": channel,
            "to": [f"buyer{i}@example.com"],
            "subject": f"Your receipt {i}",
            "text": f"Thanks for order {1000 + i}.",
        }
        key = compose_dedup_key(body["customer_id"], body["event_type"], body["order_id"])
        jobs.append(
            JobSpec(
                i,
                body,
                job_id_for(key),
                message_id_for(key, MESSAGE_ID_DOMAIN),
                channel,
                webhooks=rng.choice((1, 2, 2, 3)),
                start_at_s=i * ARRIVAL_SPACING_S + rng.uniform(0.0, 0.1),
            )
        )
    spread = count // (len(CRASH_POINTS) + 1)
    for k, point in enumerate(CRASH_POINTS):
        if spread:
            jobs[(k + 1) * spread - rng.randint(0, spread // 2)].crash_point = point
    return jobs


def fire_webhook(url: str, job: JobSpec, number: int, auth: dict[str, str]) -> Webhook:
    """n8n's HTTP Request node with Retry On Fail (5 tries, 1 s apart) on any non-2xx or error."""
    hook = Webhook(job.job_id, number)
    data = json.dumps(job.body).encode()  # the same bytes on every try and every duplicate
    for n in range(1, WEBHOOK_TRIES + 1):
        trace = uuid.uuid4().hex
        attempt = Try(job.job_id, number, n, trace)
        headers = {"Content-Type": "application/json", "X-Cloud-Trace-Context": f"{trace}/1;o=1", **auth}
        if job.crash_point and number == 1 and n == 1:
            headers["X-Safesend-Fault"] = job.crash_point
        started = time.monotonic()
        try:
            response = requests.post(f"{url}/send", data=data, timeout=WEBHOOK_TIMEOUT_S, headers=headers)
            attempt.status = response.status_code
            try:
                attempt.body = response.json()
            except ValueError:
                attempt.body = response.text[:300]
        except requests.RequestException as exc:
            attempt.error = type(exc).__name__
        attempt.elapsed_s = round(time.monotonic() - started, 3)
        hook.tries.append(attempt)
        if attempt.status is not None and 200 <= attempt.status < 300:
            break
        if n < WEBHOOK_TRIES:
            time.sleep(WEBHOOK_RETRY_WAIT_S)
    return hook


def get_status(url: str, job_id: str, auth: dict[str, str], tries: int = 10) -> dict[str, Any] | None:
    """GET /status; None for 404. Connection errors and 503s are retried (bounded)."""
    last: str = ""
    for attempt in range(tries):
        try:
            response = requests.get(f"{url}/status", params={"job_id": job_id}, timeout=15, headers=auth)
            if response.status_code == 200:
                return response.json()
            if response.status_code == 404:
                return None
            last = f"HTTP {response.status_code}: {response.text[:200]}"
        except requests.RequestException as exc:
            last = repr(exc)
        time.sleep(0.5 * (attempt + 1))
    raise AssertionError(f"GET /status for {job_id} kept failing: {last}")


def is_settled(view: dict[str, Any] | None, phase: Phase) -> bool:
    if view is None or view.get("state") not in SETTLED:
        return False
    # Not settled while a verification check (sent) or a search after a cancel is still pending.
    watched = view["state"] in ("sent", "cancelled") and view.get("next_check_at") is not None
    return not (phase.beyond_window and watched)


def last_decision(view: dict[str, Any]) -> dict[str, Any] | None:
    """The last decision a person made that was applied (a refused resend changes nothing)."""
    applied = [
        e for e in view.get("events") or [] if e.get("kind") == "decision" and e.get("result") != "refused_copy_found"
    ]
    return applied[-1] if applied else None


# --------------------------------------------------------------------------- the storm
class Storm:
    def __init__(self, stack: LocalStack, phase: Phase, seed: int):
        self.stack = stack
        self.phase = phase
        self.seed = seed
        self.rng = random.Random(f"{seed}/{phase.name}")
        self.jobs = plan_jobs(self.rng, phase, seed)
        self.by_id = {j.job_id: j for j in self.jobs}
        self.webhooks: list[Webhook] = []
        self.views: dict[str, dict[str, Any] | None] = {}
        self.review_items: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.timings: dict[str, float] = {}
        self.ticker: RecordingSweepTicker | None = None
        self.cycler: RelayCycler | None = None
        self.graph_cycler: RelayCycler | None = None  # the Graph simulator's relay (graph-pool phase)
        self.graph_relay_stats: dict[str, Any] = {}
        self.chaos: ChaosRunner | None = None
        self.reviewer: ScriptedReviewer | None = None
        self.seeded: dict[str, str] = {}  # message id -> job id: review items by construction (reviewers' phase)
        self.seeded_views: dict[str, dict[str, Any] | None] = {}
        self.unsettled_at_timeout: list[str] = []
        self.status_polls = 0  # GET /status calls for the final views (each one the stack's CPU)
        self.store_queries = 0  # the settle loop's reads of the stored states (one query a pass)
        self.store_query_errors: list[str] = []
        self.missing_review_items: list[str] = []
        self.relay_stats: dict[str, Any] = {}
        self.effects: list[dict[str, Any]] = []
        self.claimed_traces: dict[str, str] = {}

    # -- chaos plan: process-level actions spread over the traffic window and the start of settling
    def chaos_actions(self, traffic_s: float) -> list[ChaosAction]:
        """3 worker kills, 2 Firestore freezes, 2 Pub/Sub freezes (the last one while settling)."""
        rng = self.rng
        at = lambda fraction: traffic_s * fraction + rng.uniform(-1.0, 1.0)  # noqa: E731
        hold = lambda: rng.uniform(2.0, MAX_PLANNED_FREEZE_S)  # noqa: E731
        actions = [ChaosAction(at(f), "kill_worker") for f in (0.15, 0.45, 0.75)]
        actions += [ChaosAction(at(f), "freeze", "firestore", hold()) for f in (0.3, 0.6)]
        actions += [
            ChaosAction(at(0.9), "freeze", "pubsub", hold()),
            ChaosAction(traffic_s + 3.0 + rng.uniform(0.0, 1.0), "freeze", "pubsub", hold()),
        ]
        return actions

    def run(self) -> None:
        stack = self.stack
        t0 = time.monotonic()
        traffic_s = max(j.start_at_s for j in self.jobs)
        if self.phase.reviewer:
            self._seed_review_items()
        self.ticker = RecordingSweepTicker(stack.url, SWEEP_INTERVAL_S, headers=stack.internal_headers()).start()
        self.cycler = RelayCycler(stack.relay, relay_module.MODES, random.Random(f"{self.seed}/relay")).start()
        if stack.graph_relay is not None:
            self.graph_cycler = RelayCycler(
                stack.graph_relay, relay_module.MODES, random.Random(f"{self.seed}/graph-relay")
            ).start()
        self.chaos = ChaosRunner(
            self.chaos_actions(traffic_s),
            groups={
                "firestore": lambda: stack.process_groups()["firestore"],
                "pubsub": lambda: stack.process_groups()["pubsub"],
            },
            functions_master_pid=lambda: stack.functions.pid if stack.functions else None,
            functions_ready=stack.functions_serving,
        ).start()
        if self.phase.reviewer:
            self.reviewer = ScriptedReviewer(
                stack.url,
                random.Random(f"{self.seed}/reviewer"),
                accept=lambda job_id: job_id in self.by_id or job_id in self.seeded.values(),
            ).start()
        self._traffic()
        self.timings["traffic_s"] = time.monotonic() - t0
        if self.reviewer is not None:  # still deciding while the last late copies land
            time.sleep(REVIEWER_TAIL_S)
            self.reviewer.stop()
        self.cycler.stop()  # the relay is back to forward-and-respond
        if self.graph_cycler is not None:
            self.graph_cycler.stop()
        self.chaos.join(timeout_s=30.0)  # the last Pub/Sub freeze runs into the settling
        self.chaos.stop()
        t1 = time.monotonic()
        self._settle()
        self.timings["settle_s"] = time.monotonic() - t1
        t2 = time.monotonic()
        self._collect_review_items()
        self.timings["review_pull_s"] = time.monotonic() - t2
        self.ticker.stop()
        self.relay_stats = stack.relay.stats()
        self.effects = stack.sim.effects()
        if stack.graph_sim is not None and stack.graph_relay is not None:  # Graph's acceptance log, same keys
            self.graph_relay_stats = stack.graph_relay.stats()
            self.effects += [
                {"message_id": e["internetMessageId"], "gmail_id": e["id"], "mailbox": e["user"]}
                for e in stack.graph_sim.effects()
            ]
        self.claimed_traces = self._claims_from_log()
        self.seeded_views = {
            job_id: get_status(stack.url, job_id, stack.caller_headers()) for job_id in self.seeded.values()
        }

    def _seed_review_items(self) -> None:
        """Review items of every kind by construction, before the chaos starts, so each decision is
        on offer: the random traffic may make too few (runs saw none to acknowledge, or none left to
        cancel). Three payments jobs whose only attempt fails before reaching Gmail wait for a person
        (ambiguous: resend, mark sent or cancel); a transactional one is resent, watched up to the
        horizon, and meets a planted second copy (a duplicate: acknowledge). The messengers' phase
        makes its items the same way."""
        channels = ["payments"] * 3 + ["transactional"]
        self.stack.relay.set_mode("fail-before-forward", count=len(channels))
        views = [messenger_send(self.stack, messenger_job(10_000 + n, c)) for n, c in enumerate(channels)]
        for view in views:
            self.seeded[view["message_id"]] = view["job_id"]
        deadline = time.monotonic() + 20
        while self.stack.relay.stats()["mode"] != relay_module.NORMAL and time.monotonic() < deadline:
            time.sleep(0.1)  # every fault used by a seeded job before the storm's own traffic
        make_duplicates(self.stack, [views[-1]["job_id"]])

    def stop_background(self) -> None:
        """Idempotent; called in a finally before the stack stops: nothing may stay frozen."""
        for part in (self.reviewer, self.chaos, self.cycler, self.graph_cycler, self.ticker):
            if part is not None:
                try:
                    part.stop()
                except Exception as exc:  # noqa: BLE001 - keep stopping the rest
                    print(f"storm stop: {exc!r}", file=sys.stderr)

    def _traffic(self) -> None:
        url = self.stack.url
        started = time.monotonic()
        schedule = sorted(
            ((j.start_at_s, j, n) for j in self.jobs for n in range(1, j.webhooks + 1)),
            key=lambda item: (item[0], item[1].index, item[2]),
        )
        with ThreadPoolExecutor(max_workers=48, thread_name_prefix="n8n") as pool:
            futures = []
            for start_at, job, number in schedule:
                delay = started + start_at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                futures.append(pool.submit(fire_webhook, url, job, number, self.stack.caller_headers()))
            _done, not_done = wait(futures, timeout=TRAFFIC_TAIL_S)
            for future in not_done:
                future.cancel()
            assert not not_done, f"{len(not_done)} webhooks still running {TRAFFIC_TAIL_S}s after the last start"
            self.webhooks = [f.result() for f in futures]

    def _fetch_views(self, job_ids: list[str]) -> dict[str, dict[str, Any] | None]:
        with ThreadPoolExecutor(max_workers=8, thread_name_prefix="status") as pool:
            auth = self.stack.caller_headers()
            return dict(zip(job_ids, pool.map(lambda jid: get_status(self.stack.url, jid, auth), job_ids), strict=True))

    def _settle(self) -> None:
        """Read the pending jobs' state each second until all settled, then every job's final view
        from /status. The stall rule: SETTLE_TIMEOUT_S without a job settling, never past SETTLE_CAP_S.

        A pass reads the stored state straight from the emulator (_stored_progress: one query), not
        each pending job's /status: a queued job's view changes while its pool drains, so the paced
        pool's settling asked /status ~850 times a phase, each a request to the functions under
        coverage and a read (a queued job's also a query for its place): ~15 ms of their CPU, a
        query of all 120 jobs' two fields ~29 ms of the emulator's (2-core machine, 2026-12-02).
        The state and next check that decide settling are the stored fields /status shows; the
        evaluation reads /status."""
        from safesend.adapters.firestore_rest import FirestoreRestClient

        pending = [j.job_id for j in self.jobs]
        client = FirestoreRestClient(self.stack.project, emulator_host=self.stack.emulators.firestore.host)
        collection = self.stack.service_env().get("SAFESEND_JOBS_COLLECTION", "ai_jobs")
        started = time.monotonic()
        deadline = started + SETTLE_TIMEOUT_S
        try:
            for _ in range(int(SETTLE_CAP_S) * 2):
                progress = self._stored_progress(client, collection)
                now = time.monotonic()
                settled = {jid for jid in pending if jid in progress and is_settled(progress[jid], self.phase)}
                if settled:  # progress: the stall clock starts again
                    deadline = min(now + SETTLE_TIMEOUT_S, started + SETTLE_CAP_S)
                pending = [jid for jid in pending if jid not in settled]
                if not pending or now > deadline:
                    break
                time.sleep(1.0)
        finally:
            client.close()
        self.unsettled_at_timeout = pending
        final = [j.job_id for j in self.jobs]
        self.views.update(self._fetch_views(final))  # final views, with events
        self.status_polls += len(final)

    def _stored_progress(self, client: FirestoreRestClient, collection: str) -> dict[str, dict[str, Any]]:
        """Job id -> the stored state and next check (as /status shows them) of every job in the
        phase's own project: one query; {} when the emulator does not answer (the next pass asks again)."""
        from safesend.adapters.firestore_rest import FirestoreApiError, FirestoreTransportError
        from safesend.adapters.firestore_values import decode_fields

        self.store_queries += 1
        query = {
            "from": [{"collectionId": collection}],
            "select": {"fields": [{"fieldPath": name} for name in ("state", "next_check_at")]},
        }
        try:
            docs = client.run_query(query, timeout_s=15.0)
        except (FirestoreApiError, FirestoreTransportError) as exc:
            self.store_query_errors.append(repr(exc)[:200])
            return {}
        progress = {}
        for doc in docs:
            fields = decode_fields(doc.get("fields"))
            progress[str(doc["name"]).rsplit("/", 1)[-1]] = {
                "state": fields.get("state"),
                "next_check_at": fields.get("next_check_at"),
            }
        return progress

    def _collect_review_items(self) -> None:
        """Pull (and ack) every review item until each review/failed job has one with its reason."""
        from google.cloud import pubsub_v1

        previous = os.environ.get("PUBSUB_EMULATOR_HOST")
        os.environ["PUBSUB_EMULATOR_HOST"] = self.stack.emulators.pubsub.host
        subscriber = pubsub_v1.SubscriberClient()
        try:
            deadline = time.monotonic() + REVIEW_PULL_TIMEOUT_S
            empty_pulls = 0
            for _ in range(200):
                response = subscriber.pull(subscription=self.stack.subscription_path, max_messages=500, timeout=2)
                received = response.received_messages
                if received:
                    subscriber.acknowledge(
                        subscription=self.stack.subscription_path, ack_ids=[m.ack_id for m in received]
                    )
                for message in received:
                    attributes = dict(message.message.attributes)
                    self.review_items[attributes.get("job_id", "?")].append(
                        {"attributes": attributes, "data": json.loads(message.message.data)}
                    )
                empty_pulls = 0 if received else empty_pulls + 1
                missing = self._jobs_missing_review_items()
                if (not missing and empty_pulls >= 2) or time.monotonic() > deadline:
                    break
                if missing and not received:
                    # The outbox may not have published yet: refresh those jobs' views (the sweeper runs).
                    self.views.update(self._fetch_views(missing))
                    time.sleep(0.5)
            self.missing_review_items = self._jobs_missing_review_items()
        finally:
            subscriber.close()
            if previous is None:
                os.environ.pop("PUBSUB_EMULATOR_HOST", None)
            else:
                os.environ["PUBSUB_EMULATOR_HOST"] = previous

    def _jobs_missing_review_items(self) -> list[str]:
        missing = []
        for job_id, view in self.views.items():
            if view and view["state"] in HUMAN:
                reasons = {item["attributes"].get("reason") for item in self.review_items.get(job_id, [])}
                if view.get("review_reason") not in reasons:
                    missing.append(job_id)
        return missing

    def _claims_from_log(self) -> dict[str, str]:
        """trace id -> job id for every "job claimed" log line: which request claimed which job."""
        claims: dict[str, str] = {}
        path = self.stack.functions.log_path if self.stack.functions else None
        if path is None or not path.exists():
            return claims
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if '"job claimed"' not in line:
                    continue
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                trace = str(entry.get("logging.googleapis.com/trace", "")).rsplit("/", 1)[-1]
                if trace:
                    claims[trace] = str(entry.get("job_id"))
        return claims

    # ------------------------------------------------------------------ verdict
    def evaluate(self) -> dict[str, list[str]]:
        """Failure kind -> offending job ids (or descriptions). Empty lists are left out."""
        failures: dict[str, list[str]] = defaultdict(list)
        copies = Counter(e["message_id"] for e in self.effects)
        job_by_mid = {j.message_id: j for j in self.jobs}
        for mid in copies:
            if mid in self.seeded:  # decided by the reviewer: a second copy must have reached a person
                view = self.seeded_views.get(self.seeded[mid]) or {}
                decided = [e.get("result") for e in view.get("events", []) if e.get("kind") == "decision"]
                told = view.get("review_reason") in ("duplicate", "sent_after_cancel") or "acknowledged" in decided
                if copies[mid] > 1 and not told:
                    failures["seeded job: a second copy nobody heard of"].append(self.seeded[mid])
            elif mid not in job_by_mid:
                failures["copy of a message id no job owns"].append(mid)
        gmail_ids: dict[str, set[str]] = defaultdict(set)
        for effect in self.effects:
            gmail_ids[effect["message_id"]].add(effect["gmail_id"])
        for job in self.jobs:
            view = self.views.get(job.job_id)
            n = copies.get(job.message_id, 0)
            state = view["state"] if view else None
            if view is None:
                failures["lost: job does not exist"].append(job.job_id)
                continue
            decided = last_decision(view)
            by_person = state == "sent" and decided is not None and decided.get("result") in PERSON_RESULTS
            if job.job_id in self.unsettled_at_timeout:
                failures[
                    f"lost: not settled ({SETTLE_TIMEOUT_S:.0f}s without progress, or {SETTLE_CAP_S:.0f}s)"
                ].append(job.job_id)
            if state == "sent" and n == 0 and not (by_person and decided and decided.get("result") == "marked_sent"):
                failures["lost: sent but no copy in the acceptance log"].append(job.job_id)
            # Guarantee 5: a person's `sent` covers the copies they saw; a copy beyond them must bring the
            # job back to review. A job's only copy is no such copy: "mark sent" over a lagging index
            # (copies: []) is the person's word confirmed, not a duplicate (gate run of 2026-12-01:
            # one 503'd attempt, marked sent 0.5 s before its one copy became searchable).
            unseen = gmail_ids[job.message_id] - set((decided or {}).get("copies") or [])
            if by_person and unseen and n > 1:
                failures["guarantee 5: a copy the reviewer did not see, not reported"].append(job.job_id)
            if state == "cancelled" and n > 0:
                failures["guarantee 5: a copy of a cancelled job, not reported"].append(job.job_id)
            if state == "failed" and n > 0:
                failures["lost: failed although a copy was accepted"].append(job.job_id)
            if state in HUMAN and job.job_id in self.missing_review_items:
                failures["lost: review/failed without a review item"].append(job.job_id)
            if state == "failed":
                error = json.dumps(view.get("last_error") or {})
                kind = "rate limit" if any(m in error for m in RATE_LIMIT_MARKERS) else "other"
                failures[f"failed ({kind}) although nothing permanent was injected"].append(job.job_id)
            if n > 1:
                if not self.phase.beyond_window:
                    failures["duplicate inside the window"].append(job.job_id)
                elif not by_person:  # a person's decision covering every copy is checked above
                    reasons = {i["attributes"].get("reason") for i in self.review_items.get(job.job_id, [])}
                    reason = view.get("review_reason")
                    if state != "review" or reason not in ("duplicate", "sent_after_cancel"):
                        failures["duplicate not in review/duplicate"].append(job.job_id)
                    elif reason not in reasons:
                        failures["duplicate without a `duplicate` review item"].append(job.job_id)
        for hook in self.webhooks:
            for t in hook.tries:
                if t.status is None or t.status < 500:
                    continue
                code = t.body.get("error") if isinstance(t.body, dict) else None
                if t.status != 503 or code != "store_unavailable":
                    failures["5xx from /send"].append(f"{t.job_id} try {t.number}: {t.status} {str(t.body)[:120]}")
                elif t.trace in self.claimed_traces:
                    failures["503 after a claim"].append(f"{t.job_id} try {t.number}: {str(t.body)[:120]}")
        if any(t.status == 503 for h in self.webhooks for t in h.tries) and not self.claimed_traces:
            failures['harness: no "job claimed" log lines, a 503 cannot be placed before/after a claim'].append(
                str(self.stack.functions.log_path if self.stack.functions else None)
            )
        if self.graph_cycler is not None and not self.graph_relay_stats.get("forwarded"):
            failures["harness: no job went through the Graph mailbox"].append("graph relay forwarded nothing")
        for name, stats in (("", self.relay_stats), ("graph ", self.graph_relay_stats if self.graph_cycler else None)):
            faulted = (stats or {}).get("faulted", {})
            for mode in relay_module.MODES if stats is not None else ():
                if mode != "forward-and-respond" and not faulted.get(mode):
                    failures[f"harness: {name}relay mode never applied"].append(mode)
        if self.reviewer is not None:
            recorded = self.decisions_recorded()
            for kind in DECISION_KINDS:
                if not (self.reviewer.made[kind] or recorded[kind]):
                    failures["harness: the reviewer never made this decision"].append(kind)
            for made in self.reviewer.decisions:
                if made["status"] not in (303, 409):  # 409: the entry changed since the page was read
                    failures["decision POST answered neither 303 nor 409"].append(json.dumps(made))
        for entry in self.chaos.log if self.chaos else []:
            if "error" in entry:
                failures["harness: chaos action failed"].append(json.dumps(entry))
        if self.chaos and len(self.chaos.log) < len(self.chaos.actions):
            failures["harness: chaos actions not run in time"].append(
                f"{len(self.chaos.log)} of {len(self.chaos.actions)} ran"
            )
        return {k: v for k, v in failures.items() if v}

    # ------------------------------------------------------------------ reporting
    def decisions_recorded(self) -> Counter[str]:
        """Decision kinds on the jobs' final views, the service's record (the reviewer is the storm's
        only decider). A decision can be applied while its answer is lost: a worker killed by the
        chaos in the middle of a resend (which sends before it answers) left the reviewer with a
        ConnectionError and no result, twice in one run (gate of 5bf6a33, 2026-12-02), and its own
        count then said it never resent."""
        views = [*self.views.values(), *self.seeded_views.values()]
        return Counter(
            str(e.get("decision"))
            for view in views
            for e in (view or {}).get("events") or []
            if e.get("kind") == "decision"
        )

    def summary(self, failures: dict[str, list[str]], total_s: float) -> str:
        tries = [t for h in self.webhooks for t in h.tries]
        statuses = Counter(str(t.status) if t.status is not None else f"conn:{t.error}" for t in tries)
        answers = Counter()
        for t in tries:
            if t.status is not None and isinstance(t.body, dict):
                answers[f"{t.status} {t.body.get('state') or t.body.get('error')}"] += 1
        copies = Counter(e["message_id"] for e in self.effects)
        copies_hist = Counter(min(copies.get(j.message_id, 0), 3) for j in self.jobs)
        views = [self.views.get(j.job_id) for j in self.jobs]
        states = Counter(
            (v["state"] + (f"/{v['review_reason']}" if v.get("review_reason") else "")) if v else "missing"
            for v in views
        )
        by_channel = Counter(
            f"{j.channel}:{v['state'] if v else 'missing'}" for j, v in zip(self.jobs, views, strict=True)
        )
        review_reasons = Counter(i["attributes"].get("reason") for items in self.review_items.values() for i in items)
        chaos = self.chaos.counts() if self.chaos else Counter()
        frozen = [e for e in (self.chaos.log if self.chaos else []) if e.get("action", "").startswith("freeze")]
        per_job = dict(sorted(Counter(j.webhooks for j in self.jobs).items()))
        crash_points = Counter(j.crash_point for j in self.jobs if j.crash_point)
        modes_set = dict(self.cycler.set_counts) if self.cycler else {}
        decided = self.reviewer.decisions if self.reviewer else []
        reviewer_results = dict(Counter(str(d["result"] or d["status"]) for d in decided))
        lines = [
            f"=== fault storm: phase {self.phase.name} (sim index lag {self.phase.sim_index_lag_s}s, "
            f"unknown window 3s{', verify horizon 10s' if self.phase.beyond_window else ''}), seed {self.seed} ===",
            f"jobs            {len(self.jobs)}  ({Counter(j.channel for j in self.jobs)})",
            f"webhooks        {len(self.webhooks)}  (per job: {per_job}), tries {len(tries)}, "
            f"gave up after {WEBHOOK_TRIES} tries: {sum(not h.succeeded for h in self.webhooks)}",
            f"/send statuses  {dict(sorted(statuses.items()))}",
            f"/send answers   {dict(sorted(answers.items()))}",
            f"copies per job  {dict(sorted((('3+' if k == 3 else str(k)), v) for k, v in copies_hist.items()))}"
            f"  (acceptance log: {len(self.effects)} messages, by mailbox "
            f"{dict(Counter(str(e.get('mailbox')) for e in self.effects))})",
            f"final states    {dict(sorted(states.items()))}",
            f"by channel      {dict(sorted(by_channel.items()))}",
            f"review items    {sum(len(v) for v in self.review_items.values())} {dict(review_reasons)}",
            f"relay faults    {self.relay_stats.get('faulted')}  (modes set: {modes_set})",
            *([f"graph relay     {self.graph_relay_stats.get('faulted')}"] if self.graph_cycler else []),
            f"process chaos   {dict(chaos)}, crash points {dict(crash_points)}; freezes "
            + ", ".join(f"{e['action'][7:]}@{e['t']}s for {e.get('frozen_s')}s" for e in frozen),
            f"claims traced   {len(self.claimed_traces)} (from the functions log; places a 503 before/after a claim)",
            f"sweeps          {dict(self.ticker.statuses) if self.ticker else {}} actions "
            f"{dict(self.ticker.actions) if self.ticker else {}}",
            f"reviewer        {dict(self.reviewer.made) if self.reviewer else {}} results {reviewer_results}"
            + (f"; on the jobs {dict(self.decisions_recorded())}" if self.reviewer else ""),
            f"time            total {total_s:.1f}s: "
            + ", ".join(f"{k} {v:.1f}s" for k, v in self.timings.items())
            + f" (settle: {self.store_queries} store queries, {len(self.store_query_errors)} unanswered; "
            + f"{self.status_polls} status polls)",
        ]
        slow = [t for t in tries if t.elapsed_s > WEBHOOK_TIMEOUT_S + 5]
        long_freezes = [e for e in frozen if (e.get("frozen_s") or 0) > 3 * MAX_PLANNED_FREEZE_S]
        if slow or long_freezes:  # e.g. the machine swapped or another job hit the OOM killer
            lines.append(
                f"NOTE: this machine stalled during the run ({len(slow)} webhook tries took longer than "
                f"their {WEBHOOK_TIMEOUT_S:.0f}s timeout; freezes lasted "
                f"{[e.get('frozen_s') for e in long_freezes]}s): timings above are not representative"
            )
        if failures:
            lines.append("FAILURES")
            for kind, items in failures.items():
                lines.append(f"  {kind}: {len(items)}  e.g. {items[:3]}")
                for job_id in [i for i in items if i in self.by_id][:2]:
                    lines.append(self.history(job_id))
        else:
            lines.append("all storm assertions hold")
        return "\n".join(lines)

    def history(self, job_id: str) -> str:
        """One job, compactly: its copies, its webhook tries and its event list."""
        job = self.by_id[job_id]
        view = self.views.get(job_id) or {}
        copies = sum(1 for e in self.effects if e["message_id"] == job.message_id)
        hooks = "; ".join(
            f"w{h.number}: " + ",".join(str(t.status) if t.status is not None else t.error or "?" for t in h.tries)
            for h in self.webhooks
            if h.job_id == job_id
        )
        out = [
            f"    job {job_id} channel={job.channel} crash_point={job.crash_point} state={view.get('state')} "
            f"review_reason={view.get('review_reason')} attempts={view.get('attempts')} copies={copies} "
            f"error={json.dumps(view.get('error'))[:160]}",
            f"      webhooks {hooks}",
        ]
        t0 = None
        for event in view.get("events") or []:
            at = event.get("at") or ""
            try:
                stamp = datetime.fromisoformat(at).timestamp()
                t0 = stamp if t0 is None else t0
                rel = f"+{stamp - t0:6.2f}s"
            except (TypeError, ValueError):
                rel = at
            extra = {k: v for k, v in event.items() if k not in ("at", "kind") and v is not None}
            if "error" in extra and isinstance(extra["error"], dict):
                extra["error"] = extra["error"].get("code")
            if "provider_ref" in extra and isinstance(extra["provider_ref"], dict):
                extra["provider_ref"] = extra["provider_ref"].get("gmail_id")
            out.append(f"      {rel} {event.get('kind')} {json.dumps(extra, default=str)[:140] if extra else ''}")
        return "\n".join(out)

    def write_report(self, failures: dict[str, list[str]]) -> str:
        path = self.stack.log_dir / "storm-report.json"
        report = {
            "phase": self.phase.name,
            "seed": self.seed,
            "timings": self.timings,
            "failures": failures,
            "chaos": self.chaos.log if self.chaos else [],
            "relay": self.cycler.log if self.cycler else [],
            "relay_stats": self.relay_stats,
            "graph_relay_stats": self.graph_relay_stats,
            "reviewer": {"decisions": self.reviewer.decisions, "errors": self.reviewer.errors}
            if self.reviewer
            else None,
            "jobs": [
                {
                    "index": j.index,
                    "job_id": j.job_id,
                    "channel": j.channel,
                    "webhooks": j.webhooks,
                    "crash_point": j.crash_point,
                    "copies": sum(1 for e in self.effects if e["message_id"] == j.message_id),
                    "view": self.views.get(j.job_id),
                    "review_items": self.review_items.get(j.job_id, []),
                }
                for j in self.jobs
            ],
            "tries": [t.__dict__ for h in self.webhooks for t in h.tries],
        }
        path.write_text(json.dumps(report, indent=1, default=str))
        return str(path)


# --------------------------------------------------------------------------- the test
def storm_config(phase: Phase) -> StackConfig:
    config = StackConfig(
        sim_index_lag_s=phase.sim_index_lag_s, mailboxes=phase.mailboxes, project=storm_project(phase.name)
    )
    config.service_env = {**config.service_env, **phase.env, "SAFESEND_CHANNELS_JSON": json.dumps(SHORT_CHANNELS)}
    return config


def limit_mailboxes(stack: LocalStack, phase: Phase) -> None:
    """Gmail (the simulator) enforces each pool mailbox's rate as the service's budget does."""
    if phase.units_per_minute is None or stack.sim is None:
        return
    for user in stack.mailbox_users().values():
        stack.sim.set_limits(user, units_per_window=phase.units_per_minute)
    if stack.graph_sim is not None:  # Graph counts messages only: a send is 100 of the service's units
        stack.graph_sim.configure(messages_per_minute=phase.units_per_minute // 100)


def storm_project(name: str) -> str:
    """Each phase's own project on the shared emulators: no document, queue or message is shared."""
    return f"demo-storm-{name}"


@pytest.fixture
def storm_seed() -> Iterator[int]:
    yield int(os.environ.get("SAFESEND_STORM_SEED", DEFAULT_SEED))


@pytest.mark.timeout(600)
@pytest.mark.parametrize("phase", PHASES, ids=[p.name for p in PHASES])
def test_fault_storm(
    phase: Phase, storm_seed: int, emulators: EmulatorStack, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    stack = LocalStack(storm_config(phase), emulators)
    storm: Storm | None = None
    try:
        stack.start()
        limit_mailboxes(stack, phase)
        storm = Storm(stack, phase, storm_seed)
        storm.timings["stack_start_s"] = time.monotonic() - started
        storm.run()
    except BaseException:
        if storm is not None:  # a harness error: still show what happened so far
            with capsys.disabled():
                print(
                    f"\nstorm aborted ({phase.name}, seed {storm_seed}); chaos log: "
                    f"{storm.chaos.log if storm.chaos else []}; logs: {stack.log_dir}",
                    flush=True,
                )
        raise
    finally:
        if storm is not None:
            storm.stop_background()  # thaw and calm everything before the stack stops
        stack.stop()
    assert storm is not None
    failures = storm.evaluate()
    report_path = storm.write_report(failures)
    summary = storm.summary(failures, time.monotonic() - started) + f"\nfull report: {report_path}"
    with capsys.disabled():
        print("\n" + summary, flush=True)
    unsettled = Counter(str((storm.views.get(jid) or {}).get("state")) for jid in storm.unsettled_at_timeout)
    assert not failures, (
        "storm assertions failed (summary and job histories printed above): "
        + "; ".join(f"{kind}: {len(items)}" for kind, items in failures.items())
        + (f"; unsettled by state {dict(unsettled)}" if unsettled else "")
        + f"; timings {storm.timings}"
    )


# --------------------------------------------------------------------------- the messengers' storm
# Issue 25: the callback receivers and the Chat / Slack webhooks flap (down, 5xx, 429 + Retry-After,
# slow) while jobs settle, duplicates are found and reviewers decide. Every receiver ends on its
# job's true final state; each reviewer target gets exactly one card per review entry and one line
# per decision.
MESSENGER_SENT_JOBS = 8  # transactional, two executions (callback URLs) each
MESSENGER_REVIEW_JOBS = 6  # payments, in doubt: review, then half cancelled, half marked sent
MESSENGER_DUPLICATE_JOBS = 2  # sent, then a second copy: review (duplicate), then acknowledged
MESSENGER_FLAP_S = 12.0
MESSENGER_SETTLE_S = 60.0


def console_form(stack: LocalStack, job_id: str) -> dict[str, str]:
    """The hidden fields of an item's decision form (the development identity signs in locally)."""
    page = requests.get(f"{stack.url}/review/items/{job_id}", timeout=15).text
    found = {name: re.search(rf'name="{name}" value="([^"]+)"', page) for name in ("review_id", "csrf")}
    missing = [name for name, match in found.items() if match is None]
    assert not missing, f"no {missing} on the console page of {job_id}"
    return {name: html.unescape(match.group(1)) for name, match in found.items() if match is not None}


def decide_over_http(stack: LocalStack, job_id: str, decision: str) -> str:
    """A reviewer's form post, as the console's page sends it; the result from the redirect."""
    form = {**console_form(stack, job_id), "decision": decision, "note": "storm"}
    status = None
    for _ in range(10):  # bounded: a 5xx (a dependency stalled) is retried like a reviewer would
        response = requests.post(
            f"{stack.url}/review/items/{job_id}/decision",
            data=form,
            headers={"Origin": stack.url},
            allow_redirects=False,
            timeout=30,
        )
        status = response.status_code
        if status == 303:
            return parse_qs(urlsplit(response.headers["Location"]).query)["result"][0]
        time.sleep(1.0)
    raise AssertionError(f"decision {decision} on {job_id}: HTTP {status}")


def messenger_posts(hook: RecordingReceiver, job_id: str) -> tuple[list[dict], list[dict]]:
    """(cards, lines) a fake webhook got for one job: Chat threads by job (threadKey), Slack names it."""
    mine = [r for r in hook.received if f"threadKey={job_id}" in r.path or job_id in r.body.decode()]
    bodies = [r.json() for r in mine]
    cards = [b for b in bodies if "cardsV2" in b or "blocks" in b]
    return cards, [b for b in bodies if "cardsV2" not in b and "blocks" not in b]


def messenger_failures(
    stack: LocalStack, urls: dict[str, list[tuple[RecordingReceiver, str]]], views: dict[str, dict[str, Any]]
) -> dict[str, list[str]]:
    """Every receiver on the truth; one card per entry and one line per decision, per target."""
    failures: dict[str, list[str]] = defaultdict(list)
    for job_id, targets in urls.items():
        view = views[job_id]
        for receiver, path in targets:
            got = [r.json() for r in receiver.for_path(path)]
            if not got or (got[-1]["state"], got[-1]["verified"]) != (view.get("state"), view.get("verified")):
                failures["receiver_not_on_truth"].append(f"{job_id} {path}: {[g['state'] for g in got]}")
        entries = [e for e in view.get("events", []) if e["kind"] in ("entered_review", "entered_failed")]
        decisions = [e for e in view.get("events", []) if e["kind"] == "decision"]
        for name, hook in (("chat", stack.chat), ("slack", stack.slack)):
            assert hook is not None
            cards, lines = messenger_posts(hook, job_id)
            if len(cards) != len(entries):
                failures[f"{name}_cards_not_one_per_entry"].append(f"{job_id}: {len(cards)} for {len(entries)}")
            if len(lines) != len(decisions):
                failures[f"{name}_lines_not_one_per_decision"].append(f"{job_id}: {len(lines)} for {len(decisions)}")
    return failures


def messenger_job(n: int, channel: str) -> dict[str, Any]:
    return {
        "customer_id": f"storm-{uuid.uuid4().hex[:8]}",
        "event_type": "order_paid",
        "order_id": str(n),
        "channel": channel,
        "to": ["ann@example.com"],
        "subject": f"Messenger storm {n}",
        "text": "Thanks for your order.",
    }


def messenger_send(stack: LocalStack, body: dict[str, Any]) -> dict[str, Any]:
    """n8n's HTTP Request node with Retry On Fail (bounded)."""
    status, text = None, ""
    for _ in range(5):
        response = requests.post(f"{stack.url}/send", json=body, headers=stack.caller_headers(), timeout=30)
        if response.status_code < 300:
            return dict(response.json())
        status, text = response.status_code, response.text[:200]
        time.sleep(1.0)
    raise AssertionError(f"/send kept failing: {status} {text}")


def messenger_traffic(
    stack: LocalStack, receivers: list[RecordingReceiver]
) -> tuple[dict[str, list[str]], dict[str, list[tuple[RecordingReceiver, str]]]]:
    """Jobs whose first attempt meets a relay fault (review, duplicate-to-be), then clean ones with two
    executions each; every execution waits for its callback. Returns the job ids by kind, and each
    job's callback receivers and paths."""
    urls: dict[str, list[tuple[RecordingReceiver, str]]] = defaultdict(list)
    kinds: dict[str, list[str]] = {"review": [], "duplicate": [], "sent": []}
    plan = [("review", "payments", 1)] * MESSENGER_REVIEW_JOBS + [("duplicate", "transactional", 1)] * (
        MESSENGER_DUPLICATE_JOBS
    )
    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="messengers") as pool:
        for faulted in (True, False):
            batch = plan if faulted else [("sent", "transactional", 2)] * MESSENGER_SENT_JOBS
            if faulted:  # each of these jobs' first attempt fails before reaching Gmail
                stack.relay.set_mode("fail-before-forward", count=len(batch))
            calls = []
            for n, (kind, channel, executions) in enumerate(batch):
                body = messenger_job(len(urls) * 10 + n, channel)
                for execution in range(executions):
                    receiver = receivers[(n + execution) % len(receivers)]
                    path = f"/wait/{kind}-{n}-{execution}"
                    call = pool.submit(messenger_send, stack, {**body, "callback_url": f"{receiver.url}{path}"})
                    calls.append((kind, receiver, path, call))
            deadline = time.monotonic() + 20
            while faulted and stack.relay.stats()["mode"] != relay_module.NORMAL and time.monotonic() < deadline:
                time.sleep(0.1)  # the faults are used up before any clean job sends
            for kind, receiver, path, call in calls:
                job_id = call.result(timeout=90)["job_id"]
                if job_id not in kinds[kind]:
                    kinds[kind].append(job_id)
                urls[job_id].append((receiver, path))
    return kinds, urls


def make_duplicates(stack: LocalStack, job_ids: list[str]) -> None:
    """Each job, `sent` and still verified later, gets a second copy in the mailbox: the
    verification finds two and hands it to the reviewers (a duplicate)."""
    assert stack.sim is not None
    for job_id in job_ids:
        deadline = time.monotonic() + 30
        while True:
            view = get_status(stack.url, job_id, stack.caller_headers()) or {}
            if view.get("state") == "sent" and view.get("verified") is False:
                raw = (
                    f"From: a@example.com\r\nTo: b@example.com\r\nSubject: x\r\n"
                    f"Message-ID: {view['message_id']}\r\n\r\nbody\r\n"
                )
                stack.sim.insert_message(raw.encode())
                break
            assert time.monotonic() < deadline, f"{job_id} never sent and unverified: {view.get('state')}"
            time.sleep(0.3)


def reviewers_told(view: dict[str, Any]) -> bool:
    """In review, with its Chat and Slack notices queued (notify ran; delivered or not): what a
    reviewer answers. An entry answered before notify ran is stale there and tells nobody."""
    kinds = {c["kind"] for c in view.get("callbacks", [])}
    return view.get("state") == "review" and {"chat", "slack"} <= kinds


def decide_all(stack: LocalStack, review: list[str], duplicates: list[str]) -> dict[str, str]:
    """Reviewers answer each entry while the webhooks flap: cancel / mark sent, acknowledge a duplicate."""
    decided = {}
    wanted = [(job_id, "cancel" if n % 2 else "mark_sent") for n, job_id in enumerate(review)]
    wanted += [(job_id, "acknowledge") for job_id in duplicates]
    for job_id, decision in wanted:
        deadline = time.monotonic() + 45
        while not reviewers_told(get_status(stack.url, job_id, stack.caller_headers()) or {}):
            assert time.monotonic() < deadline, f"{job_id} never reached review, or its reviewers"
            time.sleep(0.5)
        decided[job_id] = decide_over_http(stack, job_id, decision)
    return decided


def messenger_settled(stack: LocalStack, job_ids: list[str]) -> dict[str, dict[str, Any]]:
    """Wait (bounded) until every job is settled and has no pending notice; the final views."""
    views: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + MESSENGER_SETTLE_S
    auth = stack.caller_headers()
    while True:
        views = {job_id: get_status(stack.url, job_id, auth) or {} for job_id in job_ids}
        pending = [
            job_id
            for job_id, view in views.items()
            if view.get("state") not in SETTLED
            or view.get("next_check_at") is not None
            or any(c["state"] == "pending" for c in view.get("callbacks", []))
        ]
        if not pending or time.monotonic() > deadline:
            return views
        time.sleep(1.0)


@pytest.mark.timeout(300)
def test_fault_storm_messengers(storm_seed: int, emulators: EmulatorStack, capsys: pytest.CaptureFixture[str]) -> None:
    """The messengers' phase: callback receivers and webhooks flap while jobs settle and decisions come."""
    started = time.monotonic()
    config = StackConfig(project=storm_project("messengers"))
    config.service_env = {**config.service_env, "SAFESEND_CHANNELS_JSON": json.dumps(SHORT_CHANNELS)}
    stack = LocalStack(config, emulators)
    receivers = [RecordingReceiver(), RecordingReceiver()]
    flapper: ReceiverFlapper | None = None
    ticker: RecordingSweepTicker | None = None
    decided: dict[str, str] = {}
    urls: dict[str, list[tuple[RecordingReceiver, str]]] = {}
    try:
        stack.start()
        for receiver in receivers:
            receiver.start()
        assert stack.chat is not None and stack.slack is not None
        targets = {"callbacks-a": receivers[0], "callbacks-b": receivers[1], "chat": stack.chat, "slack": stack.slack}
        flapper = ReceiverFlapper(targets, random.Random(f"{storm_seed}/messengers")).start()
        ticker = RecordingSweepTicker(stack.url, SWEEP_INTERVAL_S, headers=stack.internal_headers()).start()
        flap_until = time.monotonic() + MESSENGER_FLAP_S
        kinds, urls = messenger_traffic(stack, receivers)
        make_duplicates(stack, kinds["duplicate"])
        decided = decide_all(stack, kinds["review"], kinds["duplicate"])
        time.sleep(max(0.0, flap_until - time.monotonic()))
        flapper.stop()
        views = messenger_settled(stack, list(urls))
        time.sleep(2.0)  # room for a late duplicate or a stale notice to land
        failures = messenger_failures(stack, urls, views)
    finally:
        for part in (flapper, ticker):
            if part is not None:
                part.stop()
        for receiver in receivers:
            receiver.stop()
        stack.stop()
    summary = (
        f"messenger storm (seed {storm_seed}): {len(urls)} jobs, decisions {sorted(decided.values())}, "
        f"faults {dict(flapper.counts) if flapper else {}}, {time.monotonic() - started:.1f} s, logs {stack.log_dir}"
    )
    with capsys.disabled():
        print("\n" + summary, flush=True)
    assert sorted(decided.values()) == sorted(
        ["marked_sent", "cancelled"] * (MESSENGER_REVIEW_JOBS // 2) + ["acknowledged"] * MESSENGER_DUPLICATE_JOBS
    ), decided
    assert not failures, json.dumps(failures, indent=1)
