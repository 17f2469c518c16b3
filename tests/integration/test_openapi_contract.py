"""Contract test: openapi.yaml against the running local stack, with schemathesis 4.

The stack (devstack.stack.LocalStack: Firestore, Pub/Sub and Cloud Tasks emulators, the Gmail
simulator behind the fault relay, and the functions under functions-framework) is started
once for this module and stopped at the end. Sends to configured channels really go through the
simulator.

Authentication is switched off in the stack (SAFESEND_AUTH_DISABLED=1, set explicitly below,
as on every local stack): the fuzzer cannot mint Google ID tokens or HMAC signatures, and the
point here is the shape of the API. The 401/403 answers are documented in the spec but not
reached here; the auth rules have their own tests. test_stack_serves_the_documented_routes_with_
auth_off guards against a vacuous run in which every call would be a (documented) 401.

test_api_conforms_to_openapi: for every operation in the spec, schemathesis generates schema-valid
and schema-invalid requests (the spec's examples, its coverage cases, then MAX_EXAMPLES fuzzed
cases; derandomized, so a run is reproducible) and checks every answer with CHECKS: no 5xx (503
is documented for real outages, but the local stack has none, so any 5xx fails), a documented
status code and content type, and a body and headers that match the documented schemas. Hooks
(tests/integration/openapi_hooks.py) make a good share of /send bodies fully valid, repeat keys so
replays and payload mismatches happen, and point /status and /reconcile at existing jobs.

test_edge_answers_conform_to_openapi: the requests a schema-driven fuzzer seldom builds (over
1 MiB, not JSON, nested too deep, ids that are not valid Firestore document ids), validated with
the same checks. test_fault_outcomes_conform_to_openapi injects one Gmail fault at a time (relay
or simulator) to reach the answers a healthy Gmail never produces (202 while reconciling, 422 with
a failed job, status views with errors and mailbox hits) and validates each of them, then every
/status answer until the job settles. test_contract_run_exercised_the_api prints what the run
reached and fails if the fuzzing only ever saw refusals.

Run: .venv/bin/python -m pytest tests/integration/test_openapi_contract.py -q -p no:cacheprovider
(about 40 s; OPERATION_TIMEOUT_S caps each fuzzed operation).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup, as_reported_failure
from schemathesis.generation.feedback import FeedbackSources
from schemathesis.pytest._test_builder import build_operation_test
from schemathesis.python._constants.orchestrator import make_constants_value_source
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from devstack.stack import LocalStack, StackConfig
from tests.emulator_fixtures import SharedEmulators
from tests.integration import openapi_hooks

pytestmark = [pytest.mark.integration, pytest.mark.functions_out_of_process]

MAX_EXAMPLES = 50  # fuzzed cases per operation (explicit examples and coverage cases come on top)
REQUEST_TIMEOUT_S = 30
OPERATION_TIMEOUT_S = 120  # hard stop per fuzzed operation; the whole file normally takes ~40 s
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]

schema = schemathesis.openapi.from_path(openapi_hooks.SPEC_PATH)
openapi_hooks.install(schema)
TALLY = openapi_hooks.Tally()


@schema.hook
def after_call(context, case, response) -> None:  # schemathesis hook signature
    TALLY.record(case, response)


@pytest.fixture(scope="module")
def stack(shared_emulators: SharedEmulators) -> Iterator[LocalStack]:
    config = StackConfig(auth=False)
    # /decide past its 403: the fuzzed decisions reach validation and the decision path (400, 409).
    config.service_env = {**config.service_env, "SAFESEND_API_DECIDERS": "unauthenticated-local"}
    with shared_emulators.stack_for("openapi", config) as running:
        yield running


@pytest.fixture(scope="module")
def http(stack: LocalStack) -> Iterator[requests.Session]:
    with requests.Session() as session:
        yield session


# ------------------------------------------------------------------------------ the spec itself
def test_spec_is_valid_openapi_3_and_covers_exactly_the_routes():
    raw = openapi_hooks.load_spec()
    assert str(raw["openapi"]).startswith("3.")
    loaded = schemathesis.openapi.from_path(openapi_hooks.SPEC_PATH)
    loaded.validate()  # against the OpenAPI meta-schema
    operations = [result.ok() for result in loaded.get_all_operations()]  # .ok() raises on a broken operation
    assert {op.path for op in operations} == openapi_hooks.ROUTES
    assert {(op.method.upper(), op.path) for op in operations} == {
        ("POST", "/send"),
        ("POST", "/decide"),
        ("GET", "/status"),
        ("GET", "/mailboxes"),
        ("POST", "/reconcile"),
        ("POST", "/sweep"),
        ("POST", "/notify"),
    }
    # The hook's copy of the server-side channel list and the spec's enum must agree.
    assert tuple(raw["components"]["schemas"]["Channel"]["enum"]) == openapi_hooks.CHANNELS
    # The fixed bodies the hook replays are valid by the spec.
    is_valid = openapi_hooks.validator(raw, "SendRequest").is_valid
    assert all(is_valid(body) for body in openapi_hooks.FIXED_BODIES)


def test_stack_serves_the_documented_routes_with_auth_off(stack, http):
    """Guards against a vacuous run: with auth on, every fuzzed call would be a documented 401."""
    body = openapi_hooks.FIXED_BODIES[0]
    response = http.post(f"{stack.url}/send", json=body, timeout=REQUEST_TIMEOUT_S)
    assert response.status_code == 200, response.text
    job_id = response.json()["job_id"]
    assert http.get(f"{stack.url}/status", params={"job_id": job_id}, timeout=REQUEST_TIMEOUT_S).status_code == 200
    assert http.post(f"{stack.url}/sweep", json={}, timeout=60).status_code == 200
    assert http.post(f"{stack.url}/reconcile", json={"job_id": job_id}, timeout=REQUEST_TIMEOUT_S).status_code == 200


# ------------------------------------------------------------------------------ the contract run
# One test per operation of the spec, built when it runs. `@schema.parametrize()` built every
# operation's hypothesis test, its coverage cases included, while collecting: ~4.3 CPU-s in each
# process that collects the suite (every xdist worker, the gate's warm-up), for the one worker that
# runs them. The build below is the one schemathesis's pytest plugin makes (schemathesis.pytest.
# _test_builder.build_operation_test, the same phases, config, hooks and checks: pinned in the lock,
# an API change fails this module's import or its tests, never silently).
OPERATIONS = [result.ok().label for result in schema.get_all_operations()]


@functools.cache
def feedback() -> FeedbackSources:
    """The generation feedback the plugin makes once for all operations (the spec's constants)."""
    return FeedbackSources(constants_value_source=make_constants_value_source(schema))


@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)
def conforms(case, stack, http):
    case.call_and_validate(base_url=stack.url, session=http, checks=CHECKS, timeout=REQUEST_TIMEOUT_S)


