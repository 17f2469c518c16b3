"""Issue 18.7: a hostile answer cannot inflate in our memory. Callbacks and chat webhooks ask for
`identity` and read only a few KB (the status is all they use); every other caller of OneShotHttp
(Gmail) inflates at most its cap and gets BODY_TOO_LARGE past it, never a truncated body.

The loopback host answers a ~500 KB gzip that inflates to 512 MiB, as in the issue's probe."""

from __future__ import annotations

import contextlib
import gzip
import json
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from devstack.receiver import BOMB_INFLATED_BYTES, gzip_bomb
from safesend.adapters import one_shot_http
from safesend.adapters.callback_http import HttpNotifier
from safesend.adapters.chat_webhooks import WebhookPoster
from safesend.adapters.one_shot_http import OneShotHttp, TransportError
from safesend.core.callbacks import CallbackPolicy
from safesend.core.classify import Bucket, TransportErrorKind, classify_transport
from tests.loopback_http import LoopbackHttpServer, QuietHandler

MIB = 1 << 20
BOUND_BYTES = 64 * MIB  # peak memory growth allowed for one answer (the bomb is 512 MiB inflated)


class Host:
    """A loopback host answering every request with `body` and the given Content-Encoding."""

    def __init__(self, body: bytes, encoding: str | None = "gzip", status: int = 200):
        self.accept_encodings: list[str | None] = []
        host = self

        class Handler(QuietHandler):
            def _answer(self) -> None:
                host.accept_encodings.append(self.headers.get("Accept-Encoding"))
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                self.send_response(status)
                if encoding:
                    self.send_header("Content-Encoding", encoding)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                with contextlib.suppress(
                    BrokenPipeError, ConnectionResetError
                ):  # the client stopped reading: exactly what a status-only caller does
                    self.wfile.write(body)

            do_GET = do_POST = _answer  # noqa: N815 - http.server's names

        self.http = LoopbackHttpServer(Handler, "bomb-host")
        self.url = self.http.url


@pytest.fixture
def bomb_host() -> Iterator[Host]:
    host = Host(gzip_bomb())
    try:
        yield host
    finally:
        host.http.stop()


def peak_rss_reset() -> int:
    """Reset this process's peak RSS (clear_refs 5) and return the current RSS, in bytes."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status_kb("VmRSS") * 1024


def peak_rss() -> int:
    return _status_kb("VmHWM") * 1024


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"{field} missing from /proc/self/status")


def test_the_bomb_is_what_the_issue_describes():
    assert len(gzip_bomb()) < 600_000 and BOMB_INFLATED_BYTES == 512 * MIB


def test_a_callback_host_answering_a_bomb_costs_no_memory_and_counts_as_its_status(bomb_host):
    notifier = HttpNotifier(CallbackPolicy(frozenset({"127.0.0.1"}), allow_http=True), b"s" * 32)
    before = peak_rss_reset()
    delivery = notifier.post(f"{bomb_host.url}/wait/1", b"{}")
    assert peak_rss() - before < BOUND_BYTES
    assert (delivery.ok, delivery.status) == (True, 200)
    assert bomb_host.accept_encodings == ["identity"]


def test_a_chat_webhook_answering_a_bomb_costs_no_memory(bomb_host):
    before = peak_rss_reset()
    delivery = WebhookPoster(f"{bomb_host.url}/chat", thread_by_key=True).deliver({"payload": {"text": "x"}})
    assert peak_rss() - before < BOUND_BYTES
    assert (delivery.ok, delivery.status) == (True, 200)
    assert bomb_host.accept_encodings == ["identity"]


def test_a_gmail_read_answered_with_a_bomb_is_body_too_large_and_bounded(bomb_host):
    inflated: list[int] = []
    real = zlib.decompressobj

    class Counting:
        """zlib's inflater, counting what it produces (the bound is on the output, not only on RSS)."""

        def __init__(self, wbits: int):
            self._inner = real(wbits)

        def decompress(self, data: bytes, max_length: int = 0) -> bytes:
            out = self._inner.decompress(data, max_length)
            inflated.append(len(out))
            return out

        def __getattr__(self, name: str) -> object:
            return getattr(self._inner, name)

    before = peak_rss_reset()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(one_shot_http.zlib, "decompressobj", Counting)
        with pytest.raises(TransportError) as caught:
            OneShotHttp(timeout=10).request(f"{bomb_host.url}/gmail/v1/users/me/messages", "GET")
    assert peak_rss() - before < BOUND_BYTES
    assert caught.value.kind is TransportErrorKind.BODY_TOO_LARGE
    assert sum(inflated) <= one_shot_http.MAX_BODY_BYTES + 1
    assert bomb_host.accept_encodings == ["gzip"]


def test_an_oversize_answer_is_an_error_of_its_own_kind_never_a_truncated_body():
    big = json.dumps({"messages": [{"id": "x" * 100}] * 40}).encode()
    for body, encoding in ((big, None), (gzip.compress(big), "gzip"), (zlib.compress(big), "deflate")):
        host = Host(body, encoding)
        try:
            with pytest.raises(TransportError) as caught:
                OneShotHttp(timeout=10, max_body_bytes=len(big) - 1).request(f"{host.url}/x", "GET")
            assert caught.value.kind is TransportErrorKind.BODY_TOO_LARGE
            _, content = OneShotHttp(timeout=10, max_body_bytes=len(big)).request(f"{host.url}/x", "GET")
            assert content == big
        finally:
            host.http.stop()
    # Like any failure after the request was written: a send answered so may have landed.
    assert classify_transport(TransportErrorKind.BODY_TOO_LARGE).bucket is Bucket.MAYBE_ACCEPTED


def test_multi_member_gzip_still_decodes_and_a_truncated_one_is_a_protocol_error():
    body = gzip.compress(b'{"a":') + gzip.compress(b"1}")
    host = Host(body)
    cut = Host(gzip.compress(b'{"a": 1}')[:-12])
    try:
        assert OneShotHttp(timeout=10).request(f"{host.url}/x", "GET")[1] == b'{"a":1}'
        with pytest.raises(TransportError) as caught:
            OneShotHttp(timeout=10).request(f"{cut.url}/x", "GET")
        assert caught.value.kind is TransportErrorKind.PROTOCOL
    finally:
        host.http.stop()
        cut.http.stop()
