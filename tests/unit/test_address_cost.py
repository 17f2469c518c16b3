"""An address costs time linear in its length, and the headers it builds are bounded.

Found by the security review: a lazy display name followed by `\\s*` made the address patterns of
validation and mime backtrack quadratically over a run of spaces (60,000 spaces: seconds; the
1 MiB body cap: most of an hour of one worker's CPU, per field, per request). And the email
package reads an address header back (mime.verify_mime) in time superlinear in its words, so
display names and the Reply-To list, which nothing bounded, are capped.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from safesend.core.keys import job_id_for, message_id_for
from safesend.core.mime import OutgoingMessage, build_mime
from safesend.core.validation import MAX_DISPLAY_NAME_CHARS, MAX_REPLY_TO, parse_send_request
from tests.unit.test_validation_headers import ADDRESS_FIELDS, DEFAULT_FROM, bad_fields, body

SPACES = " " * 60_000
CPU_BOUND_S = 1.0  # the fixed patterns take milliseconds; the quadratic ones took 8 s and more


def cpu_seconds(call) -> float:
    """CPU time of `call` in this process: a loaded machine slows the wall clock, not this."""
    start = time.process_time()
    call()
    return time.process_time() - start


@pytest.mark.parametrize(
    "item",
    [
        "ann@example.com" + SPACES + "x",  # no `<` at all
        "Ann" + SPACES + "Lee <ann@example.com>",  # a name with a run of spaces
        "Ann" + SPACES + "<ann@example",  # an unfinished address
    ],
)
def test_validating_a_run_of_spaces_is_linear(item):
    spent = cpu_seconds(lambda: bad_fields(body(to=item)))
    assert spent < CPU_BOUND_S
    assert set(bad_fields(body(to=item))) == {"to"}


def test_building_a_stored_name_with_a_run_of_spaces_is_linear():
    """A payload stored before today's caps is rebuilt for every resend: mime's own reading of it
    must be linear too."""
    message = OutgoingMessage(
        sender="shop@example.com", to=("Ann" + SPACES + "Lee <ann@example.com>",), subject="s", text="t"
    )
    key = "k-spaces"
    mime: list[bytes] = []
    spent = cpu_seconds(
        lambda: mime.append(
            build_mime(message, message_id_for(key, "example.com"), job_id_for(key), datetime(2026, 1, 1, tzinfo=UTC))
        )
    )
    assert spent < CPU_BOUND_S
    assert b"To: Ann Lee <ann@example.com>\r\n" in mime[0]


@pytest.mark.parametrize("field", ADDRESS_FIELDS)
def test_display_names_over_the_cap_are_refused(field):
    longest = "é" * MAX_DISPLAY_NAME_CHARS
    parsed = parse_send_request(body(**{field: f"{longest} <ann@example.com>"}), DEFAULT_FROM)
    assert longest in (parsed.payload["from"] if field == "from" else parsed.payload[field][0])
    fields = bad_fields(body(**{field: f'"{longest}x" <ann@example.com>'}))
    assert set(fields) == {field} and str(MAX_DISPLAY_NAME_CHARS) in fields[field]


def test_reply_to_holds_at_most_the_cap():
    addresses = [f"r{i}@example.com" for i in range(MAX_REPLY_TO + 1)]
    assert len(parse_send_request(body(reply_to=addresses[:-1]), DEFAULT_FROM).message.reply_to) == MAX_REPLY_TO
    fields = bad_fields(body(reply_to=addresses))
    assert set(fields) == {"reply_to"} and str(MAX_REPLY_TO) in fields["reply_to"]