@pytest.mark.timeout(OPERATION_TIMEOUT_S)
@pytest.mark.parametrize("operation", OPERATIONS)
def test_api_conforms_to_openapi(operation, stack, http):
    found = schema.find_operation_by_label(operation)
    assert found is not None, operation
    fuzz = build_operation_test(
        config=schema.config,
        operation=found,
        test_func=conforms,
        given_kwargs={},
        feedback=feedback(),
    )
    try:
        fuzz(stack=stack, http=http)
    except FailureGroup as exc:  # as the plugin reports it: the failures and a curl line to reproduce
        raise as_reported_failure(exc) from None


# ------------------------------------------------------------------------------ what fuzzing rarely reaches
JSON_TYPE = {"Content-Type": "application/json"}
OVERSIZE = b'{"text": "' + b"x" * (1 << 20) + b'"}'  # just over the 1 MiB request limit
DEEP_JSON = b'{"to": ' + b"[" * 5000 + b"]" * 5000 + b"}"  # 10 kB, nested deeper than Python's recursion limit
EDGE_CASES = [
    # (id, method, path, query, headers, raw body): answers that must match the spec as well
    ("send-oversize", "POST", "/send", None, JSON_TYPE, OVERSIZE),
    ("send-text-plain", "POST", "/send", None, {"Content-Type": "text/plain"}, b"{}"),
    ("send-no-content-type", "POST", "/send", None, {}, b'{"to": "a@b.cc"}'),
    ("send-malformed-json", "POST", "/send", None, JSON_TYPE, b'{"to": '),
    ("send-invalid-utf8", "POST", "/send", None, JSON_TYPE, b'{"text": "\xff"}'),
    ("send-json-array", "POST", "/send", None, JSON_TYPE, b"[]"),
    ("send-empty-body", "POST", "/send", None, JSON_TYPE, b""),
    ("status-no-key", "GET", "/status", {}, {}, None),
    ("status-incomplete-key-fields", "GET", "/status", {"customer_id": "c", "event_type": "e"}, {}, None),
    ("status-id-with-slash", "GET", "/status", {"job_id": "a/b"}, {}, None),
    ("status-reserved-firestore-id", "GET", "/status", {"job_id": "__x__"}, {}, None),
    ("status-dot-dot-id", "GET", "/status", {"job_id": ".."}, {}, None),
    ("send-deeply-nested-json", "POST", "/send", None, JSON_TYPE, DEEP_JSON),
    ("reconcile-id-with-slash", "POST", "/reconcile", None, JSON_TYPE, b'{"job_id": "a/b"}'),
    ("reconcile-reserved-firestore-id", "POST", "/reconcile", None, JSON_TYPE, b'{"job_id": "__x__"}'),
    ("reconcile-malformed-json", "POST", "/reconcile", None, JSON_TYPE, b'{"job_id": '),
    ("reconcile-deeply-nested-json", "POST", "/reconcile", None, JSON_TYPE, DEEP_JSON),
    ("reconcile-no-body", "POST", "/reconcile", None, {}, None),
    ("reconcile-oversize", "POST", "/reconcile", None, JSON_TYPE, OVERSIZE),
    ("sweep-no-body", "POST", "/sweep", None, {}, None),
    ("sweep-oversize", "POST", "/sweep", None, JSON_TYPE, OVERSIZE),
]


