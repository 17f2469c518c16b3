"""Benchmarks 1-3's Graph column (issue 22): present beside the Gmail columns, measured in the same run, and
computed from what reached the Graph simulator (counts, not timings, are asserted)."""

from __future__ import annotations

from collections import Counter

import pytest

from bench import paths
from bench.graph_column import CALL_ORDER, graph_calls, graph_rows
from bench.report import Bench

pytestmark = pytest.mark.integration


def test_paths_report_graph_calls_per_job_beside_gmail_units(firestore_emulator, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", firestore_emulator.host)
    benches = {b.key: b for b in paths.run(None, runs=1, budget_s=120.0)}
    assert [k for k in benches if k in ("store", "quota", "graph_calls")] == ["store", "quota", "graph_calls"]
    graph = benches["graph_calls"]
    assert not graph.failures, graph.failures
    rows = {r.variant: r for r in graph.rows}
    assert list(rows) == [p.name for p in paths.PATHS]
    for path in paths.PATHS:
        row = rows[path.name]
        run = row.detail["median_run"]
        assert row.samples == [graph_calls(run["gmail"])]  # the row is the counter's measurement
        assert run["state"] == path.expect
        assert run["effects"] == (1 if path.expect == "sent" else 0)
    happy = rows["happy"].detail["median_run"]["gmail"]
    assert happy.get("sendMail") == 1 and graph_calls(happy) >= 1
    assert rows["replay (duplicate request)"].samples == [0]  # a replay reaches no mailbox
    missing = rows["ambiguous, missing, retried"].detail["median_run"]
    assert missing["gmail"].get("sendMail") == 1 and missing["attempts"] == 2  # Graph saw the resend only
    assert rows["ambiguous, found by search (change log off)"].detail["median_run"]["gmail"].get("search", 0) >= 1
    change_log = rows["ambiguous, found in change log"].detail["median_run"]["gmail"]
    assert change_log.get("delta", 0) >= 1 and change_log.get("checkpoint", 0) >= 1  # the checkpoint apart
    assert "checkpoint" not in happy or graph_calls(happy) == happy["sendMail"] + happy.get("search", 0)
    # The Gmail column of the same run is beside it.
    assert rows["happy"].detail["gmail_median_run"].get("send") == 1


def test_graph_rows_are_the_median_run_of_the_counted_calls() -> None:
    bench = Bench("graph_calls", "3g", "")
    runs = [
        {"gmail": Counter(sendMail=1, message=m), "state": "sent", "attempts": 1, "checks": 0, "effects": 1}
        for m in (0, 2, 1)
    ]
    graph_rows(bench, {"happy": runs, "empty": []}, {"happy": [{"gmail": Counter(send=1, get=1)}]})
    (row,) = bench.rows
    assert row.samples == [1, 3, 2] and row.text == "2 calls"
    assert "1 sendMail, 1 message" in row.check and "Gmail, same path: 1 get, 1 send" in row.check
    assert set(CALL_ORDER) >= {k for r in runs for k in r["gmail"]}
