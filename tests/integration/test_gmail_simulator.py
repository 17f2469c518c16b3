"""The Gmail simulator must look like Gmail to the real google-api-python-client (real sockets, no mocks)."""

from __future__ import annotations

import base64
import hashlib
import http.client
import io
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from googleapiclient.errors import HttpError
from googleapiclient.http import MediaIoBaseUpload

from devstack.gmail_sim import GmailSimulator, is_strict_message_id
from tests.integration.json_control import json_call
from tests.integration.process_io import read_line_bounded

REPO_ROOT = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------------- fixtures / helpers
@pytest.fixture
def gmail(sim: GmailSimulator, make_client: Callable[..., Any]) -> Any:
    return make_client(sim.url).users().messages()


def make_raw(message_id: str | None, to: str | None = "rcpt@example.com", subject: str = "hello") -> bytes:
    lines = ["From: sender@example.com"]
    if to is not None:
        lines.append(f"To: {to}")
    lines.append(f"Subject: {subject}")
    if message_id is not None:
        lines.append(f"Message-ID: {message_id}")
    lines += ["MIME-Version: 1.0", "Content-Type: text/plain; charset=utf-8", "", "body text", ""]
    return "\r\n".join(lines).encode("utf-8")


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")  # Gmail accepts unpadded


def send(gmail: Any, raw: bytes) -> dict:
    return gmail.send(userId="me", body={"raw": b64(raw)}).execute()


def search(gmail: Any, message_id: str) -> dict:
    return gmail.list(userId="me", q=f"rfc822msgid:{message_id}", includeSpamTrash=True, labelIds=["SENT"]).execute()


def header_map(message: dict) -> dict[str, str]:
    return {h["name"].lower(): h["value"] for h in message["payload"]["headers"]}


# ----------------------------------------------------------------------------- send / list / get
def test_send_then_search_by_rfc822msgid_finds_exactly_one_sent(sim: GmailSimulator, gmail: Any) -> None:
    raw = make_raw("<retry-key.1@safesend.test>")
    sent = send(gmail, raw)
    assert sent["labelIds"] == ["SENT"]
    assert len(sent["id"]) == 16 and all(c in "0123456789abcdef" for c in sent["id"])
    assert sent["threadId"] == sent["id"]

    for query_id in ("<retry-key.1@safesend.test>", "retry-key.1@safesend.test"):
        found = gmail.list(userId="me", q=f"rfc822msgid:{query_id}", includeSpamTrash=True, labelIds=["SENT"]).execute()
        assert found["messages"] == [{"id": sent["id"], "threadId": sent["threadId"]}]
        assert found["resultSizeEstimate"] == 1

    minimal = gmail.get(userId="me", id=sent["id"], format="minimal").execute()
    assert "SENT" in minimal["labelIds"] and "payload" not in minimal
    assert minimal["internalDate"].isdigit()

    (effect,) = sim.effects()
    assert effect["gmail_id"] == sent["id"]
    assert effect["message_id"] == "<retry-key.1@safesend.test>"
    assert effect["original_message_id"] is None
    assert effect["raw_sha256"] == hashlib.sha256(raw).hexdigest()
    assert effect["to"] == "rcpt@example.com" and effect["subject"] == "hello" and effect["user"] == "me"


def test_index_lag_hides_fresh_message_from_search_until_lag_passes(sim: GmailSimulator, gmail: Any) -> None:
    sim.set_index_lag(0.5)
    sent = send(gmail, make_raw("<lag.1@safesend.test>"))
    started = time.monotonic()
    assert search(gmail, "<lag.1@safesend.test>") == {"resultSizeEstimate": 0}
    # Label listing (no q=) is not subject to the search-index lag.
    assert [m["id"] for m in gmail.list(userId="me", labelIds=["SENT"]).execute()["messages"]] == [sent["id"]]

    found: dict = {}
    for _ in range(40):  # bounded poll: 40 x 0.1 s
        found = search(gmail, "<lag.1@safesend.test>")
        if found.get("messages"):
            break
        time.sleep(0.1)
    assert [m["id"] for m in found["messages"]] == [sent["id"]]
    assert time.monotonic() - started >= 0.4


def test_metadata_get_returns_the_message_id_we_set(gmail: Any) -> None:
    sent = send(gmail, make_raw("<meta.1@safesend.test>"))
    got = gmail.get(userId="me", id=sent["id"], format="metadata", metadataHeaders=["Message-ID"]).execute()
    assert got["payload"]["headers"] == [{"name": "Message-ID", "value": "<meta.1@safesend.test>"}]
    # metadataHeaders matching is case-insensitive; no filter returns all headers.
    got = gmail.get(userId="me", id=sent["id"], format="metadata", metadataHeaders=["message-id", "SUBJECT"]).execute()
    assert header_map(got) == {"message-id": "<meta.1@safesend.test>", "subject": "hello"}
    everything = header_map(gmail.get(userId="me", id=sent["id"], format="metadata").execute())
    assert everything["to"] == "rcpt@example.com"


