"""Property: whatever text a caller puts in header-bound fields, either the request is refused
or the MIME has exactly our headers, one Message-ID, and the fields parse back unchanged."""

from __future__ import annotations

import email
from datetime import datetime, timezone
from email import policy

from hypothesis import assume, event, given, settings, strategies as st

from safesend.errors import RequestValidationError
from safesend.keys import job_id_for, message_id_for
from safesend.mime import build_mime
from safesend.validation import parse_send_request

EXPECTED_HEADERS = {"from", "to", "cc", "bcc", "reply-to", "subject", "date", "message-id", "x-safesend-job",
                    "mime-version", "content-type", "content-transfer-encoding"}
# Text biased towards what breaks headers: line breaks of every kind, NUL, colons, angle brackets.
hostile = st.text(alphabet=st.sampled_from(list("aZ09 :<>@,;\"\\\r\n\t\x00\x0b\x0c\x85\u2028\u2029éЖ😀")) | st.characters(),
                  max_size=60)
# Mostly printable Unicode (which must get through, encoded), sometimes hostile (which must not).
printable = st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), max_size=60)
field = st.one_of(printable, printable, hostile)


@settings(max_examples=400, deadline=None)
@given(subject=field, display=field, text=field, key_suffix=st.from_regex(r"[!-~]{0,20}", fullmatch=True))
def test_hostile_fields_are_refused_or_contained(subject, display, text, key_suffix):
    body = {"dedup_key": f"k{key_suffix}", "channel": "c", "to": [f"{display} <ann@example.com>"],
            "subject": subject, "text": text}
    try:
        request = parse_send_request(body, "Shop <shop@example.com>")
    except RequestValidationError:
        event("refused")
        return  # refused: nothing reaches MIME
    event("built")
    assume(subject.strip() == subject)  # the email parser drops a subject's outer whitespace
    message_id = message_id_for(request.dedup_key, "mail.example.com")
    raw = build_mime(request.message, message_id, job_id_for(request.dedup_key),
                     datetime(2026, 11, 29, tzinfo=timezone.utc))
    parsed = email.message_from_bytes(raw, policy=policy.default)
    names = [name.lower() for name in parsed.keys()]
    assert set(names) <= EXPECTED_HEADERS, f"unexpected header in {names}"
    assert names.count("message-id") == 1 and parsed["Message-ID"] == message_id
    assert names.count("to") == 1 and len(parsed["To"].addresses) == 1
    assert parsed["To"].addresses[0].addr_spec == "ann@example.com"
    assert parsed["Subject"] == subject
    for line in raw.split(b"\r\n"):
        assert b"\n" not in line and b"\r" not in line  # no bare line breaks anywhere
