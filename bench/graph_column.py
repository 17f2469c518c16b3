"""The Graph column of benchmarks 1-3 (issue 22): the same job through a Microsoft 365 mailbox.

Why a module of its own: benchmarks 1 (latency.py) and 2-3 (paths.py) keep their harness and only add
a variant; what is Graph's (the mailer on the simulator, the direct sendMail baseline, the mailbox the
functions instance is given, and how Graph calls become rows) lives here.

Graph has no quota units: Exchange Online limits messages per minute and recipients per day (paced by
the pool work, benchmark 9), and Graph throttles requests per mailbox and app (10,000 per 10 minutes).
So the column counts calls that reached the simulator, by kind; the token endpoint is counted apart
(MSAL caches a token for about an hour: an instance's, not a job's; the bench's mailers send none).
"""

from __future__ import annotations

import base64
import json
import math
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import requests

from devstack.graph_sim import GraphSimulator
from devstack.relay import FaultRelay
from safesend.adapters.graph_mailer import GraphMailer
from tests.fakes import FakeClock

from .report import Bench, Row
from .stackctl import app_instance, widen_sim_backlog

GRAPH_USER = "graph-bench@safesend.localhost"  # the Microsoft 365 mailbox (its user principal name)
GRAPH_BENCH_WHAT = "per job: Graph calls (sendMail, Sent Items search, message get, delta), counted at the simulator"
CALL_ORDER = ("sendMail", "search", "message", "delta")  # a job's calls; "token" is shown apart


def graph_mailer(relay_url: str, clock: FakeClock) -> GraphMailer:
    """The paths' Graph mailer: no token (the simulator's auth is off), the Gmail mailer's timeouts,
    the fake clock for its waits."""
    return GraphMailer(
        GRAPH_USER,
        None,
        api_endpoint=relay_url,
        send_timeout_s=1.0,
        read_timeout_s=10.0,
        sleep=clock.sleep,
        clock=clock,
    )


def count_checkpoint_apart(mailer: GraphMailer, counter: Any) -> None:
    """The delta round that reads the instance's checkpoint (GraphMailer.current_history_id, Gmail's
    getProfile) is counted as `checkpoint`, not as the job's `delta`: as benchmark 3 shows getProfile apart
    (deployed, an instance reads it at most once per 10 min, whatever its volume)."""
    original = mailer.current_history_id

    def current_history_id() -> str:
        before = counter.snapshot()["delta"]
        try:
            return original()
        finally:
            moved = counter.snapshot()["delta"] - before
            with counter.lock:
                counter.counts["delta"] -= moved
                counter.counts["checkpoint"] += moved

    mailer.current_history_id = current_history_id  # type: ignore[method-assign]


def graph_calls(counts: Counter[str] | dict[str, int]) -> int:
    """A job's Graph calls: everything but the token endpoint."""
    return sum(int(counts.get(label, 0)) for label in CALL_ORDER)


def calls_text(counts: Counter[str] | dict[str, int]) -> str:
    parts = [f"{counts[label]} {label}" for label in CALL_ORDER if counts.get(label)]
    return ", ".join(parts) or "none"