@pytest.mark.parametrize(
    "bad_id",
    ["<has space@safesend.test>", "no-brackets@safesend.test", "<a..b@safesend.test>", "<a@[10.0.0.1]>", "<noat>"],
)
def test_malformed_message_id_is_rewritten_and_original_kept(sim: GmailSimulator, gmail: Any, bad_id: str) -> None:
    assert not is_strict_message_id(bad_id)
    sent = send(gmail, make_raw(bad_id))
    got = gmail.get(
        userId="me",
        id=sent["id"],
        format="metadata",
        metadataHeaders=["Message-ID", "X-Google-Original-Message-ID"],
    ).execute()
    headers = header_map(got)
    assert headers["message-id"] != bad_id
    assert headers["message-id"].endswith("@mx.google.com>") and is_strict_message_id(headers["message-id"])
    assert headers["x-google-original-message-id"] == bad_id
    (effect,) = sim.effects()
    assert (effect["message_id"], effect["original_message_id"]) == (headers["message-id"], bad_id)
    # Search sees the id Gmail stored, not the one the sender chose.
    assert search(gmail, headers["message-id"])["resultSizeEstimate"] == 1
    # The raw message carries exactly one Message-ID header.
    raw = base64.urlsafe_b64decode(gmail.get(userId="me", id=sent["id"], format="raw").execute()["raw"])
    assert raw.lower().count(b"\nmessage-id:") + raw.lower().startswith(b"message-id:") == 1


def test_missing_message_id_is_assigned(sim: GmailSimulator, gmail: Any) -> None:
    sent = send(gmail, make_raw(None))
    headers = header_map(gmail.get(userId="me", id=sent["id"], format="metadata").execute())
    assert headers["message-id"].endswith("@mx.google.com>")
    assert "x-google-original-message-id" not in headers
    assert sim.effects()[0]["original_message_id"] is None


def test_valid_message_id_is_kept_byte_for_byte(gmail: Any) -> None:
    raw = make_raw("<CAF+x=y_z.!#$%&'*/?^`{|}~-1@mail.example.co.uk>")
    sent = send(gmail, raw)
    full = gmail.get(userId="me", id=sent["id"], format="raw").execute()
    assert base64.urlsafe_b64decode(full["raw"]) == raw


def test_missing_recipient_is_400_and_accepts_nothing(sim: GmailSimulator, gmail: Any) -> None:
    with pytest.raises(HttpError) as info:
        send(gmail, make_raw("<norcpt@safesend.test>", to=None))
    assert info.value.status_code == 400
    assert info.value.reason == "Recipient address required"
    assert info.value.error_details[0]["reason"] == "invalidArgument"
    assert sim.effects() == []


def test_undecodable_raw_is_400(sim: GmailSimulator, gmail: Any) -> None:
    with pytest.raises(HttpError) as info:
        gmail.send(userId="me", body={"raw": "not*base64!"}).execute()
    assert info.value.status_code == 400
    assert "Invalid value for ByteString" in info.value.reason
    body = json.loads(info.value.content)
    assert body["error"]["status"] == "INVALID_ARGUMENT"
    assert sim.effects() == []


@pytest.mark.parametrize(
    ("status", "reason", "expected_reason", "expected_status_name"),
    [
        (429, None, "rateLimitExceeded", "RESOURCE_EXHAUSTED"),
        (403, "userRateLimitExceeded", "userRateLimitExceeded", "PERMISSION_DENIED"),
        (500, None, "backendError", "INTERNAL"),
        (503, None, "backendError", "UNAVAILABLE"),
        (401, None, "authError", "UNAUTHENTICATED"),
    ],
)
def test_injected_errors_surface_as_http_error_and_accept_nothing(
    sim: GmailSimulator, gmail: Any, status: int, reason: str | None, expected_reason: str, expected_status_name: str
) -> None:
    sim.inject_errors(status, count=2, reason=reason)
    for _ in range(2):
        with pytest.raises(HttpError) as info:
            send(gmail, make_raw("<inject@safesend.test>"))
        err = info.value
        assert err.status_code == status
        assert err.error_details[0]["reason"] == expected_reason  # googleapiclient exposes errors[] here
        body = json.loads(err.content)["error"]
        assert (body["code"], body["status"]) == (status, expected_status_name)
        assert body["errors"][0]["domain"] == "global"
        assert err.reason == body["message"]  # HttpError.reason is the *message*, not errors[].reason
    assert sim.effects() == []
    send(gmail, make_raw("<inject@safesend.test>"))  # errors used up: next send is accepted
    assert len(sim.effects()) == 1


def test_unknown_id_is_404_not_found(gmail: Any) -> None:
    with pytest.raises(HttpError) as info:
        gmail.get(userId="me", id="00000000deadbeef").execute()
    assert info.value.status_code == 404
    assert info.value.reason == "Requested entity was not found."
    assert info.value.error_details[0]["reason"] == "notFound"


def test_unsupported_query_term_is_400(gmail: Any) -> None:
    with pytest.raises(HttpError) as info:
        gmail.list(userId="me", q="from:someone@example.com").execute()
    assert info.value.status_code == 400


