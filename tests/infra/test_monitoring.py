"""Issue 20: the metrics and alerts of monitoring.tf, offline.

* every log-based metric counts an event the code logs (functions/safesend/core/signals.py) and reads
  only fields that event carries; its filter, run by logging_filter against the log lines the code
  really prints matches at least one of them: a renamed event or a filter typo fails here, not
  silently in production. fixtures/signal_lines.jsonl holds the functions' own stdout from the local
  stack (tests/integration/test_operations_stack.py with SAFESEND_SIGNAL_CAPTURE=FILE: sweep_completed,
  duplicate_found, job_needs_review, gmail_refused) and, for the events that run does not provoke, the
  lines tests/unit/test_signals.py captures with the production formatter (same variable);
* every alert has its runbook as markdown documentation;
* the dead man's switch waits at least 3 sweep intervals, for every environment's schedule;
* the gcloud path's rendered files (infra/monitoring_render.py) say what Terraform says."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from . import logging_filter as LF  # noqa: N812
from .support import ENVS, INFRA, MODULE, ROOT
from .tfmodel import ModuleModel

sys.path.insert(0, str(ROOT / "functions"))
from safesend.core.signals import SIGNALS

sys.path.insert(0, str(INFRA))
import monitoring_render

SPEC = json.loads((MODULE / "monitoring.json").read_text(encoding="utf-8"))
LINES_FILE = Path(__file__).parent / "fixtures" / "signal_lines.jsonl"
MIN_SWEEPS = 3


def captured() -> list[dict]:
    return [json.loads(line) for line in LINES_FILE.read_text(encoding="utf-8").splitlines() if line.strip()]


def event_of(metric_filter: str) -> str:
    found = re.findall(r'jsonPayload\.event="([a-z_]+)"', metric_filter)
    assert len(found) == 1, f"a metric counts exactly one event: {metric_filter}"
    return found[0]


def test_the_captured_lines_are_the_code_s_signals_with_every_field():
    lines = captured()
    assert {line["event"] for line in lines} == set(SIGNALS), "capture every signal (tests/unit/test_signals.py)"
    for line in lines:
        missing = set(SIGNALS[line["event"]].fields) - set(line)
        assert not missing, f"{line['event']}: the captured line lacks {missing}: capture it again"


@pytest.mark.parametrize("name", sorted(SPEC["metrics"]))
def test_every_metric_counts_a_signal_and_reads_only_its_fields(name):
    metric = SPEC["metrics"][name]
    event = event_of(metric["filter"])
    assert event in SIGNALS, f"{name}: no signal {event!r} in functions/safesend/core/signals.py"
    fields = set(SIGNALS[event].fields)
    used = set(metric["labels"].values()) | ({metric["value_field"]} if "value_field" in metric else set())
    assert used <= fields, f"{name} reads {used - fields}, which {event} lines do not carry"


@pytest.mark.parametrize("name", sorted(SPEC["metrics"]))
def test_every_metric_filter_matches_a_real_log_line(name):
    metric_filter = SPEC["metrics"][name]["filter"]
    entries = [LF.entry_from_stdout(line) for line in captured()]
    hits = [e for e in entries if LF.matches(metric_filter, e)]
    assert hits, f"{name}: its filter matches no log line the code prints:\n{metric_filter}"
    if "value_field" in SPEC["metrics"][name]:
        assert all(isinstance(e["jsonPayload"][SPEC["metrics"][name]["value_field"]], (int, float)) for e in hits)


def test_the_evaluator_refuses_what_it_does_not_know_and_reads_what_it_does():
    entry = LF.entry_from_stdout({"severity": "ERROR", "event": "x", "n": 3})
    assert LF.matches('resource.type="cloud_run_revision" AND (jsonPayload.event="x" OR NOT severity>=INFO)', entry)
    assert not LF.matches('jsonPayload.event="y" OR severity>=CRITICAL', entry)
    assert LF.matches("jsonPayload.n:* AND NOT jsonPayload.m:*", entry)
    for bad in ('jsonPayload.event="x" severity>=ERROR', 'resource.labels.x=starts_with("a")', "jsonPayload.event=~x"):
        with pytest.raises(LF.FilterSyntaxError):
            LF.matches(bad, entry)


@pytest.mark.parametrize("name", sorted(SPEC["alerts"]))
def test_every_alert_watches_a_declared_metric_and_has_its_runbook(name):
    alert = SPEC["alerts"][name]
    assert alert.get("filter") or alert.get("metric") in SPEC["metrics"]
    assert alert["type"] != "threshold" or alert["threshold"] in SPEC["thresholds"]
    policy = ModuleModel().instances("google_monitoring_alert_policy", "alert")
    [instance] = [i for i in policy if i.key == name]
    [doc] = instance["documentation"]
    assert doc["mime_type"] == "text/markdown"
    assert "**What it means.**" in doc["content"] and "**What to do.**" in doc["content"]
    assert "console.cloud.google.com" in doc["content"] or "review console" in doc["content"]


def _schedules() -> list[str]:
    schedules = {ModuleModel().variables["sweep_schedule"], "* * * * *", "*/2 * * * *"}
    for env in ENVS:  # a schedule an environment sets in its module block
        text = (INFRA / "envs" / env / "main.tf").read_text(encoding="utf-8")
        schedules.update(re.findall(r'sweep_schedule\s*=\s*"([^"]+)"', text))
    return sorted(schedules)


@pytest.mark.parametrize("schedule", _schedules())
def test_the_dead_man_s_switch_waits_three_sweep_intervals(schedule):
    minutes = 1 if schedule == "* * * * *" else int(re.fullmatch(r"\*/(\d+) \* \* \* \*", schedule).group(1))
    model = ModuleModel({"sweep_schedule": schedule})
    absent = [
        c
        for i in model.instances("google_monitoring_alert_policy", "alert")
        for cond in i["conditions"]
        for c in cond["condition_absent"]
    ]
    assert absent, "a dead man's switch (condition_absent) exists"
    for condition in absent:
        seconds = int(condition["duration"].removesuffix("s"))
        assert seconds >= MIN_SWEEPS * minutes * 60, f"{condition['duration']} < 3 sweeps of {schedule}"
        assert "sweep_completed" in condition["filter"]


def test_monitoring_is_on_by_default_and_every_resource_goes_with_the_switch():
    on, off = ModuleModel(), ModuleModel({"monitoring_enabled": False, "monitoring_notification_emails": ["a@b.c"]})
    assert len(on.instances("google_logging_metric", "signal")) == len(SPEC["metrics"])
    for tf_type, name in [b for b in on.blocks if b[0].startswith(("google_monitoring_", "google_logging_metric"))]:
        instances = off.instances(tf_type, name)
        assert instances == [] or all(i.key is None and i.attrs is None for i in instances), f"{tf_type}.{name}"


def test_the_gcloud_files_say_what_terraform_says(tmp_path):
    model = ModuleModel({"name_prefix": "ss-dev", "monitoring_thresholds": {"overdue_minutes": 7}})
    rendered = monitoring_render.render("ss-dev", "*/5 * * * *", {"overdue_minutes": 7}, [])
    for instance in model.instances("google_logging_metric", "signal"):
        body = rendered["metrics"][instance.key]
        assert (body["name"], body["filter"]) == (instance["name"], instance["filter"])
        assert body.get("valueExtractor") == instance["value_extractor"]
        assert body["labelExtractors"] == instance["label_extractors"]
    for instance in model.instances("google_monitoring_alert_policy", "alert"):
        policy = rendered["policies"][instance.key]
        assert policy["documentation"]["content"] == instance["documentation"][0]["content"]
        [condition] = instance["conditions"]
        for tf, api in (("condition_absent", "conditionAbsent"), ("condition_threshold", "conditionThreshold")):
            if condition[tf]:
                assert policy["conditions"][0][api]["filter"] == condition[tf][0]["filter"]
                assert policy["conditions"][0][api]["duration"] == condition[tf][0]["duration"]
        if condition["condition_threshold"]:
            assert policy["conditions"][0]["conditionThreshold"]["thresholdValue"] == pytest.approx(
                condition["condition_threshold"][0]["threshold_value"]
            )
    [dashboard] = model.instances("google_monitoring_dashboard", "safesend")
    assert json.loads(dashboard["dashboard_json"]) == rendered["dashboard"]
    script = monitoring_render.write(tmp_path, rendered).read_text()
    assert script.count("gcloud logging metrics create") == len(SPEC["metrics"])
    assert script.count("gcloud alpha monitoring policies create --policy-from-file=") == len(SPEC["alerts"])


def test_the_gcloud_path_renders_no_alert_into_nowhere(tmp_path, capsys):
    """As monitoring.tf's precondition: without a channel every alert, the dead man's switch included,
    only opens an incident nobody is told of; --no-channel says so knowingly."""
    with pytest.raises(SystemExit) as refused:
        monitoring_render.main([str(tmp_path / "none")])
    assert refused.value.code == 2 and "--channel" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()
    channel = "projects/p/notificationChannels/42"
    assert monitoring_render.main([str(tmp_path / "one"), "--channel", channel]) == 0
    policy = json.loads((tmp_path / "one" / "policies" / "sweep_missing.json").read_text())
    assert policy["notificationChannels"] == [channel]
    assert monitoring_render.main([str(tmp_path / "knowingly"), "--no-channel"]) == 0


@pytest.mark.parametrize("window", [300, 60])
def test_the_index_lag_alert_fires_past_half_the_unknown_window_per_mailbox(window):
    """Issue 20.3: p99 of the search lag (index_lag_observed, kind search) over half the deployment's
    unknown window, one series per mailbox; the gcloud path renders the same threshold."""
    model = ModuleModel({"unknown_window_seconds": window})
    [instance] = [i for i in model.instances("google_monitoring_alert_policy", "alert") if i.key == "index_lag_high"]
    [condition] = instance["conditions"][0]["condition_threshold"]
    assert condition["threshold_value"] == pytest.approx(window / 2)
    assert 'metric.labels.kind="search"' in condition["filter"] and '_index_lag"' in condition["filter"]
    [aggregation] = condition["aggregations"]
    assert aggregation["per_series_aligner"] == "ALIGN_PERCENTILE_99"
    assert aggregation["group_by_fields"] == ["metric.label.mailbox"]
    rendered = monitoring_render.render("safesend", "*/5 * * * *", {}, [], unknown_window_s=window)
    threshold = rendered["policies"]["index_lag_high"]["conditions"][0]["conditionThreshold"]
    assert threshold["thresholdValue"] == pytest.approx(window / 2)
    [metric] = [i for i in model.instances("google_logging_metric", "signal") if i.key == "index_lag"]
    assert metric["value_extractor"] == "EXTRACT(jsonPayload.lag_s)" and set(metric["label_extractors"]) == {
        "mailbox",
        "kind",
    }
    widgets = json.loads(model.instances("google_monitoring_dashboard", "safesend")[0]["dashboard_json"])
    assert any(w["title"] == SPEC["alerts"]["index_lag_high"]["title"] for w in widgets["gridLayout"]["widgets"])
