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
from collections import Counter
from collections.abc import Callable
from typing import Any

import requests

from safesend.adapters.graph_mailer import GraphMailer
from tests.fakes import FakeClock

from .report import Bench, Row

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
        totals = [graph_calls(o["gmail"]) for o in runs]
        mid = sorted(runs, key=lambda o: graph_calls(o["gmail"]))[len(runs) // 2]
        row = bench.add(Row(name, unit="n", samples=totals))
        row.text = f"{graph_calls(mid['gmail'])} calls"
        gmail = sorted(gmail_results.get(name, []), key=lambda o: sum(o["gmail"].values()))
        gmail_mid = gmail[len(gmail) // 2]["gmail"] if gmail else {}
        gmail_text = ", ".join(f"{v} {k}" for k, v in sorted(gmail_mid.items()) if v and k != "profile") or "none"
        row.check = (
            f"{calls_text(mid['gmail'])}; -> {mid['state']}, attempts {mid['attempts']}, checks {mid['checks']}, "
            f"effects {mid['effects']}; Gmail, same path: {gmail_text}"
        )
        row.detail = {
            "median_run": {k: mid[k] for k in ("gmail", "state", "attempts", "checks", "effects")},
            "runs": [{"graph": o["gmail"], "state": o["state"]} for o in runs],
            "gmail_median_run": gmail_mid,
        }
    bench.notes.append(
        "Graph has no quota units: Exchange Online limits messages per minute and recipients per day (paced, "
        "benchmark 9) and Graph throttles requests per mailbox and app; the change-log paths include the "
        "delta round that reads the instance's checkpoint (Gmail's getProfile, counted apart in 3), read just "
        "before the claim as in 3"
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