def test_spam_and_trash_hidden_unless_include_spam_trash(sim: GmailSimulator, gmail: Any) -> None:
    trashed = sim.insert_message(make_raw("<trash.1@safesend.test>"), label_ids=("SENT", "TRASH"))
    q = "rfc822msgid:<trash.1@safesend.test>"
    assert gmail.list(userId="me", q=q).execute() == {"resultSizeEstimate": 0}
    assert gmail.list(userId="me", q=q, includeSpamTrash=False).execute() == {"resultSizeEstimate": 0}
    shown = gmail.list(userId="me", q=q, includeSpamTrash=True).execute()
    assert [m["id"] for m in shown["messages"]] == [trashed]
    # labelIds must all be present on the message.
    assert gmail.list(userId="me", q=q, includeSpamTrash=True, labelIds=["SENT", "INBOX"]).execute() == {
        "resultSizeEstimate": 0
    }
    assert sim.effects()[0]["gmail_id"] == trashed


def test_empty_list_has_no_messages_key(gmail: Any) -> None:
    assert gmail.list(userId="me").execute() == {"resultSizeEstimate": 0}
    assert search(gmail, "<nothing@safesend.test>") == {"resultSizeEstimate": 0}


def test_duplicates_are_all_found_and_pagination_is_bounded(sim: GmailSimulator, gmail: Any) -> None:
    raw = make_raw("<dup@safesend.test>")
    ids = [sim.insert_message(raw) for _ in range(3)]
    assert search(gmail, "<dup@safesend.test>")["resultSizeEstimate"] == 3
    page1 = gmail.list(userId="me", maxResults=2).execute()
    assert len(page1["messages"]) == 2 and page1["nextPageToken"]
    page2 = gmail.list(userId="me", maxResults=2, pageToken=page1["nextPageToken"]).execute()
    assert "nextPageToken" not in page2
    listed = [m["id"] for m in page1["messages"] + page2["messages"]]
    assert listed == list(reversed(ids))  # newest first, like Gmail


@pytest.mark.parametrize("metadata", [None, {}], ids=["uploadType=media", "uploadType=multipart"])
def test_upload_path_with_media_body(sim: GmailSimulator, gmail: Any, metadata: dict | None) -> None:
    raw = make_raw("<upload.1@safesend.test>")
    media = MediaIoBaseUpload(io.BytesIO(raw), mimetype="message/rfc822")
    req = gmail.send(userId="me", body=metadata, media_body=media)
    # googleapiclient 2.202 keeps the discovery doc's https scheme for /upload/ URLs and only swaps the
    # netloc for api_endpoint, so a plain-http endpoint needs the scheme fixed by hand.
    assert req.uri.startswith(f"https://127.0.0.1:{sim.port}/upload/gmail/v1/users/me/messages/send?")
    req.uri = "http://" + req.uri[len("https://") :]
    expected_type = "media" if metadata is None else "multipart"
    assert f"uploadType={expected_type}" in req.uri
    sent = req.execute()
    assert sent["labelIds"] == ["SENT"]
    (effect,) = sim.effects()
    assert effect["source"] == f"upload-{expected_type}"
    assert effect["raw_sha256"] == hashlib.sha256(raw).hexdigest()  # the multipart split is byte-exact
    assert search(gmail, "<upload.1@safesend.test>")["messages"][0]["id"] == sent["id"]


def test_effects_path_gets_one_json_line_per_accepted_message(tmp_path: Path, make_client: Callable[..., Any]) -> None:
    log = tmp_path / "effects.jsonl"
    with GmailSimulator(effects_path=str(log)) as simulator:
        gmail = make_client(simulator.url).users().messages()
        first = send(gmail, make_raw("<log.1@safesend.test>"))
        simulator.inject_errors(500)
        with pytest.raises(HttpError):
            send(gmail, make_raw("<log.2@safesend.test>"))
        inserted = simulator.insert_message(make_raw("<log.3@safesend.test>"))
        lines = [json.loads(line) for line in log.read_text().splitlines()]
        assert [line["gmail_id"] for line in lines] == [first["id"], inserted]
        assert lines == simulator.effects()
        simulator.reset()
        assert log.read_text() == "" and simulator.effects() == []


def test_http_control_endpoints(sim: GmailSimulator, gmail: Any) -> None:
    raw = b64(make_raw("<ctl.1@safesend.test>"))
    status, body = json_call(sim.url, "POST", "/_sim/messages", {"raw": raw, "labelIds": ["SENT"]})
    assert status == 200
    inserted = body["id"]
    status, body = json_call(sim.url, "GET", "/_sim/effects")
    assert status == 200 and [e["gmail_id"] for e in body["effects"]] == [inserted]

    injected = {"status": 429, "count": 1, "reason": "rateLimitExceeded"}
    assert json_call(sim.url, "POST", "/_sim/inject-errors", injected)[0] == 200
    with pytest.raises(HttpError) as info:
        send(gmail, make_raw("<ctl.2@safesend.test>"))
    assert info.value.status_code == 429

    assert json_call(sim.url, "POST", "/_sim/config", {"index_lag_s": 30})[0] == 200
    send(gmail, make_raw("<ctl.3@safesend.test>"))
    assert search(gmail, "<ctl.3@safesend.test>") == {"resultSizeEstimate": 0}
    assert json_call(sim.url, "POST", "/_sim/config", {"index_lag_s": 0})[0] == 200
    assert search(gmail, "<ctl.3@safesend.test>")["resultSizeEstimate"] == 1

    assert json_call(sim.url, "POST", "/_sim/reset")[0] == 200
    assert json_call(sim.url, "GET", "/_sim/effects")[1] == {"effects": []}
    assert json_call(sim.url, "POST", "/_sim/inject-errors", {"status": 200})[0] == 400
    status, body = json_call(sim.url, "GET", "/no/such/path")
    assert status == 404 and body["error"]["status"] == "NOT_FOUND"


