"""The drill's Graph mode (issue 22): the same measurements on a Microsoft 365 mailbox, through
safesend's own GraphMailer.

What it measures, per message: the Sent Items search lag (from the send's 202 until
`$filter=internetMessageId eq '<ours>'` finds the copy), the delta lag (until a delta round from a
checkpoint taken before the first send shows it), and whether our MIME Message-ID is kept (found by our
own id = kept; a copy that delta shows under another internetMessageId counts as unattributed: a
rewrite, or other traffic). A 202 carries no id, so the send's own answer is no evidence that the id
was kept: `GraphDrillMailer` names nothing stored until a read has shown it. Dropped answers are cut
after the sendMail POST was written and acknowledged (CutAfterWriteHttp, as for Gmail).

Live credentials (devstack/DRILL.md): SAFESEND_GRAPH_TENANT_ID, SAFESEND_GRAPH_CLIENT_ID,
SAFESEND_GRAPH_USER (the mailbox's address), and SAFESEND_GRAPH_CERTIFICATE_FILE (JSON
{"private_key": PEM, "thumbprint": hex}, as the Secret Manager secret holds it) or, without it, a
federated credential from Application Default Credentials' Google ID token.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from devstack.drill import LIVE, MOCK, CutAfterWriteHttp, Drill, DrillError, DrillSettings, _progress
from safesend.adapters.graph_auth import (
    BoundedLoginHttp,
    GoogleIdTokenAssertion,
    GraphTokens,
    certificate_credential,
    federated_credential,
)
from safesend.adapters.graph_mailer import FIRST_COPY_PREFIX, GRAPH_ENDPOINT, GraphMailer
from safesend.adapters.one_shot_http import TransportError
from safesend.core.model import HistoryPage, MailboxHit

MAX_CONFIRMED = 10_000  # copy names a read has shown (a drill sends at most 50)


class GraphDrillMailer:
    """The drill's mailer over a GraphMailer: a profile (the address and a delta checkpoint), and a
    first-copy name counts as stored only once a search or delta round has shown it."""

    def __init__(self, mailer: GraphMailer):
        self.mailer = mailer
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def profile(self) -> dict[str, str]:
        return {"emailAddress": self.mailer.user, "historyId": self.mailer.current_history_id()}

    def send(self, raw: bytes) -> Any:
        return self.mailer.send(raw)

    def _saw(self, names: Sequence[str]) -> None:
        with self._lock:
            if len(self._seen) < MAX_CONFIRMED:
                self._seen.update(names)

    def find_by_message_id(self, message_id: str) -> Sequence[MailboxHit]:
        hits = self.mailer.find_by_message_id(message_id)
        self._saw([hit.gmail_id for hit in hits])
        return hits

    def added_since(self, checkpoint: str, max_pages: int) -> HistoryPage:
        page = self.mailer.added_since(checkpoint, max_pages=max_pages)
        self._saw(page.gmail_ids())
        return page

    def message_ids_of(self, names: Sequence[str]) -> dict[str, str]:
        with self._lock:
            unseen = {n for n in names if n.startswith(FIRST_COPY_PREFIX) and n not in self._seen}
        return self.mailer.message_ids_of([n for n in names if n not in unseen])


def make_graph_cut_send(
    user: str, api_endpoint: str, tokens: GraphTokens | None, hold_s: float, timeout_s: float
) -> Callable[[bytes], float]:
    """A dropped sendMail built as GraphMailer.send builds it (same URL, headers, base64 MIME), over
    CutAfterWriteHttp; the token is obtained first, on a transport that reads answers."""
    probe = GraphMailer(user, None, api_endpoint=api_endpoint)
    url = f"{probe._base}/sendMail"  # the mailer's own URL: the cut hits what send hits

    def cut_send(raw: bytes) -> float:
        headers = {"content-type": "text/plain"}
        if tokens is not None:
            headers["authorization"] = f"Bearer {tokens.token(time.monotonic() + timeout_s)}"
        transport = CutAfterWriteHttp(timeout=timeout_s, hold_s=hold_s)
        try:
            transport.request(url, "POST", body=base64.b64encode(raw), headers=headers)
        except TransportError:
            if transport.written_at is not None:
                return transport.written_at
            raise
        raise DrillError("the cut transport returned an answer")  # unreachable: it never reads one

    return cut_send


def run_graph_mock(
    settings: DrillSettings,
    index_lag_s: float,
    rewrite_message_ids: bool = False,
    progress: Callable[[str], None] = _progress,
) -> dict[str, Any]:
    """The Graph drill against an in-process Graph simulator (stopped before returning)."""
    from devstack.graph_sim import GraphSimulator

    user = "drill@contoso.example"
    with GraphSimulator() as sim:
        sim.configure(index_lag_s=index_lag_s, rewrite_message_ids=rewrite_message_ids)
        mailer = GraphMailer(user, None, api_endpoint=sim.url, send_timeout_s=5.0, read_timeout_s=5.0)
        cut = make_graph_cut_send(user, sim.url, None, settings.cut_hold_s, timeout_s=5.0)
        report = Drill(GraphDrillMailer(mailer), settings, MOCK, "graph simulator", cut, progress=progress).run()  # type: ignore[arg-type]
        report["provider"] = "graph"
        report["simulator"] = {
            "index_lag_s": index_lag_s,
            "history_lag_s": index_lag_s,  # the simulator's delta shows a copy when its search does
            "rewrite_message_ids": rewrite_message_ids,
            "accepted": len(sim.effects()),
        }
        return report


def run_graph_live(
    settings: DrillSettings, env: dict[str, str], progress: Callable[[str], None] = _progress
) -> dict[str, Any]:
    """The Graph drill on a live tenant (credentials from the environment, module docstring)."""
    tenant, client, user = (env.get(f"SAFESEND_GRAPH_{n}") or "" for n in ("TENANT_ID", "CLIENT_ID", "USER"))
    if not (tenant and client and user):
        raise DrillError("Graph mode needs SAFESEND_GRAPH_TENANT_ID, SAFESEND_GRAPH_CLIENT_ID and SAFESEND_GRAPH_USER")
    path = env.get("SAFESEND_GRAPH_CERTIFICATE_FILE")
    if path:
        try:
            with open(path, encoding="utf-8") as handle:
                stored = json.load(handle)
            credential = certificate_credential(str(stored["private_key"]), str(stored["thumbprint"]))
        except (OSError, ValueError, KeyError, TypeError):
            raise DrillError(f'{path} is not {{"private_key": PEM, "thumbprint": hex}}') from None
    else:
        credential = federated_credential(GoogleIdTokenAssertion())
    tokens = GraphTokens(tenant, client, credential, BoundedLoginHttp(20.0))
    mailer = GraphMailer(user, tokens, api_endpoint=GRAPH_ENDPOINT)
    cut = make_graph_cut_send(user, GRAPH_ENDPOINT, tokens, settings.cut_hold_s, timeout_s=20.0)
    report = Drill(GraphDrillMailer(mailer), settings, LIVE, "Microsoft 365", cut, progress=progress).run()  # type: ignore[arg-type]
    report["provider"] = "graph"
    return report
