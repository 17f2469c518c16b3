"""Python values <-> Firestore's REST `Value` JSON (the document format of the v1 REST API).

The mapping is the one google-cloud-firestore uses, so documents written by either read the same:
None -> nullValue, bool -> booleanValue, int -> integerValue (a decimal string: int64 does not fit
a JSON number), float -> doubleValue, str -> stringValue, bytes -> bytesValue (base64), datetime ->
timestampValue (UTC, RFC 3339), list/tuple -> arrayValue, dict -> mapValue. Naive datetimes are
taken as UTC, as the client library does. Timestamps read back keep microseconds: Firestore stores
nanoseconds, Python's datetime holds microseconds, and every time we write has at most those.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_TIMESTAMP = re.compile(r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})\Z")
_SPECIAL_DOUBLES = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class UnsupportedValueError(ValueError):
    """A value Firestore cannot store (an int outside int64, a non-string map key, an unknown type)."""


def encode_fields(data: Mapping[str, Any]) -> dict[str, Any]:
    """A document's `fields` from a dict of Python values."""
    fields: dict[str, Any] = {}
    for key, value in data.items():
        if not isinstance(key, str):
            raise UnsupportedValueError(f"map keys must be strings, not {type(key).__name__}")
        fields[key] = encode_value(value)
    return fields


def encode_value(value: Any) -> dict[str, Any]:
    if value is None:
        return {"nullValue": None}
    if isinstance(value, bool):  # before int: bool is an int subclass
        return {"booleanValue": value}
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise UnsupportedValueError(f"integer {value} does not fit Firestore's int64")
        return {"integerValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": _encode_double(value)}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, bytes):
        return {"bytesValue": base64.b64encode(value).decode("ascii")}
    if isinstance(value, datetime):
        return {"timestampValue": format_timestamp(value)}
    if isinstance(value, list | tuple):
        return {"arrayValue": {"values": [encode_value(v) for v in value]} if value else {}}
    if isinstance(value, Mapping):
        return {"mapValue": {"fields": encode_fields(value)} if value else {}}
    raise UnsupportedValueError(f"Firestore cannot store a {type(value).__name__}")


def decode_fields(fields: Mapping[str, Any] | None) -> dict[str, Any]:
    """A dict of Python values from a document's `fields` (absent for an empty document)."""
    return {key: decode_value(value) for key, value in (fields or {}).items()}


def decode_value(value: Mapping[str, Any]) -> Any:
    """Raises ValueError for a value that is not one of Firestore's types (a damaged document)."""
    if len(value) != 1:
        raise ValueError(f"a Firestore value has exactly one type key, got {sorted(value)}")
    kind, raw = next(iter(value.items()))
    if kind == "nullValue":
        return None
    if kind == "booleanValue":
        return bool(raw)
    if kind == "integerValue":
        return int(raw)
    if kind == "doubleValue":
        return _SPECIAL_DOUBLES[raw] if isinstance(raw, str) and raw in _SPECIAL_DOUBLES else float(raw)
    if kind in ("stringValue", "referenceValue"):
        return str(raw)
    if kind == "bytesValue":
        return base64.b64decode(raw)
    if kind == "timestampValue":
        return parse_timestamp(raw)
    if kind == "arrayValue":
        return [decode_value(v) for v in (raw or {}).get("values", [])]
    if kind == "mapValue":
        return decode_fields((raw or {}).get("fields"))
    if kind == "geoPointValue":
        return dict(raw)
    raise ValueError(f"unknown Firestore value type {kind!r}")


def format_timestamp(value: datetime) -> str:
    aware = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return aware.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"  # strftime's %Y drops zero padding


def parse_timestamp(text: str) -> datetime:
    """RFC 3339 as Firestore writes it (up to nanoseconds, Z or an offset), as an aware UTC datetime."""
    match = _TIMESTAMP.match(text)
    if match is None:
        raise ValueError(f"not an RFC 3339 timestamp: {text[:40]!r}")
    seconds, fraction, zone = match.groups()
    micros = (fraction or "").ljust(6, "0")[:6]
    offset = "+00:00" if zone == "Z" else zone
    return datetime.fromisoformat(f"{seconds}.{micros}{offset}").astimezone(UTC)


def _encode_double(value: float) -> float | str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value
