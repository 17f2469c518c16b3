"""firestore_rest: the REST client's transport behaviour against a loopback server that plays
Firestore's answers (the emulator's real answers are covered by tests/integration/). What matters:
one kept-alive connection per thread, a read tried again when the server closed it while idle, a
commit never re-sent underneath, 401 -> a new token, errors mapped to Firestore's status names, and
every call bounded by its deadline."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from safesend.adapters import firestore_rest
from safesend.adapters.firestore_rest import FirestoreApiError, FirestoreRestClient, FirestoreTransportError
from tests.loopback_http import LoopbackHttpServer, QuietHandler

DOC = {
    "name": "projects/p/databases/(default)/documents/c/d",
    "fields": {},
    "updateTime": "2026-01-01T00:00:00.123456789Z",
}


class FakeFirestore:
    """Scripted answers by (method, path suffix); counts connections and requests."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, Any]] = []  # consumed in order; default 200 DOC
        self.requests: list[dict[str, Any]] = []
        self.connections = 0
        self.close_after_answer = False  # drop the kept-alive connection silently (idle timeout)
        self.delay_s = 0.0
        outer = self

        class Handler(QuietHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                outer.connections += 1

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                outer.requests.append(
                    {
                        "method": self.command,
                        "path": self.path,
                        "auth": self.headers.get("Authorization"),
                        "user_project": self.headers.get("x-goog-user-project"),
                        "body": body,
                    }
                )
                time.sleep(outer.delay_s)
                status, answer = outer.answers.pop(0) if outer.answers else (200, DOC)
                raw = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)
                self.close_connection = outer.close_after_answer

            do_GET = do_POST = _serve  # noqa: N815 - http.server names its handlers so

        self.http = LoopbackHttpServer(Handler, "fake-firestore")
        self.host = self.http.host


class Tokens:
    def __init__(self) -> None:
        self.issued = 0

    def authorization(self) -> str:
        if self.issued == 0:
            self.issued = 1
        return f"Bearer t{self.issued}"

    def invalidate(self) -> None:
        self.issued += 1

    def quota_project(self) -> str | None:
        return self.billed_to

    billed_to: str | None = None


@pytest.fixture
def firestore() -> Iterator[FakeFirestore]:
    server = FakeFirestore()
    with server.http:
        yield server


@pytest.fixture
def client(firestore: FakeFirestore) -> Iterator[FirestoreRestClient]:
    rest = FirestoreRestClient("p", emulator_host=firestore.host, tokens=Tokens())
    yield rest
    rest.close()


def error(status: int, name: str, message: str = "m") -> tuple[int, dict[str, Any]]:
    return status, {"error": {"code": status, "message": message, "status": name}}


def test_calls_share_one_kept_alive_connection(firestore: FakeFirestore, client: FirestoreRestClient) -> None:
    for _ in range(3):
        assert client.get("c", "d", 5.0) == DOC
    client.commit([{"update": DOC}], 5.0)
    assert firestore.connections == 1 and len(firestore.requests) == 4


def test_paths_and_bodies_are_firestores(firestore: FakeFirestore, client: FirestoreRestClient) -> None:
    client.get("jobs", "a/b c", 5.0)
    client.commit([{"delete": "x"}], 5.0)
    firestore.answers.append((200, [{"readTime": "t"}, {"document": DOC, "readTime": "t"}, {"done": True}]))
    assert client.run_query({"from": [{"collectionId": "jobs"}]}, 5.0) == [DOC]
    get, commit, query = firestore.requests
    assert get["path"] == "/v1/projects/p/databases/(default)/documents/jobs/a%2Fb%20c"  # an id is one path segment
    assert (commit["path"], commit["body"]) == (
        "/v1/projects/p/databases/(default)/documents:commit",
        {"writes": [{"delete": "x"}]},
    )
    assert query["path"].endswith("/documents:runQuery") and query["body"] == {
        "structuredQuery": {"from": [{"collectionId": "jobs"}]}
    }
    assert client.document_name("jobs", "x") == "projects/p/databases/(default)/documents/jobs/x"


def test_a_missing_document_is_none_and_other_errors_keep_firestores_status(
    firestore: FakeFirestore, client: FirestoreRestClient
) -> None:
    firestore.answers += [
        error(404, "NOT_FOUND"),
        error(409, "ALREADY_EXISTS", "entity exists"),
        (503, b"upstream gone"),
    ]
    assert client.get("c", "d", 5.0) is None
    with pytest.raises(FirestoreApiError) as exists:
        client.commit([{}], 5.0)
    assert (exists.value.http_status, exists.value.status, exists.value.message) == (
        409,
        "ALREADY_EXISTS",
        "entity exists",
    )
    with pytest.raises(FirestoreApiError) as bare:  # no JSON error body (a proxy): named by its HTTP status
        client.commit([{}], 5.0)
    assert bare.value.status == "UNAVAILABLE"