@pytest.mark.parametrize(
    "method, path, query, headers, body", [pytest.param(*case[1:], id=case[0]) for case in EDGE_CASES]
)
def test_edge_answers_conform_to_openapi(stack, http, method, path, query, headers, body):
    """Requests a schema-driven fuzzer seldom or never builds (over 1 MiB, not JSON, ids that are
    not valid Firestore document ids ...): the answer must still be documented and conform."""
    response = http.request(
        method, f"{stack.url}{path}", params=query, headers=headers, data=body, timeout=REQUEST_TIMEOUT_S
    )
    operation = schema[path][method]
    TALLY.record(operation.Case(query=query), response)
    try:
        operation.Case().validate_response(response, checks=CHECKS)
        return
    except FailureGroup as exc:  # its "Reproduce with" line shows an empty request: name the real one
        report = str(exc).split("Reproduce with:")[0].strip()
    shown = body if body is None or len(body) <= 200 else body[:200] + b"... (%d bytes)" % len(body)
    pytest.fail(f"request: {method} {path} query={query} headers={headers} body={shown!r}\n{report}", pytrace=False)


# ------------------------------------------------------------------------------ what a healthy Gmail never answers
SETTLED = {"sent", "review", "failed", "cancelled"}
FAULTS = [
    # (id, how Gmail misbehaves once, channel, the /send answer it leads to)
    ("response-dropped", ("relay", "forward-then-drop-response"), "transactional", 202),
    ("lost-before-gmail-on-review-channel", ("relay", "fail-before-forward"), "payments", 202),
    ("gmail-5xx", ("relay", "forward-then-5xx"), "notifications", 202),
    ("gmail-rate-limit", ("relay", "429-before-forward"), "refunds", 200),
    ("gmail-permanent-refusal", ("sim", 400), "transactional", 422),
]


def _validated(response: requests.Response, path: str, method: str, **case: object) -> requests.Response:
    TALLY.record(schema[path][method].Case(**case), response)
    schema[path][method].Case(**case).validate_response(response, checks=CHECKS)
    return response


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fault, channel, expected", [pytest.param(*f[1:], id=f[0]) for f in FAULTS])
def test_fault_outcomes_conform_to_openapi(stack, http, fault, channel, expected):
    """202 (in flight / reconciling), 422 with a failed job, and the status views along the way to
    a settled state are only reached when Gmail misbehaves: inject one fault, validate every answer."""
    kind, what = fault
    if kind == "relay":
        stack.relay.set_mode(what, count=1, delay_s=6)
    else:
        stack.sim.inject_errors(what, count=1, reason="invalidArgument")
    body = {
        "dedup_key": f"contract-fault-{channel}-{what}",
        "channel": channel,
        "to": ["Ann <ann@example.com>"],
        "cc": "Bob <bob@example.org>",
        "subject": "Fault ✓",
        "text": "Body",
        "html": "<p>Body</p>",
    }
    try:
        send = _validated(
            http.post(f"{stack.url}/send", json=body, timeout=REQUEST_TIMEOUT_S),
            "/send",
            "POST",
            body=body,
            media_type="application/json",
        )
    finally:
        stack.relay.set_mode("forward-and-respond")
    assert send.status_code == expected, send.text
    job_id = send.json()["job_id"]
    deadline = time.monotonic() + 40
    while True:
        query = {"job_id": job_id}
        view = _validated(
            http.get(f"{stack.url}/status", params=query, timeout=REQUEST_TIMEOUT_S), "/status", "GET", query=query
        ).json()
        if view["state"] in SETTLED or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert view["state"] in SETTLED, view
    _validated(
        http.post(f"{stack.url}/reconcile", json=query, timeout=REQUEST_TIMEOUT_S),
        "/reconcile",
        "POST",
        body=query,
        media_type="application/json",
    )
    _validated(
        http.post(f"{stack.url}/send", json=body, timeout=REQUEST_TIMEOUT_S),  # the replay
        "/send",
        "POST",
        body=body,
        media_type="application/json",
    )


def test_contract_run_exercised_the_api():
    """The schemathesis run above reached real outcomes, not only refusals (run the whole file)."""
    assert TALLY.generated, "the contract run did not run before this test: run the whole file"
    print(TALLY.report())
    send, outcomes = TALLY.statuses("POST /send"), TALLY.outcomes()
    assert send[200] >= 5, TALLY.report()  # accepted and sent (fresh or replayed)
    assert send[400] >= 5, TALLY.report()  # refused by validation
    assert any("replayed" in outcome for outcome in outcomes), TALLY.report()
    assert outcomes["422 payload_mismatch"] >= 1, TALLY.report()
    status = TALLY.statuses("GET /status")
    assert status[200] >= 5 and status[404] >= 1, TALLY.report()  # existing jobs and unknown ones
