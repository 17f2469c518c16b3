"""Never silent, never invented, for Graph: a 202 carries no message id, so GraphMailer names copies
(graph_mailer.named_copies). Whatever Sent Items shows at each look (any subset: lag, deletions), the
names the service collects (the 202's and every look's) never outnumber the real copies, and one look
that shows every copy yields exactly as many names as copies: a duplicate is always seen, never made up."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from safesend.adapters.graph_mailer import first_copy_id, named_copies
from tests.props import examples

PROPS = settings(max_examples=examples(300), deadline=None)
MID = "<job-1@mail.example.com>"


def copies(n: int) -> list[dict[str, str]]:
    return [
        {"id": f"AAMk{i:03d}", "internetMessageId": MID, "createdDateTime": f"2026-12-01T12:00:{i:02d}Z"}
        for i in range(n)
    ]


@PROPS
@given(
    n=st.integers(1, 6),
    looks=st.lists(st.lists(st.integers(0, 5), max_size=6), max_size=6),
    accepted=st.booleans(),
    shuffle=st.randoms(use_true_random=False),
)
def test_names_never_outnumber_copies_and_a_full_look_counts_them_all(
    n: int, looks: list[list[int]], accepted: bool, shuffle: object
) -> None:
    real = copies(n)
    known: set[str] = {first_copy_id(MID)} if accepted else set()  # a 202: some copy exists
    for look in looks:
        shown = [real[i] for i in dict.fromkeys(i for i in look if i < n)]
        shuffle.shuffle(shown)  # type: ignore[attr-defined]  # answer order is not promised
        known |= {hit.gmail_id for hit in named_copies(shown)}
        assert len(known) <= n
    full = {hit.gmail_id for hit in named_copies(list(reversed(real)))}
    assert len(full) == n
    assert len(known | full) == n


def test_one_copy_has_one_name_whoever_reports_it() -> None:
    (only,) = copies(1)
    assert [h.gmail_id for h in named_copies([only])] == [first_copy_id(MID)]
    assert named_copies([only])[0].is_sent


def test_copies_of_other_message_ids_are_named_apart() -> None:
    other = {"id": "AAMkX", "internetMessageId": "<other@x.example>", "createdDateTime": "2026-12-01T11:00:00Z"}
    names = [h.gmail_id for h in named_copies([*copies(2), other])]
    assert names == [first_copy_id("<other@x.example>"), first_copy_id(MID), "AAMk001"]
