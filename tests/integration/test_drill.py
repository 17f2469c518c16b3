"""The live drill (devstack/drill.py), run against the Gmail simulator: the same code as LIVE, labelled MOCK.

The simulator's search-index lag and history lag are set to different known values; the drill must
measure them (within its polling resolution), see that the dropped-response sends landed exactly
once, and notice a rewritten Message-ID.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from devstack.drill import (
    DROPPED,
    MOCK,
    Drill,
    DrillSettings,
    mailbox_kind_for,
    main,
    make_cut_send,
    render_markdown,
    run_mock,
    write_report,
)
from devstack.gmail_sim import GmailSimulator
from safesend.adapters.gmail_mailer import GmailMailer

REPO_ROOT = Path(__file__).resolve().parents[2]
INDEX_LAG_S = 1.2
HISTORY_LAG_S = 0.4
POLL_S = 0.1
SLOW_S = 0.75  # scheduling slack on a loaded CI machine, on top of one poll interval


def within(measured: float | None, lag: float) -> bool:
    """Seen no earlier than the lag (less the send's own answer time) and within a poll or so after it."""
    return measured is not None and lag - 0.1 <= measured <= lag + POLL_S + SLOW_S


def test_drill_measures_the_simulators_lags_and_says_mock(tmp_path):
    settings = DrillSettings(
        to="sink@example.com",
        count=3,
        dropped=2,
        poll_s=POLL_S,
        max_wait_s=8.0,
        spacing_s=0.25,
        message_id_domain="drill.safesend.localhost",
    )
    lines: list[str] = []
    report = run_mock(settings, INDEX_LAG_S, HISTORY_LAG_S, progress=lines.append)

    assert report["label"] == MOCK and report["mailbox_kind"] == "simulator"
    assert report["simulator"] == {"index_lag_s": INDEX_LAG_S, "history_lag_s": HISTORY_LAG_S, "accepted": 5}
    rows = report["rows"]
    assert [row["kind"] for row in rows] == ["answered"] * 3 + ["dropped"] * 2
    for row in rows:
        assert row["written"] and row["outcome"] == ("cut_after_write" if row["kind"] == DROPPED else "accepted")
        assert within(row["index_lag_s"], INDEX_LAG_S), row
        assert within(row["history_lag_s"], HISTORY_LAG_S), row
        # The poll before the hit had not seen it: the lag lies in that window.
        assert row["index_lag_after_s"] < row["index_lag_s"] and row["history_lag_after_s"] < row["history_lag_s"]
        assert row["message_id_kept"] is True and row["stored_message_id"] == row["message_id"]
        assert row["copies"] == 1 and row["gmail_id"]
    summary = report["summary"]
    assert summary["index_lag_s"]["n"] == 5 and summary["history_lag_s"]["n"] == 5
    assert within(summary["index_lag_s"]["p50"], INDEX_LAG_S) and within(summary["index_lag_s"]["max"], INDEX_LAG_S)
    assert within(summary["history_lag_s"]["p90"], HISTORY_LAG_S)
    assert summary["index_lag_s"]["not_seen"] == 0 and summary["history_lag_s"]["not_seen"] == 0
    assert (summary["dropped_written"], summary["dropped_landed"]) == (2, 2)
    assert summary["message_ids_checked"] == 5 and summary["message_ids_rewritten"] == 0
    assert summary["duplicates"] == 0 and summary["unattributed_sent_messages"] == 0
    assert report["quota_units"]["send"] == 500 and report["quota_units"]["profile"] == 1

    json_path, md_path = write_report(report, tmp_path)
    assert json.loads(json_path.read_text())["label"] == "MOCK"
    markdown = md_path.read_text()
    assert markdown.startswith(f"# safesend drill: MOCK, {report['date']}, simulator mailbox")
    assert "say nothing about Gmail" in markdown and "**rewritten: 0**" in markdown
    assert any("in the history after" in line for line in lines)


def test_drill_counts_rewritten_message_ids():
    settings = DrillSettings(
        to="sink@example.com",
        count=2,
        dropped=1,
        poll_s=POLL_S,
        max_wait_s=2.0,
        spacing_s=0.1,
        message_id_domain="drill.safesend.localhost",
    )
    with GmailSimulator(index_lag_s=0.3) as sim:
        sim.set_rewrite_message_ids(True)
        mailer = GmailMailer(api_endpoint=sim.url, send_timeout_s=5.0, read_timeout_s=5.0)
        report = Drill(mailer, settings, MOCK, "simulator", make_cut_send(mailer, None, 0.0, 5.0)).run()
        assert len(sim.effects()) == 3
    summary = report["summary"]
    assert summary["message_ids_rewritten"] == 2
    answered = [row for row in report["rows"] if row["kind"] == "answered"]
    for row in answered:
        assert row["message_id_kept"] is False and row["stored_message_id"].endswith("@mx.google.com>")
        assert within(row["index_lag_s"], 0.3)  # searched by the id Gmail stored
    (dropped,) = [row for row in report["rows"] if row["kind"] == DROPPED]
    # Our id is nowhere: the copy shows only as a SENT message the drill cannot attribute.
    assert dropped["index_lag_s"] is None and dropped["history_lag_s"] is None
    assert summary["unattributed_sent_messages"] == 1 and summary["dropped_landed"] == 0
    assert "REWRITTEN" in render_markdown(report) and report["notes"]


def test_cli_mock_run_writes_json_and_markdown(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "devstack.drill",
            "--mock",
            "--count",
            "1",
            "--dropped",
            "1",
            "--poll-s",
            "0.1",
            "--spacing-s",
            "0.1",
            "--max-wait-s",
            "5",
            "--mock-index-lag",
            "0.3",
            "--mock-history-lag",
            "0.1",
            "--out",
            str(tmp_path),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    (json_file,) = tmp_path.glob("drill-mock-*.json")
    (md_file,) = tmp_path.glob("drill-mock-*.md")
    report = json.loads(json_file.read_text())
    assert report["label"] == "MOCK" and report["summary"]["dropped_landed"] == 1
    assert md_file.read_text().splitlines()[0].startswith("# safesend drill: MOCK, ")
    assert proc.stdout.startswith("# safesend drill: MOCK")


def test_live_mode_needs_a_sink_and_readable_credentials(tmp_path, capsys):
    assert main(["--count", "1"], env={}) == 2
    assert "--to" in capsys.readouterr().err
    env = {"SAFESEND_GMAIL_CREDENTIALS_FILE": str(tmp_path / "missing.json")}
    assert main(["--to", "sink@example.com", "--out", str(tmp_path)], env=env) == 1
    assert "cannot read Gmail credentials file" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # nothing sent, no report
    assert main(["--mock", "--count", "0", "--dropped", "0"], env={}) == 2


@pytest.mark.parametrize(
    "address, delegated, forced, kind",
    [
        ("ann@gmail.com", None, "auto", "consumer"),
        ("ann@googlemail.com", None, "auto", "consumer"),
        ("support@example.com", None, "auto", "Workspace"),
        ("ann@gmail.com", "support@example.com", "auto", "Workspace"),
        ("support@example.com", None, "consumer", "consumer"),
    ],
)
def test_mailbox_kind(address, delegated, forced, kind):
    assert mailbox_kind_for(address, delegated, forced) == kind