def graph_rows(
    bench: Bench, results: dict[str, list[dict[str, Any]]], gmail_results: dict[str, list[dict[str, Any]]]
) -> None:
    """3g: one row per path, the median run's Graph calls (samples: every run's total), beside the
    Gmail calls of the same path in the same run (benchmark 3's median run)."""
    for name, runs in results.items():
        if not runs:
            continue
        totals: list[float] = [graph_calls(o["gmail"]) for o in runs]
        mid = sorted(runs, key=lambda o: graph_calls(o["gmail"]))[len(runs) // 2]
        row = bench.add(Row(name, unit="n", samples=totals))
        row.text = f"{graph_calls(mid['gmail'])} calls"
        gmail = sorted(gmail_results.get(name, []), key=lambda o: sum(o["gmail"].values()))
        gmail_mid = gmail[len(gmail) // 2]["gmail"] if gmail else {}
        apart = mid["gmail"].get("checkpoint", 0)
        checkpoint = f" (+{apart} delta: the instance's checkpoint)" if apart else ""
        gmail_text = ", ".join(f"{v} {k}" for k, v in sorted(gmail_mid.items()) if v and k != "profile") or "none"
        row.check = (
            f"{calls_text(mid['gmail'])}{checkpoint}; -> {mid['state']}, attempts {mid['attempts']}, "
            f"checks {mid['checks']}, effects {mid['effects']}; Gmail, same path: {gmail_text}"
        )
        row.detail = {
            "median_run": {k: mid[k] for k in ("gmail", "state", "attempts", "checks", "effects")},
            "runs": [{"graph": o["gmail"], "state": o["state"]} for o in runs],
            "gmail_median_run": gmail_mid,
        }
    bench.notes.append(
        "Graph has no quota units: Exchange Online limits messages per minute and recipients per day (paced, "
        "benchmark 9) and Graph throttles requests per mailbox and app. The delta round that reads the instance's "
        "checkpoint (Gmail's getProfile) is shown apart, read just before the claim as in 3. The simulator's delta "
        "sees a message once Sent Items has indexed it (the same 60 s lag as the search): the change-log path "
        "finds it at the look after 60 s, not at the first"
    )


def graph_mailbox_json(api_endpoint: str) -> str:
    """SAFESEND_MAILBOXES_JSON for benchmark 1's Graph instance: one Microsoft 365 mailbox on the
    simulator (no login endpoint: no token), unlimited so that pacing (benchmark 9) does not hold sends."""
    doc = {
        "mailboxes": {
            "m365": {
                "kind": "graph",
                "address": GRAPH_USER,
                "tenant_id": "bench-tenant",
                "client_id": "bench-app",
                "federated": True,
                "send_as": ["shop@example.com", "sender@safesend.localhost"],
                "limits": "unlimited",
                "api_endpoint": api_endpoint.rstrip("/"),
            }
        }
    }
    return json.dumps(doc)


class DirectSendMail:
    """Benchmark 1's Graph baseline: one POST sendMail (base64 MIME, 202 with no body) over a keep-alive
    requests.Session through the relay safesend's instance uses: the direct send without safesend."""

    def __init__(self, relay_url: str, timeout_s: float = 30.0):
        self.url = f"{relay_url.rstrip('/')}/v1.0/users/{GRAPH_USER}/sendMail"
        self.session = requests.Session()
        self.timeout_s = timeout_s

    def send(self, raw: bytes, clock: Callable[[], float]) -> tuple[float, bool]:
        """(seconds, accepted) for one call."""
        start = clock()
        answer = self.session.post(
            self.url, data=base64.b64encode(raw), headers={"Content-Type": "text/plain"}, timeout=self.timeout_s
        )
        return clock() - start, answer.status_code == 202

    def close(self) -> None:
        self.session.close()


class GraphLatencySide:
    """Benchmark 1's Graph column: a Graph simulator behind a relay of its own, the stack's app again with
    one Microsoft 365 mailbox on it, and the direct sendMail, all held until close()."""

    def __init__(self, stack: Any):
        self.sim = GraphSimulator().start()
        self.relay: FaultRelay | None = None
        self.proc: Any = None
        self.direct_client: DirectSendMail | None = None
        try:
            widen_sim_backlog(self.sim)
            self.relay = FaultRelay(self.sim.url).start()
            extra = {"SAFESEND_MAILBOXES_JSON": graph_mailbox_json(self.relay.url)}
            self.proc, self.url = app_instance(stack, "functions-graph", extra)
            self.direct_client = DirectSendMail(self.relay.url)
        except BaseException:
            self.close()
            raise

    def direct(self, raw: bytes) -> tuple[float, bool]:
        assert self.direct_client is not None
        return self.direct_client.send(raw, time.perf_counter)

    def set_latency(self, seconds: float, read_seconds: float | None = None) -> None:
        self.sim.set_latency(seconds, read_seconds)

    def effects(self) -> Counter[str]:
        return Counter(e["internetMessageId"] for e in self.sim.effects())

    def close(self) -> None:
        if self.direct_client is not None:
            self.direct_client.close()
        if self.proc is not None:
            self.proc.stop()
        if self.relay is not None:
            self.relay.stop()
        self.sim.stop()


def graph_ratios(graph_base: Row, on_graph: Row) -> None:
    """Benchmark 1's Graph rows: safesend's median over the direct sendMail's, measured in the same rounds
    (the pairs are per round); the direct sendMail row is the Graph column's baseline, not the Gmail one's."""
    graph_base.ratio = math.nan  # shown as "-": it is a baseline itself
    graph_base.check = "the Graph rows' baseline: POST sendMail, keep-alive requests.Session, via its relay"
    on_graph.ratio = on_graph.median / graph_base.median if graph_base.samples and graph_base.median else math.nan
    if on_graph.show_p95 and graph_base.samples and graph_base.p95:
        on_graph.ratio_p95 = on_graph.p95 / graph_base.p95
    on_graph.check = "200 sent, new key each call; the same app with one graph mailbox; ratio to direct sendMail"


def check_graph_effects(bench: Bench, direct_ids: list[str], ours: list[str], effects: Counter[str]) -> None:
    """Every Graph send of either side is exactly one message in the Graph simulator's acceptance log."""
    rows = [r for r in bench.rows if r.variant.startswith("Graph: ")]
    bad_direct = sum(1 for mid in direct_ids if effects[mid] != 1)
    bad_ours = sum(1 for mid in ours if effects[mid] != 1)
    for row, ids, bad in zip(rows, (direct_ids, ours), (bad_direct, bad_ours), strict=False):
        row.check += f"; exactly 1 effect {len(ids) - bad}/{len(ids)}"
    if bad_direct or bad_ours:
        bench.failures.append(f"Graph: {bad_direct} direct and {bad_ours} safesend sends without exactly one effect")
