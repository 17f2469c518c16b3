#!/usr/bin/env python3
"""The gcloud path's metrics, alerts and dashboard: monitoring.tf's resources rendered from the same
monitoring.json and runbooks, as the files gcloud reads, plus the commands that apply them.

    python3 infra/monitoring_render.py OUT_DIR [--prefix safesend] [--sweep-schedule "*/5 * * * *"]
        [--thresholds '{"overdue_minutes": 10}'] --channel projects/P/notificationChannels/ID [...]
        [--unknown-window 300]

At least one --channel is required (--no-channel renders alerts that notify nobody, knowingly).

writes OUT_DIR/metrics/<name>.json (LogMetric), OUT_DIR/policies/<alert>.json (AlertPolicy),
OUT_DIR/dashboard.json and OUT_DIR/apply.sh (gcloud logging metrics create --config-from-file,
gcloud alpha monitoring policies create --policy-from-file, gcloud monitoring dashboards create).
Mirrors monitoring.tf's expressions; tests/infra/test_monitoring.py checks they agree. Stdlib only.
"""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path
from typing import Any

import env_spec  # beside this file (python3 infra/monitoring_render.py puts infra/ on sys.path)

MODULE = Path(__file__).resolve().parent / "modules" / "safesend"


def sweep_interval_seconds(schedule: str) -> int:
    """monitoring.tf's local.sweep_interval_seconds (env_spec.py's, which the functions' env uses too)."""
    try:
        return env_spec.sweep_interval_seconds(schedule)
    except env_spec.SpecError as exc:
        raise SystemExit(str(exc)) from None


def render(
    prefix: str, schedule: str, thresholds: dict[str, float], channels: list[str], unknown_window_s: float = 300.0
) -> dict[str, Any]:
    """`unknown_window_s`: the deployment's SAFESEND_UNKNOWN_WINDOW_S (the index-lag alert is a share of it)."""
    spec = json.loads((MODULE / "monitoring.json").read_text(encoding="utf-8"))
    limits = {**spec["thresholds"], **thresholds}
    every = sweep_interval_seconds(schedule)
    metrics = {}
    for name, m in spec["metrics"].items():
        value = m.get("value_field")
        metric: dict[str, Any] = {
            "name": f"{prefix}_{name}",
            "description": m["description"],
            "filter": m["filter"],
            "labelExtractors": {label: f"EXTRACT(jsonPayload.{field})" for label, field in m["labels"].items()},
            "metricDescriptor": {
                "metricKind": "DELTA",
                "valueType": "DISTRIBUTION" if value else "INT64",
                "unit": m.get("unit", "1"),
                "labels": [{"key": label, "valueType": "STRING"} for label in m["labels"]],
            },
        }
        if value:
            metric["valueExtractor"] = f"EXTRACT(jsonPayload.{value})"
            metric["bucketOptions"] = {"exponentialBuckets": {"numFiniteBuckets": 32, "growthFactor": 2, "scale": 1}}
        metrics[name] = metric
    policies = {}
    for name, a in spec["alerts"].items():
        policies[name] = _policy(name, a, spec, prefix, every, limits, channels, unknown_window_s)
    return {"metrics": metrics, "policies": policies, "dashboard": _dashboard(spec, prefix)}


def chart_filter(alert: dict[str, Any], prefix: str) -> str:
    if alert.get("filter"):
        return str(alert["filter"]).replace("{prefix}", prefix)
    parts = [
        f'metric.type="logging.googleapis.com/user/{prefix}_{alert["metric"]}"',
        'resource.type="cloud_run_revision"',
        alert.get("label_filter", ""),
    ]
    return " AND ".join(p for p in parts if p)


