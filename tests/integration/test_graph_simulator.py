"""The Graph simulator must answer like Microsoft Graph where safesend relies on it (real sockets, no mocks)."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest
import requests

from devstack.graph_sim import FEDERATED_AUDIENCE, GraphSimulator
from devstack.relay import FaultRelay

USER = "shop@contoso.example"
TIMEOUT_S = 5.0


def make_raw(message_id: str, to: str = "rcpt@example.com") -> bytes:
    return (
        f"From: {USER}\r\nTo: {to}\r\nSubject: hello\r\nMessage-ID: {message_id}\r\n"
        "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nbody\r\n"
    ).encode()


def send(base: str, raw: bytes, user: str = USER, timeout: float = TIMEOUT_S) -> requests.Response:
    return requests.post(
        f"{base}/v1.0/users/{user}/sendMail",
        data=base64.b64encode(raw),
        headers={"Content-Type": "text/plain"},
        timeout=timeout,
    )


def search(base: str, message_id: str, user: str = USER) -> list[dict[str, Any]]:
    answer = requests.get(
        f"{base}/v1.0/users/{user}/mailFolders/SentItems/messages",
        params={"$filter": f"internetMessageId eq '{message_id}'", "$select": "id,internetMessageId"},
        timeout=TIMEOUT_S,
    )
    assert answer.status_code == 200, answer.text
    return list(answer.json()["value"])


def test_send_mail_answers_202_with_no_body_and_keeps_the_message_id(graph_sim: GraphSimulator) -> None:
    answer = send(graph_sim.url, make_raw("<a1@safesend.test>"))
    assert answer.status_code == 202
    assert answer.content == b""
    hits = search(graph_sim.url, "<a1@safesend.test>")
    assert [h["internetMessageId"] for h in hits] == ["<a1@safesend.test>"]
    assert set(hits[0]) == {"id", "internetMessageId"}  # $select honoured
    assert search(graph_sim.url, "<other@safesend.test>") == []


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"%%% not base64 %%%", "ErrorMimeContentInvalidBase64String"),
        (b"", "ErrorMimeContentInvalidBase64String"),
        (base64.b64encode(b"no header section at all"), "ErrorMimeContentInvalid"),
    ],
)
def test_bad_base64_or_mime_is_400_and_nothing_is_sent(graph_sim: GraphSimulator, body: bytes, code: str) -> None:
    answer = requests.post(
        f"{graph_sim.url}/v1.0/users/{USER}/sendMail",
        data=body,
        headers={"Content-Type": "text/plain"},
        timeout=TIMEOUT_S,
    )
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == code
    assert graph_sim.effects() == []


def test_sent_items_lag_hides_a_copy_until_it_is_old_enough(graph_sim: GraphSimulator) -> None:
    graph_sim.configure(index_lag_s=30)
    assert send(graph_sim.url, make_raw("<lag@safesend.test>")).status_code == 202
    assert search(graph_sim.url, "<lag@safesend.test>") == []
    assert len(graph_sim.effects()) == 1  # accepted all the same
    graph_sim.advance_clock(31)
    assert len(search(graph_sim.url, "<lag@safesend.test>")) == 1


def test_save_to_sent_items_off_accepts_without_a_copy_to_find(graph_sim: GraphSimulator) -> None:
    graph_sim.configure(save_to_sent_items=False)
    assert send(graph_sim.url, make_raw("<nosave@safesend.test>")).status_code == 202
    assert search(graph_sim.url, "<nosave@safesend.test>") == []
    assert [e["saved"] for e in graph_sim.effects()] == [False]


def delta(url: str, prefer: str | None = None, **params: str) -> requests.Response:
    headers = {"Prefer": prefer} if prefer else {}
    return requests.get(url, params=params or None, headers=headers, timeout=TIMEOUT_S)


def test_delta_rounds_page_with_next_links_and_resume_from_the_delta_link(graph_sim: GraphSimulator) -> None:
    base = f"{graph_sim.url}/v1.0/users/{USER}/mailFolders/SentItems/messages/delta"
    for n in range(3):
        send(graph_sim.url, make_raw(f"<d{n}@safesend.test>"))
    first = delta(base, "odata.maxpagesize=2", **{"$select": "internetMessageId"}).json()
    assert len(first["value"]) == 2 and "@odata.nextLink" in first and "@odata.deltaLink" not in first
    second = delta(first["@odata.nextLink"], "odata.maxpagesize=2").json()
    assert [v["internetMessageId"] for v in second["value"]] == ["<d2@safesend.test>"]
    link = second["@odata.deltaLink"]
    assert delta(link).json()["value"] == []  # nothing new
    send(graph_sim.url, make_raw("<d3@safesend.test>"))
    again = delta(link).json()
    assert [v["internetMessageId"] for v in again["value"]] == ["<d3@safesend.test>"]


def test_delta_filter_on_received_date_time_starts_a_round_at_a_moment(graph_sim: GraphSimulator) -> None:
    base = f"{graph_sim.url}/v1.0/users/{USER}/mailFolders/SentItems/messages/delta"
    send(graph_sim.url, make_raw("<old@safesend.test>"))
    graph_sim.advance_clock(120)
    moment = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(graph_sim.now() - 1))
    send(graph_sim.url, make_raw("<new@safesend.test>"))
    page = delta(base, **{"$filter": f"receivedDateTime ge {moment}", "$select": "internetMessageId"}).json()
    assert [v["internetMessageId"] for v in page["value"]] == ["<new@safesend.test>"]
    bad = delta(base, **{"$filter": "subject eq 'x'"})
    assert bad.status_code == 400


def test_an_expired_delta_token_is_410_sync_state_not_found(graph_sim: GraphSimulator) -> None:
    graph_sim.configure(sync_state_ttl_s=60)
    base = f"{graph_sim.url}/v1.0/users/{USER}/mailFolders/SentItems/messages/delta"
    link = delta(base).json()["@odata.deltaLink"]
    graph_sim.advance_clock(61)
    expired = delta(link)
    assert expired.status_code == 410
    assert expired.json()["error"]["code"] == "SyncStateNotFound"
    forged = delta(f"{base}?$deltatoken=never-issued")
    assert forged.status_code == 410


def test_messages_per_minute_throttle_is_429_with_retry_after_and_accepts_nothing(graph_sim: GraphSimulator) -> None:
    graph_sim.configure(messages_per_minute=2)
    assert [send(graph_sim.url, make_raw(f"<t{n}@safesend.test>")).status_code for n in range(2)] == [202, 202]
    refused = send(graph_sim.url, make_raw("<t2@safesend.test>"))
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) > 0
    assert len(graph_sim.effects()) == 2
    graph_sim.advance_clock(61)
    assert send(graph_sim.url, make_raw("<t3@safesend.test>")).status_code == 202


def test_recipients_per_day_throttle_counts_every_recipient(graph_sim: GraphSimulator) -> None:
    graph_sim.configure(recipients_per_day=3)
    assert send(graph_sim.url, make_raw("<r1@safesend.test>", to="a@x.example, b@x.example")).status_code == 202
    assert send(graph_sim.url, make_raw("<r2@safesend.test>", to="c@x.example, d@x.example")).status_code == 429
    graph_sim.advance_clock(86_401)
    assert send(graph_sim.url, make_raw("<r3@safesend.test>", to="c@x.example, d@x.example")).status_code == 202


def test_injected_503_with_retry_after_may_or_may_not_have_accepted(graph_sim: GraphSimulator) -> None:
    graph_sim.inject_errors(503, retry_after_s=7)
    graph_sim.inject_errors(503, accept=True)
    first = send(graph_sim.url, make_raw("<i1@safesend.test>"))
    assert (first.status_code, first.headers["Retry-After"]) == (503, "7")
    assert graph_sim.effects() == []
    assert send(graph_sim.url, make_raw("<i2@safesend.test>")).status_code == 503
    assert [e["internetMessageId"] for e in graph_sim.effects()] == ["<i2@safesend.test>"]


def _jwt(header: dict[str, Any], claims: dict[str, Any]) -> str:
    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    return f"{part(header)}.{part(claims)}.c2lnbmF0dXJl"


def test_token_endpoint_parses_federated_and_certificate_assertions(graph_sim: GraphSimulator) -> None:
    graph_sim.configure(require_auth=True)
    assert send(graph_sim.url, make_raw("<auth@safesend.test>")).status_code == 401
    url = f"{graph_sim.url}/tenant-1/oauth2/v2.0/token"
    form = {
        "grant_type": "client_credentials",
        "client_id": "app-1",
        "scope": "https://graph.microsoft.com/.default",
        "client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
    }
    exp = int(graph_sim.now()) + 600
    federated = _jwt(
        {"alg": "RS256"}, {"iss": "https://accounts.google.com", "sub": "1234", "aud": FEDERATED_AUDIENCE, "exp": exp}
    )
    answer = requests.post(url, data={**form, "client_assertion": federated}, timeout=TIMEOUT_S)
    assert answer.status_code == 200, answer.text
    token = answer.json()["access_token"]
    sent = requests.post(
        f"{graph_sim.url}/v1.0/users/{USER}/sendMail",
        data=base64.b64encode(make_raw("<auth@safesend.test>")),
        headers={"Content-Type": "text/plain", "Authorization": f"Bearer {token}"},
        timeout=TIMEOUT_S,
    )
    assert sent.status_code == 202
    no_thumbprint = _jwt({"alg": "RS256"}, {"iss": "app-1", "sub": "app-1", "aud": url, "exp": exp})
    refused = requests.post(url, data={**form, "client_assertion": no_thumbprint}, timeout=TIMEOUT_S)
    assert refused.status_code == 401 and refused.json()["error"] == "invalid_client"
    expired = _jwt({"alg": "RS256", "x5t": "abc"}, {"iss": "app-1", "sub": "app-1", "aud": url, "exp": exp - 3600})
    assert requests.post(url, data={**form, "client_assertion": expired}, timeout=TIMEOUT_S).status_code == 401
    garbage = requests.post(url, data={**form, "client_assertion": "not.a-jwt"}, timeout=TIMEOUT_S)
    assert garbage.status_code == 401
    assert [a["claims"]["sub"] for a in graph_sim.assertions()] == ["1234"]


def test_control_endpoints_configure_and_move_the_clock(graph_sim: GraphSimulator) -> None:
    assert requests.post(f"{graph_sim.url}/_sim/config", json={"index_lag_s": 5}, timeout=TIMEOUT_S).status_code == 200
    send(graph_sim.url, make_raw("<c@safesend.test>"))
    assert search(graph_sim.url, "<c@safesend.test>") == []
    moved = requests.post(f"{graph_sim.url}/_sim/clock", json={"advance_s": 6}, timeout=TIMEOUT_S).json()
    assert moved["now"] >= graph_sim.now() - 1
    assert len(search(graph_sim.url, "<c@safesend.test>")) == 1
    bad = requests.post(f"{graph_sim.url}/_sim/config", json={"no_such": 1}, timeout=TIMEOUT_S)
    assert bad.status_code == 400


def test_behind_the_fault_relay_a_dropped_202_still_sent_the_message(graph_sim: GraphSimulator) -> None:
    with FaultRelay(graph_sim.url) as relay:
        relay.set_mode("forward-then-drop-response", count=1, mailbox=USER)
        with pytest.raises((requests.ConnectionError, requests.Timeout)):  # the 202 never comes back
            send(relay.url.rstrip("/"), make_raw("<drop@safesend.test>"), timeout=1.0)
        assert [e["internetMessageId"] for e in graph_sim.effects()] == ["<drop@safesend.test>"]
        assert len(search(relay.url.rstrip("/"), "<drop@safesend.test>")) == 1  # reads pass: mode is "send" only
        relay.set_mode("fail-before-forward", count=1)
        with pytest.raises(requests.ConnectionError):
            send(relay.url.rstrip("/"), make_raw("<never@safesend.test>"))
        assert len(graph_sim.effects()) == 1


def test_latency_holds_the_202_after_accepting_and_reads_wait_their_own_latency(graph_sim: GraphSimulator) -> None:
    """Benchmark 1's Graph column: the simulator answers after a set latency, like the Gmail one. A client
    that gives up before the 202 has still sent the message (an ambiguous send)."""
    graph_sim.set_latency(0.5, read_seconds=0.0)
    with pytest.raises(requests.exceptions.ReadTimeout):
        send(graph_sim.url, make_raw("<slow@safesend.test>"), timeout=0.1)
    assert [e["internetMessageId"] for e in graph_sim.effects()] == ["<slow@safesend.test>"]
    started = time.perf_counter()
    search(graph_sim.url, "<slow@safesend.test>")
    read_s = time.perf_counter() - started
    started = time.perf_counter()
    assert send(graph_sim.url, make_raw("<slow2@safesend.test>")).status_code == 202
    assert time.perf_counter() - started >= 0.5 > read_s
    with pytest.raises(ValueError, match="latency"):
        graph_sim.set_latency(-1.0)


def test_verbose_request_log_names_the_graph_simulator(capsys: pytest.CaptureFixture[str]) -> None:
    with GraphSimulator(verbose=True) as simulator:
        answer = requests.get(f"{simulator.url}/_sim/health", timeout=TIMEOUT_S)
    assert answer.status_code == 200
    lines = [line for line in capsys.readouterr().err.splitlines() if "/_sim/health" in line]
    assert len(lines) == 1
    assert lines[0].startswith("graph-sim: ")
