"""Issue 18.10 and 18.11: hostile credential headers are a 401 (or the CSRF 403), never a 500, never
skipped, and a token whose signature Cloud Run stripped counts only in the header Cloud Run verified."""

from __future__ import annotations

import json
import time

import pytest
from werkzeug.datastructures import Headers

from safesend.core.auth import SIGNATURE_HEADER, sign
from safesend.entrypoints.reviewer_auth import CsrfError
from tests.unit.test_http_security import (  # noqa: F401 - fixtures
    BODY,
    SECRET,
    TASKS,
    api,
    iam_api,
    id_token,
    request,
    stripped,
    untouched,
    world,
)
from tests.unit.test_reviewer_auth import ANN, REVIEW_ID, csrf_auth


# ----------------------------------------------------------------------------- 18.10 timestamps
@pytest.mark.parametrize(
    "stamp",
    ["9" * 400, "9" * 13, "²", "１７０００００００", "+1700000000", " 1700000000", "1_700_000_000", "", "-5"],
    ids=[
        "400 nines",
        "13 digits",
        "superscript two",
        "fullwidth digits",
        "plus sign",
        "space",
        "underscores",
        "empty",
        "negative",
    ],
)
def test_an_hmac_timestamp_that_is_not_1_to_12_ascii_digits_is_401(api, world, stamp):
    raw = json.dumps(BODY).encode()
    digest = sign(SECRET, int(time.time()), raw).split("v1=", 1)[1]
    status, payload = request(api.send, data=raw, headers={SIGNATURE_HEADER: f"t={stamp},v1={digest}"})
    assert status == 401 and payload["error"] == "unauthenticated"
    assert untouched(world)


def test_two_hmac_timestamps_are_401(api, world):
    raw = json.dumps(BODY).encode()
    good = sign(SECRET, int(time.time()), raw)
    status, _ = request(api.send, data=raw, headers={SIGNATURE_HEADER: f"t=1,{good}"})
    assert status == 401 and untouched(world)


@pytest.mark.parametrize("stamp", ["²", "１８００００００００", "٣", "9" * 400])
def test_a_csrf_token_timestamp_of_unicode_digits_is_a_csrf_refusal(stamp):
    with pytest.raises(CsrfError, match="malformed"):
        csrf_auth().check_token(ANN, REVIEW_ID, f"v1.{stamp}.abc")


# ----------------------------------------------------------------------------- 18.11 headers
def test_a_stripped_token_in_authorization_is_refused_when_cloud_run_verified_x_serverless(iam_api, world):
    """Cloud Run verified X-Serverless-Authorization (an API key rides there only in this test's
    sense of "something else"): the stripped token in Authorization was checked by nobody."""
    headers = {
        "X-Serverless-Authorization": f"Bearer {stripped(id_token(email=TASKS))}",
        "Authorization": f"Bearer {stripped(id_token())}",
    }
    status, payload = request(iam_api.sweep, data="{}", headers=headers)
    assert status == 401 and payload["error"] == "unauthenticated"


def test_a_stripped_token_in_the_verified_header_still_passes(iam_api, world):
    invoker = {"X-Serverless-Authorization": f"Bearer {stripped(id_token(email=TASKS))}"}
    assert request(iam_api.sweep, data="{}", headers=invoker)[0] == 200


@pytest.mark.parametrize(
    "value",
    ["Basic dXNlcjpwYXNz", "Bearer", "Bearer ", "", "Token abc", "Bearer a b", "Bearer a,Bearer b"],
    ids=["basic", "bearer alone", "bearer space", "empty", "other scheme", "two words", "joined repeat"],
)
def test_an_unparseable_credential_header_is_401_not_skipped(api, world, value):
    """Next to a valid signature: before, the odd header was skipped and the request went through."""
    raw = json.dumps(BODY).encode()
    headers = {SIGNATURE_HEADER: sign(SECRET, int(time.time()), raw), "X-Serverless-Authorization": value}
    status, payload = request(api.send, data=raw, headers=headers)
    assert status == 401 and payload["error"] == "unauthenticated"
    assert untouched(world)


@pytest.mark.parametrize("name", ["Authorization", "X-Serverless-Authorization", SIGNATURE_HEADER])
def test_a_repeated_credential_header_is_401(api, world, name):
    raw = json.dumps(BODY).encode()
    good = sign(SECRET, int(time.time()), raw)
    headers = Headers([(SIGNATURE_HEADER, good)])
    first = good if name == SIGNATURE_HEADER else f"Bearer {id_token()}"
    headers.add(name, first)
    headers.add(name, "Bearer something-else" if name != SIGNATURE_HEADER else "t=1,v1=00")
    status, payload = request(api.send, data=raw, headers=headers)
    assert status == 401 and payload["error"] == "unauthenticated"
    assert untouched(world)


def test_a_plain_mapping_of_repeated_headers_is_read_through_getlist():
    from safesend.core.auth import header_values

    headers = Headers([("Authorization", "Bearer a"), ("Authorization", "Bearer b")])
    assert header_values(headers, "authorization") == ["Bearer a", "Bearer b"]
    assert header_values({"Authorization": "Bearer a"}, "Authorization") == ["Bearer a"]