def test_keep_alive_connection_is_reused(sim: GmailSimulator) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=5)
    try:
        for _ in range(3):
            conn.request("GET", "/gmail/v1/users/me/messages?alt=json")
            resp = conn.getresponse()
            assert resp.status == 200 and resp.getheader("Content-Length")
            resp.read()
            assert not resp.will_close
    finally:
        conn.close()


def test_bind_refuses_non_loopback() -> None:
    for host in ("0.0.0.0", "localhost", "::1"):
        with pytest.raises(ValueError):
            GmailSimulator(host=host)


def test_stop_closes_port_and_joins_threads(make_client: Callable[..., Any]) -> None:
    simulator = GmailSimulator().start()
    port = simulator.port
    gmail = make_client(simulator.url).users().messages()
    send(gmail, make_raw("<stop@safesend.test>"))  # leaves a keep-alive connection open
    started = time.monotonic()
    simulator.stop()
    assert time.monotonic() - started < 3.0
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    assert not [t for t in threading.enumerate() if t.name.startswith("gmail-sim") and t.is_alive()]


def test_cli_subprocess_serves_and_stops_on_sigterm(tmp_path: Path, make_client: Callable[..., Any]) -> None:
    log = tmp_path / "cli-effects.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "devstack.gmail_sim", "--port", "0", "--index-lag", "0", "--effects-log", str(log)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        line = read_line_bounded(proc, timeout=20)
        assert line.startswith("gmail-sim listening on http://127.0.0.1:"), line
        url = line.rsplit(" ", 1)[1]
        gmail = make_client(url).users().messages()
        sent = send(gmail, make_raw("<cli.1@safesend.test>"))
        assert search(gmail, "<cli.1@safesend.test>")["messages"][0]["id"] == sent["id"]
        assert json.loads(log.read_text().splitlines()[0])["gmail_id"] == sent["id"]
        assert [e["gmail_id"] for e in json_call(url, "GET", "/_sim/effects")[1]["effects"]] == [sent["id"]]
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


# ----------------------------------------------------------------------------- profile and change log
def history(client: Any, start: Any, **params: Any) -> dict:
    return client.users().history().list(userId="me", startHistoryId=str(start), **params).execute()


def added_ids(answer: dict) -> list[str]:
    return [a["message"]["id"] for record in answer.get("history", []) for a in record.get("messagesAdded", [])]


@pytest.fixture
def client(sim: GmailSimulator, make_client: Callable[..., Any]) -> Any:
    return make_client(sim.url)


def test_get_profile_reports_the_current_history_id(sim: GmailSimulator, client: Any) -> None:
    profile = client.users().getProfile(userId="me").execute()
    assert profile == {
        "emailAddress": "sim-mailbox@safesend.localhost",
        "messagesTotal": 0,
        "threadsTotal": 0,
        "historyId": str(sim.current_history_id),
    }
    assert client.users().getProfile(userId="ann@example.com").execute()["emailAddress"] == "ann@example.com"
    ids = []
    for i in range(10):
        sent = send(client.users().messages(), make_raw(f"<prof.{i}@safesend.test>"))
        got = client.users().messages().get(userId="me", id=sent["id"], format="minimal").execute()
        now = client.users().getProfile(userId="me").execute()
        assert got["historyId"] == now["historyId"]  # the message's own change is the newest
        ids.append(int(now["historyId"]))
    assert ids == sorted(set(ids)) and ids[0] > int(profile["historyId"])
    assert any(b - a > 1 for a, b in itertools.pairwise(ids))  # "not contiguous", like Gmail's
    assert client.users().getProfile(userId="me").execute()["messagesTotal"] == 10


def test_history_lists_messages_added_oldest_first_with_labels(sim: GmailSimulator, client: Any) -> None:
    start = client.users().getProfile(userId="me").execute()["historyId"]
    assert history(client, start) == {"historyId": start}  # nothing yet: no `history` key, as Gmail
    sent = [send(client.users().messages(), make_raw(f"<h.{i}@safesend.test>")) for i in range(3)]
    answer = history(client, start, historyTypes=["messageAdded"], labelId="SENT")
    assert answer["historyId"] == str(sim.current_history_id) and "nextPageToken" not in answer
    records = answer["history"]
    assert added_ids(answer) == [s["id"] for s in sent]
    assert [int(r["id"]) for r in records] == sorted(int(r["id"]) for r in records)
    first = records[0]
    assert first["messages"] == [{"id": sent[0]["id"], "threadId": sent[0]["threadId"]}]
    assert first["messagesAdded"] == [
        {"message": {"id": sent[0]["id"], "threadId": sent[0]["threadId"], "labelIds": ["SENT"]}}
    ]
    # startHistoryId is exclusive: from the first record's id on, only the later two.
    assert added_ids(history(client, first["id"])) == [s["id"] for s in sent[1:]]
    assert history(client, answer["historyId"]) == {"historyId": answer["historyId"]}


