"""A deeply nested JSON answer from any remote host is a malformed answer, never an exception.

json.loads raises RecursionError, not ValueError, on deep nesting: every parser of a remote answer
caught only ValueError, so a hostile or broken server (Gmail, the token endpoints, Firestore, Secret
Manager, the metadata server) raised past the adapter's own error types. Found by the Graph review,
where the same gap lost a send's refusal; these are the other adapters.
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler

import httplib2
import pytest
from googleapiclient.errors import HttpError

from safesend.adapters import gmail_auth, gmail_mailer
from safesend.adapters.access_tokens import AccessTokenError, MetadataServerTokens
from safesend.adapters.firestore_rest import FirestoreApiError, _answer
from safesend.adapters.secret_manager import read_secret
from safesend.core.errors import ConfigurationError
from tests.loopback_http import LoopbackHttpServer, QuietHandler

DEEP = b"[" * 100_000 + b"]" * 100_000


def test_the_body_is_deep_enough_to_raise_recursion_error():
    with pytest.raises(RecursionError):
        json.loads(DEEP)


@pytest.mark.parametrize("status", [200, 500])
def test_firestore_reads_a_deep_answer_as_no_answer(status: int):
    with pytest.raises(FirestoreApiError):
        _answer(status, DEEP)


def test_gmail_token_and_error_bodies_that_are_deep_give_no_code():
    assert gmail_mailer._oauth_error_code(DEEP) is None
    refusal = HttpError(httplib2.Response({"status": 400}), b"{}")
    refusal.content = DEEP  # googleapiclient itself raises on a deep body, so set it afterwards
    assert gmail_mailer._error_reason(refusal)[0] is None
    assert gmail_auth._signed_jwt(DEEP) is None
    assert gmail_auth._iam_status(DEEP) == ""
    assert gmail_auth._oauth_error(DEEP) == ""


class _Deep(QuietHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(DEEP)))
        self.end_headers()
        self.wfile.write(DEEP)


class _Token:
    def authorization(self) -> str:
        return "Bearer t"


def _served(handler: type[BaseHTTPRequestHandler]) -> LoopbackHttpServer:
    return LoopbackHttpServer(handler, name="deep-json")


def test_secret_manager_and_the_metadata_server_answering_deep_json_are_their_own_errors():
    server = _served(_Deep)
    try:
        with pytest.raises(ConfigurationError, match="not the documented access answer"):
            read_secret("p", "s", tokens=_Token(), base_url=server.url)  # type: ignore[arg-type]
        with pytest.raises(AccessTokenError, match="not the documented JSON"):
            MetadataServerTokens(host=server.host).authorization()
    finally:
        server.stop()
