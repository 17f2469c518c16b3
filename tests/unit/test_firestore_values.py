"""firestore_values: the REST store's document codec, checked against google-cloud-firestore's own.

The deployed store writes and reads documents as REST JSON; documents already stored by the client
library (every deployment before the REST store) and written by it in tests must read the same.
So the property is: for any storable value, our encoding equals the library's protobuf encoding
rendered as JSON (timestamps compared as instants: protobuf's JSON drops zero fractions), and both
decode back to the value."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from google.cloud.firestore_v1 import _helpers
from google.protobuf.json_format import MessageToDict
from hypothesis import given, settings
from hypothesis import strategies as st

from safesend.adapters.firestore_values import (
    INT64_MAX,
    INT64_MIN,
    UnsupportedValueError,
    decode_fields,
    decode_value,
    encode_fields,
    encode_value,
    format_timestamp,
    parse_timestamp,
)
from tests.props import examples

utc_times = st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31), timezones=st.just(UTC))
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=INT64_MIN, max_value=INT64_MAX)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=20)
    | utc_times
)
# Firestore forbids an array directly inside an array: lists hold scalars and maps only.
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(scalars | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_size=4)
        | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def library_json(value: Any) -> dict[str, Any]:
    encoded: dict[str, Any] = MessageToDict(_helpers.encode_value(value)._pb)
    return encoded


def same_instants(ours: Any, theirs: Any) -> bool:
    """Equal JSON, except that timestamps are compared as instants."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        if set(ours) != set(theirs):
            return False
        return all(
            parse_timestamp(ours[k]) == parse_timestamp(theirs[k])
            if k == "timestampValue"
            else same_instants(ours[k], theirs[k])
            for k in ours
        )
    if isinstance(ours, list) and isinstance(theirs, list):
        return len(ours) == len(theirs) and all(same_instants(a, b) for a, b in zip(ours, theirs, strict=True))
    return bool(ours == theirs)


@settings(max_examples=examples(300), deadline=None)
@given(values)
def test_our_encoding_is_the_client_librarys_and_both_decode_to_the_value(value: Any) -> None:
    ours = encode_value(value)
    assert same_instants(ours, library_json(value))
    assert decode_value(ours) == value
    assert decode_value(library_json(value)) == value


@given(st.dictionaries(st.text(max_size=10), values, max_size=6))
def test_documents_round_trip(fields: dict[str, Any]) -> None:
    assert decode_fields(encode_fields(fields)) == fields


def test_special_doubles_round_trip_as_firestore_spells_them() -> None:
    assert encode_value(math.inf) == {"doubleValue": "Infinity"} == library_json(math.inf)
    assert encode_value(-math.inf) == {"doubleValue": "-Infinity"} == library_json(-math.inf)
    assert encode_value(math.nan) == {"doubleValue": "NaN"} == library_json(math.nan)
    assert decode_value({"doubleValue": "-Infinity"}) == -math.inf
    assert math.isnan(decode_value({"doubleValue": "NaN"}))


def test_bool_is_not_stored_as_an_integer() -> None:
    assert encode_value(True) == {"booleanValue": True}
    assert encode_value(1) == {"integerValue": "1"}


@pytest.mark.parametrize("bad", [INT64_MAX + 1, INT64_MIN - 1, {1: "x"}, object(), {1.5}])
def test_what_firestore_cannot_store_is_refused_before_sending(bad: Any) -> None:
    with pytest.raises(UnsupportedValueError):
        encode_value(bad)


def test_timestamps_keep_microseconds_and_read_nanoseconds_and_offsets() -> None:
    at = datetime(2026, 11, 29, 12, 0, 0, 123456, tzinfo=UTC)
    assert format_timestamp(at) == "2026-11-29T12:00:00.123456Z"
    assert parse_timestamp("2026-11-29T12:00:00.123456789Z") == at
    assert parse_timestamp("2026-11-29T12:00:00Z") == at.replace(microsecond=0)
    assert parse_timestamp("2026-11-29T14:00:00.123456+02:00") == at
    assert format_timestamp(datetime(5, 1, 2, 3, 4, 5)) == "0005-01-02T03:04:05.000000Z"  # naive = UTC, padded year
    assert format_timestamp(at.astimezone(timezone(timedelta(hours=-5)))) == "2026-11-29T12:00:00.123456Z"


@pytest.mark.parametrize(
    "damaged",
    [
        {"timestampValue": "yesterday"},
        {"integerValue": "twelve"},
        {"mysteryValue": 1},
        {"stringValue": "a", "integerValue": "1"},
        {},
    ],
)
def test_a_damaged_value_raises_value_error(damaged: dict[str, Any]) -> None:
    """ValueError is what readable_job catches: the sweeper logs and skips such a document."""
    with pytest.raises(ValueError):
        decode_value(damaged)