def test_history_pages_by_max_results_and_a_stable_page_token(sim: GmailSimulator, client: Any) -> None:
    start = sim.current_history_id
    ids = [sim.insert_message(make_raw(f"<page.{i}@safesend.test>")) for i in range(5)]
    page1 = history(client, start, maxResults=2)
    assert added_ids(page1) == ids[:2] and page1["nextPageToken"]
    late = sim.insert_message(make_raw("<page.late@safesend.test>"))  # arrives while paging
    page2 = history(client, start, maxResults=2, pageToken=page1["nextPageToken"])
    page3 = history(client, start, maxResults=2, pageToken=page2["nextPageToken"])
    assert added_ids(page2) == ids[2:4] and added_ids(page3) == [ids[4], late]
    assert "nextPageToken" not in page3
    with pytest.raises(HttpError) as info:
        history(client, start, pageToken="garbage")
    assert info.value.status_code == 400
    with pytest.raises(HttpError) as info:
        history(client, start, maxResults=501)  # Gmail's documented maximum is 500
    assert info.value.status_code == 400


def test_history_filters_by_label_and_type_and_records_label_changes(sim: GmailSimulator, client: Any) -> None:
    start = sim.current_history_id
    sent = sim.insert_message(make_raw("<f.sent@safesend.test>"))
    inbox = sim.insert_message(make_raw("<f.inbox@safesend.test>"), label_ids=("INBOX", "UNREAD"))
    assert sim.modify_labels(sent, add=["STARRED"]) == ["SENT", "STARRED"]
    assert sim.modify_labels(inbox, remove=["UNREAD"]) == ["INBOX"]
    sim.delete_message(inbox)

    everything = history(client, start)["history"]
    kinds = [
        next(k for k in ("messagesAdded", "labelsAdded", "labelsRemoved", "messagesDeleted") if k in r)
        for r in everything
    ]
    assert kinds == ["messagesAdded", "messagesAdded", "labelsAdded", "labelsRemoved", "messagesDeleted"]
    assert everything[2]["labelsAdded"] == [
        {"message": {"id": sent, "threadId": sent, "labelIds": ["SENT", "STARRED"]}, "labelIds": ["STARRED"]}
    ]
    assert everything[4]["messagesDeleted"] == [{"message": {"id": inbox, "threadId": inbox}}]
    got = client.users().messages().get(userId="me", id=sent, format="minimal").execute()
    assert got["historyId"] == everything[2]["id"]  # the last change that touched the message

    assert added_ids(history(client, start, labelId="SENT", historyTypes=["messageAdded"])) == [sent]
    assert [r["id"] for r in history(client, start, labelId="SENT")["history"]] == [
        everything[0]["id"],
        everything[2]["id"],
    ]
    assert [r["id"] for r in history(client, start, labelId="UNREAD")["history"]] == [
        everything[1]["id"],
        everything[3]["id"],
    ]  # the removal names the label it removed
    removed = history(client, start, historyTypes=["labelRemoved", "messageDeleted"])["history"]
    assert [r["id"] for r in removed] == [everything[3]["id"], everything[4]["id"]]
    status, body = json_call(sim.url, "GET", f"/gmail/v1/users/me/history?startHistoryId={start}&historyTypes=bogus")
    assert status == 400 and body["error"]["status"] == "INVALID_ARGUMENT"
    status, body = json_call(sim.url, "GET", "/gmail/v1/users/me/history")
    assert status == 400  # startHistoryId is required


def test_history_lag_is_independent_of_the_index_lag(sim: GmailSimulator, client: Any) -> None:
    gmail = client.users().messages()
    start = sim.current_history_id
    sim.set_history_lag(0.6)
    sent = send(gmail, make_raw("<hl.1@safesend.test>"))
    started = time.monotonic()
    assert search(gmail, "<hl.1@safesend.test>")["resultSizeEstimate"] == 1  # index lag 0: searchable
    hidden = history(client, start)
    assert "history" not in hidden
    assert hidden["historyId"] == str(sim.current_history_id)  # the current id counts the hidden change
    seen: dict = {}
    for _ in range(40):  # bounded poll: 40 x 0.05 s after the lag
        seen = history(client, start)
        if seen.get("history"):
            break
        time.sleep(0.05)
    assert added_ids(seen) == [sent["id"]] and time.monotonic() - started >= 0.5

    sim.set_history_lag(0)
    sim.set_index_lag(30)
    later = send(gmail, make_raw("<hl.2@safesend.test>"))
    assert added_ids(history(client, start)) == [sent["id"], later["id"]]  # history at once ...
    assert search(gmail, "<hl.2@safesend.test>") == {"resultSizeEstimate": 0}  # ... search not yet


