"""Wall-clock deadlines: one send attempt, one search, one read-back end on time whatever the server does.

A per-operation socket timeout is not a deadline: a peer that writes one byte just inside it keeps a
call open for as long as it likes. These tests use such peers (the relay's trickle-response mode, and a
raw socket server for what the relay cannot fake) through the real google-api-python-client.
"""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from devstack.relay import FaultRelay
from safesend.adapters.gmail_mailer import READ_TRIES, GmailMailer
from safesend.adapters.one_shot_http import OneShotHttp, TransportError
from safesend.core.classify import TransportErrorKind
from safesend.core.errors import MailboxUnavailableError
from safesend.core.model import Bucket, Failure
from tests.integration.test_gmail_mailer import MESSAGE_ID, RAW, sent_copies

TRICKLE_S = 0.4  # below every timeout used here: each socket read succeeds
TIMEOUT_S = 0.5


class TrickleServer:
    """Raw loopback TCP server: reads the client's first bytes, writes `prefix`, then one filler byte every
    `delay_s` (at most `max_bytes`). Bounded by stop() and by the client leaving."""

    def __init__(
        self,
        prefix: bytes,
        delay_s: float,
        filler: bytes = b"x",
        max_bytes: int = 200,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.prefix, self.delay_s, self.filler, self.max_bytes = prefix, delay_s, filler, max_bytes
        self.tls = tls
        self.connections = 0
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.port = self._listener.getsockname()[1]
        self._threads = [threading.Thread(target=self._accept_loop, daemon=True)]
        self._threads[0].start()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(5)
                if self.tls is not None:
                    conn = self.tls.wrap_socket(conn, server_side=True)
                conn.recv(65536)
                conn.sendall(self.prefix)
                for _ in range(self.max_bytes):
                    if self._stop.wait(self.delay_s):
                        return
                    conn.sendall(self.filler)
            except OSError:
                return

    def stop(self) -> None:
        self._stop.set()
        self._listener.close()
        for thread in self._threads:
            thread.join(timeout=5)


def loopback_tls(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server, client) contexts for a throwaway self-signed 127.0.0.1 certificate."""
    crypto = pytest.importorskip("cryptography")  # noqa: F841 - a google-auth dependency
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert_file, key_file)
    client = ssl.create_default_context(cafile=str(cert_file))
    return server, client


def call_bounded(call: Callable[[], Any], limit_s: float) -> tuple[Any, float]:
    """Run `call` aside and fail the test, instead of hanging it, if it outlives `limit_s`.

    Returns (result, seconds taken); an exception raised by `call` is re-raised here.
    """
    box: dict[str, Any] = {}

    def run() -> None:
        started = time.monotonic()
        try:
            box["result"] = call()
        except Exception as exc:  # noqa: BLE001 - handed to the caller below
            box["error"] = exc
        box["elapsed"] = time.monotonic() - started

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(limit_s)
    assert not worker.is_alive(), f"call still running after {limit_s} s: no wall-clock deadline"
    if "error" in box:
        raise box["error"]
    return box["result"], box["elapsed"]


def raised(call: Callable[[], Any]) -> Exception | None:
    """The exception `call` raised, or None: lets call_bounded time a call that is meant to fail."""
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - returned for the caller's assertion
        return exc
    return None


def relay_mailer(relay: FaultRelay, sleep: Callable[[float], None] = lambda s: None) -> GmailMailer:
    return GmailMailer(api_endpoint=relay.url, send_timeout_s=TIMEOUT_S, read_timeout_s=TIMEOUT_S, sleep=sleep)


# ---------------------------------------------------------------------------------- send attempt
def test_trickled_send_answer_is_a_maybe_accepted_timeout_within_the_send_deadline(sim, relay):
    relay.set_mode("trickle-response", delay_s=TRICKLE_S)
    mailer = relay_mailer(relay)
    outcome, elapsed = call_bounded(lambda: mailer.send(RAW), limit_s=3.0)
    assert elapsed < 1.5
    assert isinstance(outcome, Failure)
    assert (outcome.bucket, outcome.code, outcome.retryable) == (Bucket.MAYBE_ACCEPTED, "timeout", False)
    assert sent_copies(sim) == 1  # Gmail took it; only the answer was slow
    assert relay.stats()["requests"] == 1  # and it was not sent again
    assert elapsed < mailer.send_deadline_s


def test_a_stalled_tls_handshake_is_cut_at_the_send_deadline():
    """A server trickling a 16 KiB TLS record: each handshake read succeeds, the handshake never ends."""
    server = TrickleServer(prefix=b"\x16\x03\x03\x40\x00", delay_s=0.1)
    try:
        mailer = GmailMailer(api_endpoint=f"https://127.0.0.1:{server.port}/", send_timeout_s=TIMEOUT_S)
        # Built first, as the runtime's start-up does: on a loaded machine building the client used
        # the whole 0.5 s, the deadline passed before the connect, and the send was (rightly) a
        # clean connect_failed, "nothing sent": this test is about the handshake.
        mailer.warm()
        outcome, elapsed = call_bounded(lambda: mailer.send(RAW), limit_s=3.0)
    finally:
        server.stop()
    assert isinstance(outcome, Failure)
    assert outcome.code == "timeout"  # a connect-phase timeout stays conservative, by design
    assert elapsed < mailer.send_deadline_s


def test_mailer_states_its_worst_case_wall_clock():
    mailer = GmailMailer(send_timeout_s=20.0, read_timeout_s=15.0)
    slack = mailer.send_deadline_s - 20.0
    assert 0 < slack <= 0.5
    assert mailer.read_back_deadline_s == pytest.approx(15.0 + slack)
    assert READ_TRIES == 3
    assert mailer.read_deadline_s == pytest.approx(3 * 15.0 + 1.0 + 2.0 + slack)  # tries + backoff sleeps


# ------------------------------------------------------------------------------------------ reads
def test_trickled_search_is_reported_unavailable_within_the_read_deadline(sim, relay):
    sim.insert_message(RAW)
    relay.set_mode("trickle-response", match="all", delay_s=TRICKLE_S)
    mailer = relay_mailer(relay, sleep=time.sleep)  # real backoff sleeps: they are part of the bound
    error, elapsed = call_bounded(lambda: raised(lambda: mailer.find_by_message_id(MESSAGE_ID)), limit_s=10.0)
    assert isinstance(error, MailboxUnavailableError)
    assert relay.stats()["requests"] == READ_TRIES
    assert elapsed < mailer.read_deadline_s  # 3 x 0.5 s tries + 1 s + 2 s sleeps + slack


def test_trickled_read_back_is_one_try_within_the_read_back_deadline(sim, relay):
    gmail_id = sim.insert_message(RAW)
    relay.set_mode("trickle-response", match="all", delay_s=TRICKLE_S)
    mailer = relay_mailer(relay)
    error, elapsed = call_bounded(lambda: raised(lambda: mailer.stored_message_id(gmail_id)), limit_s=3.0)
    assert isinstance(error, MailboxUnavailableError)
    assert relay.stats()["requests"] == 1
    assert elapsed < mailer.read_back_deadline_s


def test_a_search_with_many_slow_hits_shares_one_deadline(sim):
    """List + up to 10 gets: each read is fast enough, their sum is not. The search must still end on time."""
    for _ in range(10):
        sim.insert_message(RAW)
    sim.set_latency(0.0, read_seconds=0.45)  # 11 reads x 0.45 s = 4.95 s > the 4.5 s search budget
    mailer = GmailMailer(api_endpoint=sim.url, send_timeout_s=TIMEOUT_S, read_timeout_s=TIMEOUT_S, sleep=lambda s: None)
    started = time.monotonic()
    with pytest.raises(MailboxUnavailableError):
        mailer.find_by_message_id(MESSAGE_ID)
    assert time.monotonic() - started < mailer.read_deadline_s


# ------------------------------------------------------------------------------- OneShotHttp itself
def test_a_deadline_already_past_sends_nothing_and_says_so(relay):
    transport = OneShotHttp(timeout=5.0, deadline=time.monotonic() - 0.01)
    with pytest.raises(TransportError) as info:
        transport.request(relay.url + "gmail/v1/users/me/messages/send", "POST", body=b"{}")
    assert info.value.kind is TransportErrorKind.CONNECT_FAILED  # Bucket 1: nothing was written
    assert relay.stats()["connections"] == 0


def test_a_body_read_until_close_is_not_taken_as_complete_when_the_deadline_cuts_it():
    """No Content-Length: the body ends at EOF, and the deadline's shutdown is an EOF too."""
    server = TrickleServer(
        prefix=b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: text/plain\r\n\r\n", delay_s=0.1
    )
    try:
        transport = OneShotHttp(timeout=TIMEOUT_S)  # no explicit deadline: now + timeout, per request
        with pytest.raises(TransportError) as info:
            call_bounded(lambda: transport.request(f"http://127.0.0.1:{server.port}/", "GET"), limit_s=3.0)
    finally:
        server.stop()
    assert info.value.kind is TransportErrorKind.TIMEOUT


def test_a_trickled_https_answer_is_cut_at_the_deadline(tmp_path):
    """Same as over plain HTTP, through TLS: the watchdog's shutdown must reach the socket under SSL."""
    server_tls, client_tls = loopback_tls(tmp_path)
    server = TrickleServer(prefix=b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n", delay_s=0.1, tls=server_tls)
    try:
        transport = OneShotHttp(timeout=TIMEOUT_S, ssl_context=client_tls)
        with pytest.raises(TransportError) as info:
            call_bounded(lambda: transport.request(f"https://127.0.0.1:{server.port}/", "GET"), limit_s=3.0)
    finally:
        server.stop()
    assert info.value.kind is TransportErrorKind.TIMEOUT
    assert server.connections == 1