def _policy(
    name: str,
    a: dict[str, Any],
    spec: dict[str, Any],
    prefix: str,
    every: int,
    limits: dict[str, float],
    ch: list[str],
    window_s: float,
) -> dict[str, Any]:
    condition: dict[str, Any] = {"displayName": a["title"]}
    if a["type"] == "absent":
        condition["conditionAbsent"] = {
            "filter": chart_filter(a, prefix),
            "duration": f"{every * a['sweeps']}s",
            "aggregations": [
                {"alignmentPeriod": f"{every}s", "perSeriesAligner": "ALIGN_DELTA", "crossSeriesReducer": "REDUCE_SUM"}
            ],
        }
    elif a["type"] == "threshold":
        summed = a["aligner"] in ("ALIGN_DELTA", "ALIGN_RATE")
        condition["conditionThreshold"] = {
            "filter": chart_filter(a, prefix),
            "comparison": "COMPARISON_GT",
            "thresholdValue": limits[a["threshold"]] * (window_s if a.get("per_unknown_window") else a["scale"]),
            "duration": "0s",
            "aggregations": [
                {
                    "alignmentPeriod": "300s",
                    "perSeriesAligner": a["aligner"],
                    "crossSeriesReducer": "REDUCE_SUM" if summed else "REDUCE_MAX",
                    "groupByFields": a.get("group_by", []),
                }
            ],
            "trigger": {"count": 1},
        }
    else:
        condition["conditionMatchedLog"] = {"filter": spec["metrics"][a["metric"]]["filter"]}
    runbook = (MODULE / "runbooks" / f"{name}.md").read_text(encoding="utf-8").replace("{prefix}", prefix)
    policy: dict[str, Any] = {
        "displayName": f"safesend {prefix}: {a['title']}",
        "combiner": "OR",
        "severity": a["severity"],
        "conditions": [condition],
        "notificationChannels": ch,
        "documentation": {
            "subject": f"safesend {prefix}: {a['title']}",
            "content": runbook,
            "mimeType": "text/markdown",
        },
    }
    if a["type"] == "log":
        policy["alertStrategy"] = {"autoClose": "1800s", "notificationRateLimit": {"period": "300s"}}
    return policy


def _dashboard(spec: dict[str, Any], prefix: str) -> dict[str, Any]:
    widgets = []
    for _, a in sorted(spec["alerts"].items()):  # Terraform iterates an object by sorted key
        aligner = a.get("aligner", "ALIGN_DELTA")
        aggregation = {
            "alignmentPeriod": "300s",
            "perSeriesAligner": aligner,
            "crossSeriesReducer": "REDUCE_MAX" if aligner in ("ALIGN_PERCENTILE_99", "ALIGN_MAX") else "REDUCE_SUM",
            "groupByFields": a.get("group_by", []),
        }
        query = {"timeSeriesFilter": {"filter": chart_filter(a, prefix), "aggregation": aggregation}}
        widgets.append({"title": a["title"], "xyChart": {"dataSets": [{"plotType": "LINE", "timeSeriesQuery": query}]}})
    return {"displayName": f"safesend {prefix}", "gridLayout": {"columns": "3", "widgets": widgets}}


def write(out: Path, rendered: dict[str, Any]) -> Path:
    lines = [
        "#!/usr/bin/env bash",
        "# Generated by infra/monitoring_render.py: apply with the project set.",
        "set -euo pipefail",
    ]
    for kind in ("metrics", "policies"):
        (out / kind).mkdir(parents=True, exist_ok=True)
        for name, body in rendered[kind].items():
            path = out / kind / f"{name}.json"
            path.write_text(json.dumps(body, indent=1) + "\n", encoding="utf-8")
            quoted = shlex.quote(str(path))
            if kind == "metrics":
                lines.append(f"gcloud logging metrics create {body['name']} --config-from-file={quoted}")
            else:
                lines.append(f"gcloud alpha monitoring policies create --policy-from-file={quoted}")
    dashboard = out / "dashboard.json"
    dashboard.write_text(json.dumps(rendered["dashboard"], indent=1) + "\n", encoding="utf-8")
    lines.append(f"gcloud monitoring dashboards create --config-from-file={shlex.quote(str(dashboard))}")
    script = out / "apply.sh"
    script.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return script


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--prefix", default="safesend")
    parser.add_argument("--sweep-schedule", default="*/5 * * * *")
    parser.add_argument("--thresholds", default="{}", help="JSON object over monitoring.json's thresholds")
    parser.add_argument("--channel", action="append", default=[], help="notification channel name (repeatable)")
    parser.add_argument(
        "--no-channel", action="store_true", help="render alerts that notify nobody (they only open incidents)"
    )
    parser.add_argument(
        "--unknown-window", type=float, default=300.0, help="the deployment's SAFESEND_UNKNOWN_WINDOW_S"
    )
    args = parser.parse_args(argv)
    if not args.channel and not args.no_channel:
        # As monitoring.tf's precondition: an alert without a channel fires into nowhere.
        parser.error(
            "give at least one --channel projects/P/notificationChannels/ID: without one every alert, "
            "the dead man's switch included, notifies nobody (--no-channel renders them so knowingly)"
        )
    rendered = render(args.prefix, args.sweep_schedule, json.loads(args.thresholds), args.channel, args.unknown_window)
    print(write(args.out, rendered))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