def test_a_2xx_without_json_is_not_taken_as_success(firestore: FakeFirestore, client: FirestoreRestClient) -> None:
    """A commit answered with garbage may or may not have landed: an UNKNOWN error, which the store
    treats as ambiguous (re-read), never as a write result."""
    firestore.answers.append((200, b"<html>hello</html>"))
    with pytest.raises(FirestoreApiError) as garbage:
        client.commit([{}], 5.0)
    assert garbage.value.status == "UNKNOWN"


def test_user_credentials_quota_project_is_sent_as_x_goog_user_project(firestore: FakeFirestore) -> None:
    tokens = Tokens()
    tokens.billed_to = "my-billing-project"
    rest = FirestoreRestClient("p", emulator_host=firestore.host, tokens=tokens)
    rest.get("c", "d", 5.0)
    assert firestore.requests[-1]["user_project"] == "my-billing-project"
    rest.close()


@pytest.mark.parametrize(
    ("call", "answer"),
    [
        (lambda c: c.run_query({}, 5.0), {"document": DOC}),  # an object, not the documented list
        (lambda c: c.get("c", "d", 5.0), [DOC]),
        (lambda c: c.commit([{}], 5.0), ["writeResults"]),
        (lambda c: c.get("c", "d", 5.0), b""),  # no body at all
    ],
    ids=["query", "get", "commit", "empty"],
)
def test_a_2xx_of_another_shape_is_unknown_never_no_documents(
    firestore: FakeFirestore, client: FirestoreRestClient, call: Any, answer: Any
) -> None:
    """Read as an empty result, a query answer of the wrong shape would hide every due job."""
    firestore.answers.append((200, answer))
    with pytest.raises(FirestoreApiError) as odd:
        call(client)
    assert odd.value.status == "UNKNOWN"


def test_401_renews_the_token_and_goes_once_more(firestore: FakeFirestore, client: FirestoreRestClient) -> None:
    firestore.answers += [error(401, "UNAUTHENTICATED"), (200, {"writeResults": []})]
    assert client.commit([{}], 5.0) == {"writeResults": []}
    assert [r["auth"] for r in firestore.requests] == ["Bearer t1", "Bearer t2"]
    firestore.answers += [error(401, "UNAUTHENTICATED"), error(401, "UNAUTHENTICATED")]
    with pytest.raises(FirestoreApiError, match="UNAUTHENTICATED"):  # a second 401 is final
        client.get("c", "d", 5.0)


def test_a_read_on_a_connection_the_server_closed_while_idle_goes_again_on_a_new_one(
    firestore: FakeFirestore, client: FirestoreRestClient
) -> None:
    firestore.close_after_answer = True
    assert client.get("c", "d", 5.0) == DOC
    time.sleep(0.05)  # the server's FIN arrives; the client still holds the connection as kept alive
    assert client.get("c", "d", 5.0) == DOC
    assert firestore.connections == 2 and len(firestore.requests) == 2


def test_a_commit_on_such_a_connection_is_never_resent_underneath(
    firestore: FakeFirestore, client: FirestoreRestClient
) -> None:
    """Whether a commit landed is the store's question (it re-reads by write id): the client reports
    'maybe sent' and sends nothing more."""
    firestore.close_after_answer = True
    client.get("c", "d", 5.0)
    time.sleep(0.05)
    with pytest.raises(FirestoreTransportError) as lost:
        client.commit([{}], 5.0)
    assert lost.value.request_sent is True
    assert [r["method"] for r in firestore.requests] == ["GET"]  # nothing re-sent on a new connection
    assert client.get("c", "d", 5.0) == DOC  # and the next call gets a new connection


def test_a_connection_idle_too_long_is_replaced_before_a_commit_risks_it(
    firestore: FakeFirestore, client: FirestoreRestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(firestore_rest, "MAX_IDLE_S", 0.05)
    firestore.close_after_answer = True  # the server drops idle connections, silently
    client.get("c", "d", 5.0)
    time.sleep(0.1)
    assert client.commit([{}], 5.0) == DOC  # answered: not lost on the dead connection
    assert firestore.connections == 2 and [r["method"] for r in firestore.requests] == ["GET", "POST"]


def test_nothing_listening_means_nothing_was_sent() -> None:
    rest = FirestoreRestClient("p", emulator_host="127.0.0.1:9", tokens=Tokens())
    with pytest.raises(FirestoreTransportError) as refused:
        rest.commit([{}], 2.0)
    assert refused.value.request_sent is False


def test_a_slow_server_is_cut_at_the_deadline(firestore: FakeFirestore, client: FirestoreRestClient) -> None:
    firestore.delay_s = 2.0
    started = time.monotonic()
    with pytest.raises(FirestoreTransportError) as late:
        client.commit([{}], 0.3)
    assert late.value.request_sent is True
    assert time.monotonic() - started < 1.5


def test_each_thread_has_its_own_connection(firestore: FakeFirestore, client: FirestoreRestClient) -> None:
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(5):
                assert client.get("c", "d", 5.0) == DOC
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert errors == [] and len(firestore.requests) == 20 and firestore.connections == 4
