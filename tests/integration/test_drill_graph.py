"""The drill's Graph mode (devstack/drill_graph.py) against the Graph simulator, labelled MOCK: it
measures the Sent Items search lag and the delta lag, sees each dropped sendMail land exactly once,
takes a 202 for no proof that the Message-ID was kept, and notices a rewritten one."""

from __future__ import annotations

from devstack.drill import DROPPED, MOCK, DrillSettings, main
from devstack.drill_graph import run_graph_mock

INDEX_LAG_S = 1.0
POLL_S = 0.1
SLOW_S = 0.75


def settings(max_wait_s: float = 8.0) -> DrillSettings:
    return DrillSettings(
        to="sink@example.com",
        count=3,
        dropped=2,
        poll_s=POLL_S,
        max_wait_s=max_wait_s,
        spacing_s=0.2,
        message_id_domain="drill.safesend.localhost",
    )


def test_graph_drill_measures_the_sent_items_lag_and_keeps_the_message_id():
    report = run_graph_mock(settings(), INDEX_LAG_S, progress=lambda line: None)
    assert report["label"] == MOCK and report["provider"] == "graph"
    assert report["mailbox_kind"] == "graph simulator" and report["simulator"]["accepted"] == 5
    rows = report["rows"]
    assert [row["outcome"] for row in rows] == ["accepted"] * 3 + ["cut_after_write"] * 2
    for row in rows:
        assert INDEX_LAG_S - 0.1 <= row["index_lag_s"] <= INDEX_LAG_S + POLL_S + SLOW_S, row
        assert row["history_lag_s"] is not None and row["copies"] == 1
        assert row["message_id_kept"] is True
    summary = report["summary"]
    assert summary["dropped_written"] == 2 and summary["dropped_landed"] == 2
    assert summary["duplicates"] == 0 and summary["message_ids_rewritten"] == 0
    assert summary["message_ids_checked"] == 5


def test_graph_drill_takes_no_202_for_a_kept_message_id_and_sees_a_rewrite_as_unattributed():
    report = run_graph_mock(settings(max_wait_s=2.5), 0.2, rewrite_message_ids=True, progress=lambda line: None)
    rows = report["rows"]
    assert all(row["message_id_kept"] is None and row["index_lag_s"] is None for row in rows)
    summary = report["summary"]
    assert summary["index_lag_s"]["not_seen"] == 5 and summary["unattributed_sent_messages"] == 5
    assert any("none of the drill's" in note for note in report["notes"])
    assert [row["kind"] for row in rows].count(DROPPED) == 2


def test_the_cli_runs_the_graph_mode(tmp_path, capsys):
    code = main(
        [
            "--provider",
            "graph",
            "--mock",
            "--count",
            "1",
            "--dropped",
            "1",
            "--poll-s",
            "0.1",
            "--max-wait-s",
            "5",
            "--spacing-s",
            "0.1",
            "--mock-index-lag",
            "0.3",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    assert list(tmp_path.glob("*.json")) and "MOCK" in capsys.readouterr().out
