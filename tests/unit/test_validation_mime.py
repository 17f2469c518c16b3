"""validation -> mime: an accepted request builds (so the pre-claim build never refuses what
validation let through), and its bytes are a function of the request, the job id and the
creation time only, so the pre-claim build is the first attempt's bytes."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from safesend.core.errors import RequestValidationError
from safesend.core.keys import job_id_for, message_id_for
from safesend.core.mime import build_mime
from safesend.core.validation import message_from_payload, parse_send_request
from tests.props import examples

PROPS = settings(max_examples=examples(200), deadline=None)
CREATED_AT = datetime(2026, 11, 29, 10, 11, 12, 345678, tzinfo=UTC)
text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
names = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), max_size=40)


def build(message, key: str, date: datetime = CREATED_AT) -> bytes:
    return build_mime(message, message_id_for(key, "notifications.mail.example-shop.com"), job_id_for(key), date)


@PROPS
@given(subject=names, name=names, text=text, html=st.none() | text, key=st.from_regex(r"[!-~]{1,40}", fullmatch=True))
def test_pre_claim_build_equals_every_rebuild_from_the_stored_payload(subject, name, text, html, key):
    body = {
        "dedup_key": key,
        "channel": "c",
        "to": [f"{name} <ann@example.com>", "bob@example.com"],
        "cc": f"{name} <cc@example.com>",
        "subject": subject or "s",
        "text": text,
        **({"html": html} if html is not None else {}),
    }
    try:
        request = parse_send_request(body, "Zoë Shop <shop@example.com>")
    except RequestValidationError:
        return
    first = build(request.message, request.dedup_key)
    stored = json.loads(json.dumps(request.payload))  # as Firestore gives it back
    assert build(message_from_payload(stored), request.dedup_key) == first
    # Firestore keeps microseconds; the Date header has whole seconds, so the bytes do not change.
    assert build(request.message, request.dedup_key, CREATED_AT.replace(microsecond=0)) == first