def test_a_start_history_id_beyond_the_retention_is_404(sim: GmailSimulator, client: Any) -> None:
    start = sim.current_history_id
    ids = [sim.insert_message(make_raw(f"<ret.{i}@safesend.test>")) for i in range(4)]
    records = history(client, start)["history"]
    sim.set_history_retention(max_records=2)
    with pytest.raises(HttpError) as info:
        history(client, start)
    err = info.value
    assert err.status_code == 404 and err.error_details[0]["reason"] == "notFound"
    assert json.loads(err.content)["error"]["status"] == "NOT_FOUND"
    # From the newest change dropped on, nothing is missing: valid again.
    assert added_ids(history(client, records[1]["id"])) == ids[2:]
    with pytest.raises(HttpError) as info:  # newer than the mailbox: invalid too
        history(client, sim.current_history_id + 1)
    assert info.value.status_code == 404
    assert history(client, sim.current_history_id) == {"historyId": str(sim.current_history_id)}
    checkpoint = sim.current_history_id
    sim.reset()  # a fresh mailbox: ids keep growing, old checkpoints are gone
    with pytest.raises(HttpError):
        history(client, checkpoint - 1)
    assert history(client, checkpoint) == {"historyId": str(checkpoint)}


def test_history_retention_by_age(make_client: Callable[..., Any]) -> None:
    now = [1_800_000_000.0]
    with GmailSimulator(clock=lambda: now[0]) as simulator:
        client = make_client(simulator.url)
        start = simulator.current_history_id
        old = simulator.insert_message(make_raw("<age.old@safesend.test>"))
        after_old = simulator.current_history_id
        now[0] += 100
        new = simulator.insert_message(make_raw("<age.new@safesend.test>"))
        simulator.set_history_retention(max_records=None, max_age_s=50)
        with pytest.raises(HttpError) as info:
            history(client, start)
        assert info.value.status_code == 404
        assert added_ids(history(client, after_old)) == [new]
        now[0] += 60  # the newer change ages out too
        with pytest.raises(HttpError):
            history(client, after_old)
        assert history(client, simulator.current_history_id)["historyId"] == str(simulator.current_history_id)
        assert old != new


def test_history_and_profile_controls_over_http(sim: GmailSimulator, client: Any) -> None:
    start = sim.current_history_id
    assert json_call(sim.url, "POST", "/_sim/config", {"history_lag_s": 30})[0] == 200
    assert sim.history_lag_s == 30
    gmail_id = json_call(sim.url, "POST", "/_sim/messages", {"raw": b64(make_raw("<hc.1@safesend.test>"))})[1]["id"]
    assert "history" not in history(client, start)
    status, body = json_call(sim.url, "GET", "/_sim/history")  # the log as kept, lag ignored
    assert status == 200 and [r["messagesAdded"][0]["message"]["id"] for r in body["history"]] == [gmail_id]
    assert json_call(sim.url, "POST", "/_sim/config", {"history_lag_s": 0})[0] == 200
    status, body = json_call(sim.url, "POST", "/_sim/labels", {"id": gmail_id, "add": ["IMPORTANT"]})
    assert status == 200 and body["labelIds"] == ["SENT", "IMPORTANT"]
    assert json_call(sim.url, "POST", "/_sim/delete", {"id": gmail_id})[0] == 200
    assert json_call(sim.url, "POST", "/_sim/delete", {"id": gmail_id})[0] == 400  # gone
    assert len(history(client, start)["history"]) == 3
    assert json_call(sim.url, "POST", "/_sim/config", {"history_max_records": 1})[0] == 200
    with pytest.raises(HttpError):
        history(client, start)
    assert json_call(sim.url, "POST", "/_sim/config", {"history_max_records": -1})[0] == 400
    assert json_call(sim.url, "POST", "/_sim/config", {"history_lag_s": -1})[0] == 400


def test_rewrite_every_message_id_knob(sim: GmailSimulator, gmail: Any) -> None:
    sim.set_rewrite_message_ids(True)
    sent = send(gmail, make_raw("<valid.1@safesend.test>"))
    headers = header_map(
        gmail.get(
            userId="me",
            id=sent["id"],
            format="metadata",
            metadataHeaders=["Message-ID", "X-Google-Original-Message-ID"],
        ).execute()
    )
    assert headers["message-id"].endswith("@mx.google.com>")
    assert headers["x-google-original-message-id"] == "<valid.1@safesend.test>"
    assert search(gmail, "<valid.1@safesend.test>") == {"resultSizeEstimate": 0}
    assert json_call(sim.url, "POST", "/_sim/config", {"rewrite_message_ids": False})[0] == 200
    kept = send(gmail, make_raw("<valid.2@safesend.test>"))
    assert search(gmail, "<valid.2@safesend.test>")["messages"][0]["id"] == kept["id"]


# ----------------------------------------------------------------------------- Gmail's limits, mailboxes
T_LIMITS = 1_800_000_000.0  # a fixed clock: only advance_clock (POST /_sim/clock) moves it


@pytest.fixture
def limited(make_client: Callable[..., Any]) -> Iterator[tuple[GmailSimulator, Any]]:
    with GmailSimulator(clock=lambda: T_LIMITS) as simulator:
        yield simulator, make_client(simulator.url).users().messages()


def refusal(call: Callable[[], Any]) -> tuple[int, dict]:
    """Run a client call that must be refused; (status, the error object of Gmail's body)."""
    with pytest.raises(HttpError) as info:
        call()
    return info.value.status_code, json.loads(info.value.content)["error"]


def advance(sim: GmailSimulator, seconds: float) -> float:
    status, body = json_call(sim.url, "POST", "/_sim/clock", {"advance_s": seconds})
    assert status == 200
    return float(body["now"])


def to_many(count: int) -> str:
    return ", ".join(f"r{i}@example.com" for i in range(count))


