"""GraphMailer against the Graph simulator over real HTTP (and the fault relay): one POST per attempt,
the answers in their buckets, Sent Items search and delta as witnesses, MSAL tokens from both credentials."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator

import pytest

from devstack.graph_sim import GraphSimulator, immutable_id
from devstack.relay import FaultRelay
from safesend.adapters.graph_auth import (
    BoundedLoginHttp,
    GoogleIdTokenAssertion,
    GraphTokens,
    certificate_credential,
    federated_credential,
)
from safesend.adapters.graph_mailer import FIRST_COPY_PREFIX, GraphMailer, first_copy_id
from safesend.core.errors import HistoryExpiredError, MailboxUnavailableError
from safesend.core.model import Accepted, Bucket, Failure
from tests.integration.graph_support import plain_mime, self_signed_certificate
from tests.loopback_http import LoopbackHttpServer, QuietHandler

USER = "shop@contoso.example"
TENANT = "tenant-1"
CLIENT = "app-1"


def make_raw(message_id: str) -> bytes:
    return plain_mime(USER, message_id)


def mailer_for(url: str, tokens: GraphTokens | None = None, timeout: float = 3.0) -> GraphMailer:
    return GraphMailer(
        USER, tokens, api_endpoint=url, send_timeout_s=timeout, read_timeout_s=timeout, sleep=lambda s: None
    )


def test_a_202_is_accepted_as_the_first_copy_and_the_search_names_it_the_same(graph_sim: GraphSimulator) -> None:
    mailer = mailer_for(graph_sim.url)
    outcome = mailer.send(make_raw("<m1@safesend.test>"))
    assert outcome == Accepted(gmail_id=first_copy_id("<m1@safesend.test>"), stored=False)  # a draft, not yet sent
    hits = mailer.find_by_message_id("<m1@safesend.test>")
    assert [h.gmail_id for h in hits] == [outcome.gmail_id]
    assert hits[0].is_sent
    assert mailer.stored_message_id(outcome.gmail_id) == "<m1@safesend.test>"


def test_a_second_copy_is_a_second_name_so_a_duplicate_is_counted(graph_sim: GraphSimulator) -> None:
    mailer = mailer_for(graph_sim.url)
    mailer.send(make_raw("<dup@safesend.test>"))
    graph_sim.advance_clock(2)
    other = graph_sim.insert_message(USER, make_raw("<dup@safesend.test>"))
    names = [h.gmail_id for h in mailer.find_by_message_id("<dup@safesend.test>")]
    assert names == [first_copy_id("<dup@safesend.test>"), immutable_id(other)]  # ids that never change
    assert mailer.stored_message_id(immutable_id(other)) == "<dup@safesend.test>"


def test_answers_fall_in_their_buckets(graph_sim: GraphSimulator) -> None:
    mailer = mailer_for(graph_sim.url)
    graph_sim.inject_errors(503, retry_after_s=4)
    maybe = mailer.send(make_raw("<b1@safesend.test>"))
    assert isinstance(maybe, Failure) and maybe.bucket is Bucket.MAYBE_ACCEPTED and maybe.retry_after_s == 4.0
    graph_sim.configure(messages_per_minute=0)
    throttled = mailer.send(make_raw("<b2@safesend.test>"))
    assert isinstance(throttled, Failure)
    assert (throttled.bucket, throttled.retryable, throttled.status) == (Bucket.NOT_ACCEPTED, True, 429)
    assert throttled.retry_after_s is not None and throttled.code == "graph_429_ApplicationThrottled"
    no_id = mailer.send(b"From: a@b.example\r\nTo: c@d.example\r\n\r\nx")
    assert isinstance(no_id, Failure) and no_id.bucket is Bucket.NOT_ACCEPTED
    assert graph_sim.effects() == []


@pytest.mark.parametrize("mode", ["close-after-forward", "forward-then-drop-response", "forward-then-5xx"])
def test_a_lost_answer_is_maybe_accepted_and_the_post_is_never_re_sent(graph_sim: GraphSimulator, mode: str) -> None:
    with FaultRelay(graph_sim.url) as relay:
        relay.set_mode(mode, count=1, delay_s=0.2)
        mailer = mailer_for(relay.url, timeout=1.5)
        started = time.monotonic()
        outcome = mailer.send(make_raw(f"<{mode}@safesend.test>"))
        assert time.monotonic() - started < mailer.send_deadline_s + 0.5
        assert isinstance(outcome, Failure) and outcome.bucket is Bucket.MAYBE_ACCEPTED
        assert relay.stats()["requests"] == 1  # one attempt, one request: nothing underneath re-sent it
        assert len(graph_sim.effects()) == 1  # and Graph did take it: only the search can tell
        assert [h.gmail_id for h in mailer.find_by_message_id(f"<{mode}@safesend.test>")] == [
            first_copy_id(f"<{mode}@safesend.test>")
        ]


def test_a_connection_refused_before_sending_is_not_accepted() -> None:
    with GraphSimulator() as closed:
        url = closed.url
    outcome = mailer_for(url).send(make_raw("<refused@safesend.test>"))
    assert isinstance(outcome, Failure) and outcome.bucket is Bucket.NOT_ACCEPTED


def test_delta_from_a_checkpoint_lists_the_copies_added_since(graph_sim: GraphSimulator) -> None:
    mailer = mailer_for(graph_sim.url)
    mailer.send(make_raw("<before@safesend.test>"))
    checkpoint = mailer.current_history_id()
    assert mailer.added_since(checkpoint).messages == ()
    mailer.send(make_raw("<after@safesend.test>"))
    graph_sim.advance_clock(1)
    graph_sim.insert_message(USER, make_raw("<after@safesend.test>"))
    page = mailer.added_since(checkpoint)
    assert page.complete
    names = page.gmail_ids()
    assert names[0] == first_copy_id("<after@safesend.test>") and len(names) == 2
    assert set(mailer.message_ids_of(names).values()) == {"<after@safesend.test>"}
    graph_sim.configure(sync_state_ttl_s=1)
    graph_sim.advance_clock(2)
    with pytest.raises(HistoryExpiredError):
        mailer.added_since(checkpoint)


def test_delta_and_search_name_two_copies_alike_whatever_their_ids(graph_sim: GraphSimulator) -> None:
    """Two copies must stay two names over every look: delta names the earliest copy as the search does
    (by createdDateTime), not by id, else a later copy with the smaller id is a third name."""
    mailer = mailer_for(graph_sim.url)
    for _ in range(64):  # random ids: until the later copy's id sorts first (each try: even odds)
        graph_sim.reset()
        checkpoint = mailer.current_history_id()
        first = immutable_id(graph_sim.insert_message(USER, make_raw("<two@safesend.test>")))
        graph_sim.advance_clock(1)
        later = immutable_id(graph_sim.insert_message(USER, make_raw("<two@safesend.test>")))
        if later < first:
            break
    assert later < first
    from_delta = set(mailer.added_since(checkpoint).gmail_ids())
    from_search = {hit.gmail_id for hit in mailer.find_by_message_id("<two@safesend.test>")}
    assert from_delta == from_search == {first_copy_id("<two@safesend.test>"), later}


def test_delta_pages_are_followed_within_max_pages(graph_sim: GraphSimulator) -> None:
    mailer = mailer_for(graph_sim.url)
    checkpoint = mailer.current_history_id()
    for n in range(120):
        graph_sim.insert_message(USER, make_raw(f"<p{n}@safesend.test>"))
    one = mailer.added_since(checkpoint, max_pages=1)
    assert (one.complete, len(one.messages), one.pages) == (False, 100, 1)
    both = mailer.added_since(checkpoint, max_pages=2)
    assert (both.complete, len(both.messages)) == (True, 120)
    assert all(h.gmail_id.startswith(FIRST_COPY_PREFIX) for h in both.messages)


def _jwt(claims: dict[str, object]) -> str:
    def part(obj: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256', 'kid': 'k'})}.{part(claims)}.c2ln"


def test_msal_federated_credential_gets_one_token_and_reuses_it(graph_sim: GraphSimulator) -> None:
    graph_sim.configure(require_auth=True)
    fetched: list[str] = []

    def google_id_token(audience: str) -> str:
        fetched.append(audience)
        return _jwt({"iss": "https://accounts.google.com", "sub": "sa-123", "aud": audience, "exp": time.time() + 3600})

    http = BoundedLoginHttp(3.0, login_endpoint=graph_sim.url)
    tokens = GraphTokens(TENANT, CLIENT, federated_credential(GoogleIdTokenAssertion(fetch=google_id_token)), http)
    mailer = mailer_for(graph_sim.url, tokens)
    assert isinstance(mailer.send(make_raw("<f1@safesend.test>")), Accepted)
    assert isinstance(mailer.send(make_raw("<f2@safesend.test>")), Accepted)
    assert len(mailer.find_by_message_id("<f1@safesend.test>")) == 1
    assert fetched == ["api://AzureADTokenExchange"]
    assert [a["claims"]["sub"] for a in graph_sim.assertions()] == ["sa-123"]  # one token, cached by MSAL


def test_msal_certificate_credential_signs_an_assertion_with_the_thumbprint(graph_sim: GraphSimulator) -> None:
    graph_sim.configure(require_auth=True)
    pem, thumbprint = self_signed_certificate()
    tokens = GraphTokens(TENANT, CLIENT, certificate_credential(pem, thumbprint), BoundedLoginHttp(3.0, graph_sim.url))
    assert isinstance(mailer_for(graph_sim.url, tokens).send(make_raw("<c1@safesend.test>")), Accepted)
    (assertion,) = graph_sim.assertions()
    assert assertion["claims"]["iss"] == CLIENT and assertion["header"].get("x5t")


def test_no_token_means_nothing_was_sent(graph_sim: GraphSimulator) -> None:
    graph_sim.configure(require_auth=True)

    def refused_id_token(audience: str) -> str:
        return _jwt({"iss": "https://accounts.google.com", "sub": "sa", "aud": "wrong", "exp": time.time() + 60})

    tokens = GraphTokens(
        TENANT,
        CLIENT,
        federated_credential(GoogleIdTokenAssertion(fetch=refused_id_token)),
        BoundedLoginHttp(3.0, graph_sim.url),
    )
    outcome = mailer_for(graph_sim.url, tokens).send(make_raw("<t@safesend.test>"))
    assert isinstance(outcome, Failure)
    assert (outcome.bucket, outcome.retryable, outcome.code) == (Bucket.NOT_ACCEPTED, True, "auth_refresh")
    assert graph_sim.effects() == []


NESTED_JSON = b"[" * 100_000  # json.loads raises RecursionError, not ValueError


class _HostileGraph(QuietHandler):
    """Answers every request with `answer` (status, body): a Graph host that is not playing fair."""

    answer: tuple[int, bytes] = (400, NESTED_JSON)

    def do_GET(self) -> None:  # noqa: N802 - http.server calls it by this name
        self._reply()

    def do_POST(self) -> None:  # noqa: N802 - http.server calls it by this name
        self._reply()

    def _reply(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        status, body = self.answer
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def hostile_graph() -> Iterator[str]:
    with LoopbackHttpServer(_HostileGraph, name="hostile-graph") as server:
        yield server.url


def test_a_deeply_nested_json_answer_is_classified_never_raised(hostile_graph: str) -> None:
    """The send's answer came (a 400: refused); its body must not turn that into an exception that
    loses the outcome. A read's nested answer is a failed read, as any other malformed answer."""
    mailer = mailer_for(hostile_graph)
    _HostileGraph.answer = (400, NESTED_JSON)
    outcome = mailer.send(make_raw("<nested@safesend.test>"))
    assert isinstance(outcome, Failure) and outcome.bucket is Bucket.NOT_ACCEPTED and outcome.code == "graph_400"
    _HostileGraph.answer = (200, NESTED_JSON)
    with pytest.raises(MailboxUnavailableError):
        mailer.find_by_message_id("<nested@safesend.test>")
