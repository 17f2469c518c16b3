"""/status shows a job's whole outbox (`callbacks`), the reviewers' email included: every notice it
can show must fit the documented StatusView (openapi.yaml, checked against the running stack)."""

from __future__ import annotations

from pathlib import Path

import yaml

from safesend.core.callbacks import REVIEWER_KINDS
from safesend.core.lifecycle import current_review_id
from safesend.entrypoints.views import job_view
from tests.unit.test_reviewers import ALL_TARGETS, in_review

SPEC = Path(__file__).resolve().parents[2] / "openapi.yaml"


def _notice_schema() -> dict:
    spec = yaml.safe_load(SPEC.read_text(encoding="utf-8"))
    return spec["components"]["schemas"]["StatusView"]["properties"]["callbacks"]["items"]["properties"]


def test_every_notice_kind_the_outbox_holds_is_documented():
    assert set(_notice_schema()["kind"]["enum"]) == REVIEWER_KINDS | {"callback"}


def test_the_status_of_a_job_whose_reviewers_got_an_email_fits_the_spec():
    world, job = in_review(reviewers=ALL_TARGETS)
    world.service.notify(job.id, current_review_id(job))
    view = job_view(world.store.get(job.id), with_events=True)
    kinds = {n["kind"] for n in view["callbacks"]}
    assert "email" in kinds
    assert kinds <= set(_notice_schema()["kind"]["enum"])