def test_default_config_enforces_no_limit(limited: tuple[GmailSimulator, Any]) -> None:
    sim, gmail = limited
    for i in range(70):  # 7,000 units inside one minute: over Gmail's 6,000, the simulator's default allows it
        send(gmail, make_raw(f"<nolimit.{i}@safesend.test>", to=to_many(3 if i else 150)))
    usage = sim.usage()["sim-mailbox@safesend.localhost"]
    assert usage["units_in_window"] == 7000 and usage["messages_today"] == 70 and usage["refused"] == {}


def test_units_per_minute_is_a_moving_window_refused_with_gmails_quota_error(
    limited: tuple[GmailSimulator, Any],
) -> None:
    sim, gmail = limited
    assert json_call(sim.url, "POST", "/_sim/config", {"units_per_window": 250})[0] == 200
    send(gmail, make_raw("<rate.1@safesend.test>"))  # 100 units at t=0
    advance(sim, 30)
    send(gmail, make_raw("<rate.2@safesend.test>"))  # 200 at t=30
    search(gmail, "<rate.1@safesend.test>")  # 205
    status, error = refusal(lambda: send(gmail, make_raw("<rate.3@safesend.test>")))
    assert status == 429 and error["status"] == "RESOURCE_EXHAUSTED"
    assert error["errors"] == [{"message": error["message"], "domain": "usageLimits", "reason": "rateLimitExceeded"}]
    assert error["message"].startswith(
        "Quota exceeded for quota metric 'Queries' and limit 'Queries per minute per user'"
    )
    assert len(sim.effects()) == 2  # refused: nothing accepted, and no units spent
    advance(sim, 30)  # t=60: the first send leaves the window, the second and the list stay (105 units)
    send(gmail, make_raw("<rate.3@safesend.test>"))
    status, _ = refusal(lambda: send(gmail, make_raw("<rate.4@safesend.test>")))
    assert status == 429
    assert sim.usage()["sim-mailbox@safesend.localhost"]["units_in_window"] == 205
    assert sim.usage()["sim-mailbox@safesend.localhost"]["refused"] == {"rate": 2}


def test_each_method_costs_its_documented_units(limited: tuple[GmailSimulator, Any], make_client: Callable) -> None:
    sim, gmail = limited
    users = make_client(sim.url).users()
    sim.set_limits(units_per_window=113, rate_limit_status=403, rate_limit_reason="userRateLimitExceeded")
    sent = send(gmail, make_raw("<cost.1@safesend.test>"))  # send 100
    users.getProfile(userId="me").execute()  # getProfile 1
    users.history().list(userId="me", startHistoryId=str(sim.current_history_id)).execute()  # history.list 2
    gmail.list(userId="me", labelIds=["SENT"]).execute()  # list 5
    gmail.get(userId="me", id=sent["id"], format="minimal").execute()  # get 5: 113
    status, error = refusal(lambda: users.getProfile(userId="me").execute())  # even 1 more unit is refused
    assert status == 403 and error["status"] == "PERMISSION_DENIED"
    assert (error["errors"][0]["reason"], error["errors"][0]["domain"]) == ("userRateLimitExceeded", "usageLimits")
    assert sim.usage()["sim-mailbox@safesend.localhost"]["units_in_window"] == 113


def test_daily_message_limit_is_a_rolling_24_hours_refused_with_the_mail_sending_error(
    limited: tuple[GmailSimulator, Any],
) -> None:
    sim, gmail = limited
    assert json_call(sim.url, "POST", "/_sim/config", {"messages_per_day": 3})[0] == 200
    for i in range(3):  # at t = 0 h, 1 h, 2 h
        send(gmail, make_raw(f"<day.{i}@safesend.test>"))
        advance(sim, 3600)
    status, error = refusal(lambda: send(gmail, make_raw("<day.3@safesend.test>")))  # t = 3 h
    first_free = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(T_LIMITS + 86400))
    assert status == 429 and error["status"] == "RESOURCE_EXHAUSTED"
    assert error["message"] == f"User-rate limit exceeded.  Retry after {first_free} (Mail sending)"
    assert error["errors"][0]["reason"] == "rateLimitExceeded" and error["errors"][0]["domain"] == "usageLimits"
    assert len(sim.effects()) == 3
    advance(sim, 21 * 3600 - 1)  # one second before the first send is 24 h old: still refused
    assert refusal(lambda: send(gmail, make_raw("<day.3@safesend.test>")))[0] == 429
    advance(sim, 1)  # rolling, not a fixed time of day: the first send left the window
    send(gmail, make_raw("<day.3@safesend.test>"))
    assert refusal(lambda: send(gmail, make_raw("<day.4@safesend.test>")))[0] == 429
    assert sim.usage()["sim-mailbox@safesend.localhost"]["refused"] == {"daily": 3}


