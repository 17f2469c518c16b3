"""1. Send transport: safesend's OneShotHttp (via the real GmailMailer) vs stock httplib2 keep-alive.

Both go through googleapiclient's messages.send against one in-process GmailSimulator on
127.0.0.1, interleaved send by send (ABAB..., order flipped every pair) so drift and
background load hit both alike. The simulator's acceptance log is the judge: every send must
have produced exactly one accepted message with our Message-ID and the id we were given.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httplib2
from googleapiclient.discovery import build

from devstack.gmail_sim import GmailSimulator
from safesend.adapters.gmail_mailer import GmailMailer
from safesend.core.mime import encode_raw
from safesend.core.model import Accepted

from .common import Budget, raw_for
from .results import Comparison, Variant

TIMEOUT_S = 10.0
WARMUP = 5


class _ConnectionCounter:
    """Counts TCP connections the simulator accepts (wraps its server's process_request)."""

    def __init__(self, sim: GmailSimulator):
        self.count = 0
        server = getattr(sim, "_server", None)
        original = getattr(server, "process_request", None)
        self.available = original is not None
        if not self.available:
            return

        def counting(request: Any, client_address: Any) -> None:
            self.count += 1
            original(request, client_address)

        server.process_request = counting  # type: ignore[union-attr]


Side = tuple[Variant, Callable[[bytes], str], str]  # variant, send(raw) -> gmail id, tag


@dataclass
class _Sent:
    """What the sends left behind: Message-ID -> the gmail id we were told, new connections per side."""

    told: dict[str, str] = field(default_factory=dict)
    new_conns: dict[str, int] = field(default_factory=lambda: {"oneshot": 0, "keepalive": 0})
    errors: Counter[str] = field(default_factory=Counter)


def run(n: int, budget_s: float) -> Comparison:
    a = Variant("OneShotHttp (GmailMailer.send)")
    b = Variant("httplib2.Http keep-alive")
    comp = Comparison("transport", "1. send transport", "messages.send call", "sends/s", a, b)
    sim = GmailSimulator().start()
    stock_http = httplib2.Http(timeout=TIMEOUT_S)
    try:
        conns = _ConnectionCounter(sim)
        mailer = GmailMailer(api_endpoint=sim.url, send_timeout_s=TIMEOUT_S, read_timeout_s=TIMEOUT_S)
        stock = build(
            "gmail",
            "v1",
            http=stock_http,
            client_options={"api_endpoint": sim.url},
            static_discovery=True,
            cache_discovery=False,
        )

        def send_safesend(raw: bytes) -> str:
            outcome = mailer.send(raw)
            if not isinstance(outcome, Accepted):
                raise RuntimeError(f"GmailMailer.send did not succeed: {outcome}")
            return outcome.gmail_id

        def send_stock(raw: bytes) -> str:
            response = stock.users().messages().send(userId="me", body={"raw": encode_raw(raw)}).execute(num_retries=0)
            return response["id"]

        sides: list[Side] = [(a, send_safesend, "oneshot"), (b, send_stock, "keepalive")]
        # Each send has its own key, so its own Message-ID.
        raws = {tag: [raw_for(f"bench-transport:{tag}:{i}") for i in range(n + WARMUP)] for _, _, tag in sides}
        sent = _Sent()
        _interleaved(comp, sides, raws, conns, sent, n, Budget(budget_s))
        _check(comp, sim, sides, raws, conns, sent)
    finally:
        stock_http.close()
        sim.stop()
    return comp


def _interleaved(
    comp: Comparison,
    sides: list[Side],
    raws: dict[str, list[tuple[bytes, str]]],
    conns: _ConnectionCounter,
    sent: _Sent,
    n: int,
    budget: Budget,
) -> None:
    """WARMUP + n sends per side, alternating (order flipped every pair); the warm-up is not timed."""
    for i in range(n + WARMUP):
        if i >= WARMUP and budget.exhausted:
            comp.notes.append(
                f"transport: time budget {budget.seconds:.0f} s reached after {i - WARMUP} sends per variant "
                f"(asked {n})"
            )
            break
        for variant, send, tag in sides if i % 2 == 0 else sides[::-1]:
            raw, message_id = raws[tag][i]
            before = conns.count
            start = time.perf_counter()
            try:
                answer = send(raw)
                if message_id:
                    sent.told[message_id] = answer
            except Exception as exc:  # noqa: BLE001 - counted and reported as a failure
                sent.errors[tag] += 1
                if sent.errors[tag] <= 3:
                    comp.failures.append(f"{tag} send {i} raised {exc!r:.120}")
                continue
            elapsed = time.perf_counter() - start
            if i >= WARMUP:
                variant.latencies.append(elapsed)
                variant.ops += 1
                variant.busy_s += elapsed
                sent.new_conns[tag] += conns.count - before


def _check(
    comp: Comparison,
    sim: GmailSimulator,
    sides: list[Side],
    raws: dict[str, list[tuple[bytes, str]]],
    conns: _ConnectionCounter,
    sent: _Sent,
) -> None:
    """The simulator's acceptance log judges: one message per send, under the gmail id we were told."""
    told = sent.told
    effects = sim.effects()
    by_message_id = Counter(e["message_id"] for e in effects)
    gmail_ids = {e["message_id"]: e["gmail_id"] for e in effects}
    for variant, _, tag in sides:
        bad = [mid for _, mid in raws[tag] if mid in told and by_message_id[mid] != 1]
        wrong_id = [mid for _, mid in raws[tag] if mid in told and gmail_ids.get(mid) != told[mid]]
        answered = sum(1 for _, mid in raws[tag] if mid in told)
        if answered != variant.n + WARMUP:
            comp.failures.append(f"{tag}: {answered} sends answered, expected {variant.n + WARMUP}")
        if bad:
            comp.failures.append(f"{tag}: {len(bad)} sends without exactly one effect")
        if wrong_id:
            comp.failures.append(f"{tag}: {len(wrong_id)} sends whose gmail id does not match the effect")
        conn_text = f", new conns {sent.new_conns[tag]}/{variant.n}" if conns.available else ""
        variant.check = f"effects {answered - len(bad)}/{answered} exactly once{conn_text}"
    if len(effects) != len(told):
        comp.failures.append(f"simulator accepted {len(effects)} messages for {len(told)} sends")
