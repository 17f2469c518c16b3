"""Each relay fault, seen from both sides: what the client observes and what Gmail (the simulator) accepted.

These tests use the stock google-api-python-client + httplib2 stack on purpose: the point is to pin down
how that stack reacts to each network failure, including its silent re-send of a POST (see the
close-after-forward test).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from googleapiclient.errors import HttpError

from devstack.gmail_sim import GmailSimulator
from devstack.relay import MODES, FaultRelay
from tests.integration.json_control import json_call
from tests.integration.process_io import read_line_bounded

REPO_ROOT = Path(__file__).resolve().parents[2]
# What a dropped connection surfaces as through httplib2 (RemoteDisconnected is both of these).
CONNECTION_FAILURES = (ConnectionError, http.client.HTTPException)


# ----------------------------------------------------------------------------- fixtures / helpers


@pytest.fixture
def gmail(relay: FaultRelay, make_client: Callable[..., Any]) -> Any:
    return make_client(relay.url).users().messages()


def make_raw(message_id: str) -> bytes:
    return (
        "From: sender@example.com\r\nTo: rcpt@example.com\r\nSubject: relay\r\n"
        f"Message-ID: {message_id}\r\n\r\nbody\r\n"
    ).encode("ascii")


def send(gmail: Any, message_id: str = "<relay.1@safesend.test>") -> dict:
    raw = base64.urlsafe_b64encode(make_raw(message_id)).decode("ascii")
    return gmail.send(userId="me", body={"raw": raw}).execute()


# ----------------------------------------------------------------------------- one test per mode
def test_forward_and_respond(sim: GmailSimulator, relay: FaultRelay, gmail: Any) -> None:
    sent = send(gmail)
    assert sent["labelIds"] == ["SENT"]
    assert [e["gmail_id"] for e in sim.effects()] == [sent["id"]]
    found = gmail.list(userId="me", q="rfc822msgid:<relay.1@safesend.test>", includeSpamTrash=True).execute()
    assert found["messages"][0]["id"] == sent["id"]
    stats = relay.stats()
    assert (stats["requests"], stats["forwarded"], stats["responded"]) == (2, 2, 2)
    assert stats["connections"] == 1  # httplib2 kept the connection alive across both calls


def test_fail_before_forward_sends_nothing(sim: GmailSimulator, relay: FaultRelay, gmail: Any) -> None:
    relay.set_mode("fail-before-forward")
    with pytest.raises(CONNECTION_FAILURES):
        send(gmail)
    assert sim.effects() == []
    # httplib2 re-sent once after the first empty reply, so the relay saw the request twice.
    assert relay.stats()["faulted"]["fail-before-forward"] == 2
    assert relay.stats()["forwarded"] == 0


def test_fail_before_forward_once_is_masked_by_httplib2_resend(
    sim: GmailSimulator, relay: FaultRelay, gmail: Any
) -> None:
    relay.set_mode("fail-before-forward", count=1)
    assert send(gmail)["labelIds"] == ["SENT"]  # the client never notices
    assert len(sim.effects()) == 1
    assert relay.stats()["faulted"]["fail-before-forward"] == 1


def test_429_before_forward(sim: GmailSimulator, relay: FaultRelay, gmail: Any) -> None:
    relay.set_mode("429-before-forward")
    with pytest.raises(HttpError) as info:
        send(gmail)
    assert info.value.status_code == 429
    assert info.value.error_details[0]["reason"] == "rateLimitExceeded"
    assert sim.effects() == []
    assert relay.stats()["forwarded"] == 0


def test_forward_then_5xx_hides_an_accepted_send(sim: GmailSimulator, relay: FaultRelay, gmail: Any) -> None:
    relay.set_mode("forward-then-5xx")
    with pytest.raises(HttpError) as info:
        send(gmail)
    assert info.value.status_code == 503
    assert json.loads(info.value.content)["error"]["status"] == "UNAVAILABLE"
    assert len(sim.effects()) == 1  # Gmail accepted it even though the client saw a 503


@pytest.mark.parametrize("mode", ["forward-then-drop-response", "slow-response"])
def test_lost_or_late_response_times_out_after_acceptance(
    sim: GmailSimulator, relay: FaultRelay, make_client: Callable[..., Any], mode: str
) -> None:
    gmail = make_client(relay.url, timeout=1.0).users().messages()
    relay.set_mode(mode, delay_s=3.0)
    started = time.monotonic()
    with pytest.raises(TimeoutError):  # socket.timeout is TimeoutError; httplib2 does not retry it
        send(gmail)
    assert time.monotonic() - started < 2.5
    assert len(sim.effects()) == 1
    assert relay.stats()["faulted"][mode] == 1


def test_slow_response_within_client_timeout_succeeds(
    sim: GmailSimulator, relay: FaultRelay, make_client: Callable[..., Any]
) -> None:
    gmail = make_client(relay.url, timeout=5.0).users().messages()
    relay.set_mode("slow-response", delay_s=0.4)
    started = time.monotonic()
    assert send(gmail)["labelIds"] == ["SENT"]
    assert time.monotonic() - started >= 0.4
    assert len(sim.effects()) == 1


def test_close_after_forward_triggers_httplib2_silent_resend(
    sim: GmailSimulator, relay: FaultRelay, gmail: Any
) -> None:
    """The known trap: one POST call, two accepted messages.

    httplib2's _conn_request treats BadStatusLine/RemoteDisconnected on the first attempt as a stale
    keep-alive connection and re-sends the request once, whatever httplib2.RETRIES says and whatever the
    method. Here the first attempt was accepted, the connection closed without a reply, and the silent
    re-send (after count=1 reverted the relay) was accepted again. Only a deterministic Message-ID plus
    reconciliation can detect this duplicate.
    """
    relay.set_mode("close-after-forward", count=1)
    sent = send(gmail)  # the caller sees a single clean success
    effects = sim.effects()
    assert len(effects) == 2
    assert effects[1]["gmail_id"] == sent["id"]
    assert {e["message_id"] for e in effects} == {"<relay.1@safesend.test>"}
    assert effects[0]["raw_sha256"] == effects[1]["raw_sha256"]
    stats = relay.stats()
    assert stats["faulted"]["close-after-forward"] == 1 and stats["forwarded"] == 2


def test_close_after_forward_until_changed_fails_after_two_acceptances(
    sim: GmailSimulator, relay: FaultRelay, gmail: Any
) -> None:
    relay.set_mode("close-after-forward")
    with pytest.raises(CONNECTION_FAILURES):
        send(gmail)
    assert len(sim.effects()) == 2  # the failed call still delivered twice


# ----------------------------------------------------------------------------- mode control
def test_count_reverts_to_forward_after_n_requests(sim: GmailSimulator, relay: FaultRelay, gmail: Any) -> None:
    relay.set_mode("429-before-forward", count=2)
    for _ in range(2):
        with pytest.raises(HttpError):
            send(gmail)
    assert relay.stats()["mode"] == "forward-and-respond"
    send(gmail)
    assert len(sim.effects()) == 1
    assert relay.stats()["faulted"]["429-before-forward"] == 2


def test_mode_switch_over_http_while_running(sim: GmailSimulator, relay: FaultRelay, gmail: Any) -> None:
    status, body = json_call(relay.url, "POST", "/_relay/mode", {"mode": "429-before-forward", "match": "send"})
    assert status == 200 and body["mode"] == "429-before-forward"
    with pytest.raises(HttpError) as info:
        send(gmail)
    assert info.value.status_code == 429
    status, stats = json_call(relay.url, "GET", "/_relay/stats")
    assert status == 200 and stats["faulted"]["429-before-forward"] == 1
    assert json_call(relay.url, "POST", "/_relay/mode", {"mode": "forward-and-respond"})[0] == 200
    send(gmail)
    assert len(sim.effects()) == 1
    # Control paths are answered by the relay and never reach the upstream.
    assert relay.stats()["requests"] == 2
    assert json_call(relay.url, "POST", "/_relay/mode", {"mode": "explode"})[0] == 400
    assert json_call(relay.url, "GET", "/_relay/nope")[0] == 404


def test_set_mode_validates_arguments(relay: FaultRelay) -> None:
    assert "forward-and-respond" in MODES
    with pytest.raises(ValueError):
        relay.set_mode("explode")
    with pytest.raises(ValueError):
        relay.set_mode("slow-response", match="everything")
    with pytest.raises(ValueError):
        relay.set_mode("slow-response", count=0)
    with pytest.raises(ValueError):
        relay.set_mode("slow-response", delay_s=-1)


def test_match_send_leaves_list_and_get_untouched(sim: GmailSimulator, relay: FaultRelay, gmail: Any) -> None:
    existing = sim.insert_message(make_raw("<old@safesend.test>"))
    relay.set_mode("fail-before-forward", match="send")
    assert gmail.list(userId="me").execute()["messages"][0]["id"] == existing
    assert gmail.get(userId="me", id=existing, format="minimal").execute()["id"] == existing
    with pytest.raises(CONNECTION_FAILURES):
        send(gmail)
    relay.set_mode("429-before-forward", match="all")
    with pytest.raises(HttpError) as info:
        gmail.list(userId="me").execute()
    assert info.value.status_code == 429
    assert len(sim.effects()) == 1  # only the inserted message


def test_stop_interrupts_pending_delay_and_closes_port(sim: GmailSimulator, make_client: Callable[..., Any]) -> None:
    fault_relay = FaultRelay(sim.url).start()
    port = fault_relay.port
    fault_relay.set_mode("slow-response", delay_s=60.0)
    gmail = make_client(fault_relay.url, timeout=30.0).users().messages()
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            send(gmail)
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion below
            outcome.append(exc)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    for _ in range(100):  # bounded: wait until the send reached the simulator
        if sim.effects():
            break
        time.sleep(0.05)
    assert len(sim.effects()) == 1
    started = time.monotonic()
    fault_relay.stop()
    assert time.monotonic() - started < 3.0
    caller.join(timeout=10)
    assert not caller.is_alive() and outcome and isinstance(outcome[0], CONNECTION_FAILURES)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    assert not [t for t in threading.enumerate() if t.name.startswith("fault-relay") and t.is_alive()]


def test_bind_refuses_non_loopback(sim: GmailSimulator) -> None:
    with pytest.raises(ValueError):
        FaultRelay(sim.url, host="0.0.0.0")
    with pytest.raises(ValueError):
        FaultRelay("https://gmail.googleapis.com/")


def test_cli_subprocess_relays_and_stops_on_sigterm(sim: GmailSimulator, make_client: Callable[..., Any]) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "devstack.relay", "--upstream", sim.url, "--port", "0"],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        line = read_line_bounded(proc, timeout=20)
        assert line.startswith("fault-relay listening on http://127.0.0.1:") and line.endswith(f"-> {sim.url}"), line
        url = line.split()[3]
        assert json_call(url, "POST", "/_relay/mode", {"mode": "forward-then-5xx", "count": 1})[0] == 200
        gmail = make_client(url).users().messages()
        with pytest.raises(HttpError) as info:
            send(gmail)
        assert info.value.status_code == 503
        send(gmail)
        assert len(sim.effects()) == 2
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


# ----------------------------------------------------------------------------- trickle-response
def read_trickled(port: int, request: bytes, byte_count: int, timeout: float) -> tuple[bytes, list[float]]:
    """Send a raw request and read `byte_count` bytes one recv at a time, noting when each chunk came."""
    arrivals: list[float] = []
    data = b""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
        conn.sendall(request)
        for _ in range(byte_count):  # bounded: one recv per expected byte at most
            chunk = conn.recv(byte_count - len(data))
            if not chunk:
                break
            data += chunk
            arrivals.append(time.monotonic())
            if len(data) >= byte_count:
                break
    return data, arrivals


def test_trickle_response_forwards_then_dribbles_the_real_answer_byte_by_byte(
    sim: GmailSimulator, relay: FaultRelay
) -> None:
    """Every byte arrives inside a short per-read timeout, so only a wall-clock deadline can end the wait."""
    existing = sim.insert_message(make_raw("<old@safesend.test>"))
    relay.set_mode("trickle-response", match="all", count=1, delay_s=0.05)
    request = f"GET /gmail/v1/users/me/messages/{existing}?format=minimal HTTP/1.1\r\nHost: x\r\n\r\n".encode()
    started = time.monotonic()
    # each read waits at most 0.5 s (a longer silence raises socket.timeout here): none did
    data, arrivals = read_trickled(relay.port, request, 12, timeout=0.5)
    assert data == b"HTTP/1.1 200"
    # dribbled, not written at once: in several reads, the last byte at least 11 pauses of 0.05 s after
    # the request (a loaded reader may find two bytes waiting, so not necessarily one per read)
    assert len(arrivals) >= 4 and arrivals[-1] - started >= 11 * 0.05
    stats = relay.stats()
    assert stats["faulted"]["trickle-response"] == 1 and stats["forwarded"] == 1


def test_trickle_response_delivers_a_complete_answer_to_a_patient_client(
    sim: GmailSimulator, relay: FaultRelay, make_client: Callable[..., Any]
) -> None:
    relay.set_mode("trickle-response", count=1, delay_s=0.001)
    gmail = make_client(relay.url, timeout=5.0).users().messages()
    started = time.monotonic()
    sent = send(gmail)
    assert sent["labelIds"] == ["SENT"] and [e["gmail_id"] for e in sim.effects()] == [sent["id"]]
    assert time.monotonic() - started < 10.0
    assert relay.stats()["mode"] == "forward-and-respond"  # count=1 reverted it


def test_trickle_response_is_cut_short_by_stop(sim: GmailSimulator) -> None:
    fault_relay = FaultRelay(sim.url).start()
    try:
        status, body = json_call(
            fault_relay.url, "POST", "/_relay/mode", {"mode": "trickle-response", "match": "all", "delay_s": 60.0}
        )
        assert status == 200 and body["mode"] == "trickle-response" and body["delay_s"] == 60.0
        conn = socket.create_connection(("127.0.0.1", fault_relay.port), timeout=10)
        conn.sendall(b"GET /gmail/v1/users/me/messages HTTP/1.1\r\nHost: x\r\n\r\n")
        for _ in range(100):  # bounded: wait until the request was forwarded
            if fault_relay.stats()["forwarded"]:
                break
            time.sleep(0.05)
        started = time.monotonic()
    finally:
        fault_relay.stop()
    assert time.monotonic() - started < 3.0
    with conn:
        assert conn.recv(100) == b""  # closed without a byte of the held-back answer


def test_a_mode_can_fault_one_mailbox_and_leave_the_others_alone(
    sim: GmailSimulator, relay: FaultRelay, gmail: Any
) -> None:
    sim.add_mailbox("a@shop.example")
    sim.add_mailbox("b@shop.example")
    raw = base64.urlsafe_b64encode(make_raw("<box.1@safesend.test>")).decode("ascii")

    def send_as(user: str) -> dict:
        return gmail.send(userId=user, body={"raw": raw}).execute()

    status, body = json_call(
        relay.url, "POST", "/_relay/mode", {"mode": "429-before-forward", "mailbox": "A@shop.example", "count": 2}
    )
    assert status == 200 and body["mailboxes"]["a@shop.example"]["mode"] == "429-before-forward"
    with pytest.raises(HttpError) as info:
        send_as("a@shop.example")
    assert info.value.status_code == 429
    send_as("b@shop.example")  # b is not faulted, nor is the default mailbox
    send(gmail)
    relay.set_mode("fail-before-forward")  # a mode for every mailbox: a's own mode still wins for a
    with pytest.raises(HttpError):
        send_as("a@shop.example")
    assert relay.stats()["mailboxes"] == {}  # a's two faults are used up: a follows the global mode again
    with pytest.raises(CONNECTION_FAILURES):
        send_as("a@shop.example")
    relay.set_mode("forward-and-respond")
    relay.set_mode("slow-response", match="all", mailbox="b@shop.example", delay_s=0.0)
    relay.set_mode("forward-and-respond", mailbox="b@shop.example")  # drops b's own mode
    assert relay.stats()["mailboxes"] == {}
    send_as("a@shop.example")
    assert sorted(e["mailbox"] for e in sim.effects()) == [
        "a@shop.example",
        "b@shop.example",
        "sim-mailbox@safesend.localhost",
    ]
    assert json_call(relay.url, "POST", "/_relay/mode", {"mode": "429-before-forward", "mailbox": ""})[0] == 400