def test_daily_recipient_limit_and_recipients_per_message(limited: tuple[GmailSimulator, Any]) -> None:
    sim, gmail = limited
    assert json_call(sim.url, "POST", "/_sim/config", {"limits": "workspace", "recipients_per_day": 150})[0] == 200
    assert sim.usage()["sim-mailbox@safesend.localhost"]["limits"]["messages_per_day"] == 2000
    status, error = refusal(lambda: send(gmail, make_raw("<rcpt.0@safesend.test>", to=to_many(101))))
    assert status == 400 and error["errors"][0]["reason"] == "invalidArgument"
    send(gmail, make_raw("<rcpt.1@safesend.test>", to=to_many(100)))  # 100 is allowed
    status, error = refusal(lambda: send(gmail, make_raw("<rcpt.2@safesend.test>", to=to_many(51))))
    assert status == 429 and error["message"].endswith("(Mail sending)")  # 151 recipients today > 150
    send(gmail, make_raw("<rcpt.3@safesend.test>", to=to_many(50)))  # exactly 150
    assert [e["message_id"] for e in sim.effects()] == ["<rcpt.1@safesend.test>", "<rcpt.3@safesend.test>"]


def test_a_concurrent_burst_never_passes_the_daily_limit(limited: tuple[GmailSimulator, Any]) -> None:
    sim, _ = limited
    sim.set_limits(messages_per_day=10)
    port = sim.port
    outcomes: list[int] = []

    def one(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            body = json.dumps({"raw": b64(make_raw(f"<burst.{i}@safesend.test>"))})
            conn.request("POST", "/gmail/v1/users/me/messages/send", body=body)
            resp = conn.getresponse()
            resp.read()
            outcomes.append(resp.status)
        finally:
            conn.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(24)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(15)
    assert sorted(outcomes) == [200] * 10 + [429] * 14
    assert len(sim.effects()) == 10


def test_limit_settings_are_checked(limited: tuple[GmailSimulator, Any]) -> None:
    sim, _ = limited
    for bad in (
        {"units_per_window": -1},
        {"units_per_window": 1.5},
        {"window_s": 0},
        {"rate_limit_status": 500},
        {"rate_limit_reason": "backendError"},
        {"limits": "unlimited-please"},
        {"mailbox": "nobody@example.com", "messages_per_day": 1},
        {"mailboxes": ["not-an-address"]},
    ):
        assert json_call(sim.url, "POST", "/_sim/config", bad)[0] == 400, bad
    assert json_call(sim.url, "POST", "/_sim/clock", {"advance_s": -1})[0] == 400
    assert sim.usage()["sim-mailbox@safesend.localhost"]["limits"]["units_per_window"] is None


def test_mailboxes_have_their_own_message_index_change_log_and_limits(
    limited: tuple[GmailSimulator, Any], make_client: Callable[..., Any]
) -> None:
    sim, _ = limited
    config = {"mailboxes": ["a@shop.example", {"address": "b@shop.example", "tokens": ["token-b"]}]}
    assert json_call(sim.url, "POST", "/_sim/config", config)[0] == 200
    assert json_call(sim.url, "POST", "/_sim/config", {"mailbox": "a@shop.example", "messages_per_day": 1})[0] == 200
    users = make_client(sim.url).users()
    start = {box: sim.history_id(box) for box in ("a@shop.example", "b@shop.example")}
    raw = b64(make_raw("<box.1@safesend.test>"))
    sent_a = users.messages().send(userId="a@shop.example", body={"raw": raw}).execute()

    def found(user: str) -> list[str]:
        hits = users.messages().list(userId=user, q="rfc822msgid:box.1@safesend.test", labelIds=["SENT"]).execute()
        return [m["id"] for m in hits.get("messages", [])]

    assert found("a@shop.example") == [sent_a["id"]]
    assert found("b@shop.example") == [] and found("me") == []  # the default mailbox has nothing either
    assert users.getProfile(userId="a@shop.example").execute()["emailAddress"] == "a@shop.example"
    a_log = users.history().list(userId="a@shop.example", startHistoryId=str(start["a@shop.example"])).execute()
    assert [r["messagesAdded"][0]["message"]["id"] for r in a_log["history"]] == [sent_a["id"]]
    b_log = users.history().list(userId="b@shop.example", startHistoryId=str(start["b@shop.example"])).execute()
    assert "history" not in b_log
    # a has reached its own daily limit; b has none and takes the same message (its own index: one copy each).
    status, error = refusal(lambda: users.messages().send(userId="a@shop.example", body={"raw": raw}).execute())
    assert status == 429 and error["message"].endswith("(Mail sending)")
    sent_b = users.messages().send(userId="b@shop.example", body={"raw": raw}).execute()
    # "me" with b's token is b: a delegated user's token names its mailbox.
    profile = users.getProfile(userId="me")
    profile.headers["authorization"] = "Bearer token-b"
    assert profile.execute()["emailAddress"] == "b@shop.example"
    assert users.getProfile(userId="me").execute()["emailAddress"] == "sim-mailbox@safesend.localhost"
    assert [(e["mailbox"], e["gmail_id"]) for e in sim.effects()] == [
        ("a@shop.example", sent_a["id"]),
        ("b@shop.example", sent_b["id"]),
    ]
    usage = json_call(sim.url, "GET", "/_sim/usage")[1]["mailboxes"]
    assert usage["a@shop.example"]["refused"] == {"daily": 1} and usage["b@shop.example"]["messages_today"] == 1
    status, body = json_call(sim.url, "GET", "/_sim/history?mailbox=b@shop.example")
    assert status == 200 and len(body["history"]) == 1 and body["historyId"] == str(sim.history_id("b@shop.example"))
