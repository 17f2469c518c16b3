"""Strict reading of a compact JWT's parts, before any library sees it: a token is attacker input.

Shared by the two verifiers (Google ID tokens for callers and Cloud's invokers, IAP assertions for
reviewers). Errors carry no part of the token, so nothing derived from it reaches a log or a body.
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any


class MalformedTokenError(ValueError):
    """Not a well-formed JWT part; deliberately says nothing about the content."""

    def __init__(self) -> None:
        super().__init__("malformed")


def b64url(segment: str) -> bytes:
    """base64url without padding, strictly (no stray characters)."""
    try:
        return base64.b64decode(segment + "=" * (-len(segment) % 4), altchars=b"-_", validate=True)
    except ValueError:
        raise MalformedTokenError() from None


def json_object(segment: str) -> dict[str, Any]:
    """A header or claims segment: a JSON object, with no NaN/Infinity constants."""
    try:
        value = json.loads(b64url(segment).decode("utf-8"), parse_constant=_no_constant)
    except (ValueError, RecursionError):  # binascii.Error, UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise MalformedTokenError() from None
    if not isinstance(value, dict):
        raise MalformedTokenError()
    return value


def numeric_date(value: object) -> float | None:
    """A NumericDate as seconds, or None unless a finite int or float (bool is an int in Python)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        seconds = float(value)
    except OverflowError:  # an int beyond any float: no date
        return None
    return seconds if math.isfinite(seconds) else None


def _no_constant(name: str) -> float:
    raise ValueError("NaN and Infinity are not JSON")
