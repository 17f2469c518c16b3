#!/usr/bin/env python3
"""The functions' runtime configuration from infra/modules/safesend/env_spec.json (stdlib only).

One spec, two readers:

* Terraform (modules/safesend/functions.tf) reads the JSON with jsondecode() and renders it with
  regexall() over the spec's placeholder pattern; this module is the Python mirror of those few
  HCL expressions (tests/infra checks the HCL text is exactly the canonical one).
* cloudbuild-gcloud.yaml runs this script to write, per function, the env-vars file, the
  secrets, the ingress, the timeout and the invokers that `gcloud functions deploy` and
  `add-invoker-policy-binding` use, and to plan the Firestore index from the same
  jobs_collection fact that sets SAFESEND_JOBS_COLLECTION.

Rendering, exactly as functions.tf does it:
  1. facts: strings the deploy path supplies (every fact in the spec, nothing else);
  2. templates: "{fact}" placeholders replaced by facts;
  3. switches: `then` if value[when] == equals, else `otherwise`, rendered over facts + templates;
  4. env[name][function]: rendered over everything; names in `lists` are split on ",",
     empty items dropped, joined again; names in `omit_empty` are left out when "";
  5. secrets[name]: mounted on its functions when value[enabled_by] == "true", version value[version].
  6. deploy[function]: deployed when value[enabled_by] == "true" (notify and review only with the
     reviewer side), with its ingress, timeout and invokers (who holds roles/run.invoker on it).

    python3 infra/env_spec.py gcloud --out DIR [--fact name=value ...]   (facts also from
        SAFESEND_FACT_<name> environment variables, so values with spaces need no quoting)
    python3 infra/env_spec.py index-plan --indexes infra/firestore.indexes.json \
        --existing listing.json [--fact jobs_collection=...]
    python3 infra/env_spec.py check        # validate the spec, exit 1 on problems
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SPEC_PATH = ROOT / "infra" / "modules" / "safesend" / "env_spec.json"
INDEXES_PATH = ROOT / "infra" / "firestore.indexes.json"
FACT_ENV_PREFIX = "SAFESEND_FACT_"
# The collection firestore.indexes.json is written for: the code's and the variables' default
# (tests/infra/test_firestore_indexes.py checks all three agree).
DEFAULT_JOBS_COLLECTION = "ai_jobs"
GCLOUD_INGRESS = {"ALLOW_ALL": "all", "ALLOW_INTERNAL_ONLY": "internal-only",
                  "ALLOW_INTERNAL_AND_GCLB": "internal-and-gclb"}
SECRET_FIELDS = {"secret", "version", "enabled_by", "functions"}
DEPLOY_FIELDS = {"ingress", "timeout_s", "invokers", "enabled_by"}
# Who holds roles/run.invoker on a function, by kind (rendered in render()):
#   callers      the caller service accounts of send/status (+ allUsers with public_callers)
#   tasks        the Cloud Tasks invoker          scheduler    the Cloud Scheduler invoker
#   notify_push  the identity of the Pub/Sub push subscription to notify
#   iap_agent    the IAP service agent (direct IAP on the review function's Cloud Run service)
INVOKER_KINDS = ("callers", "tasks", "scheduler", "notify_push", "iap_agent")
SWITCH_FIELDS = {"when", "equals", "then", "otherwise"}


class SpecError(ValueError):
    """The spec, or the facts given to it, cannot be rendered."""


def load(path: Path = SPEC_PATH) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def _refs(spec: dict, template: str, where: str) -> list[str]:
    """Placeholder names of a template; refuses text the pattern does not cover (a stray brace)."""
    pattern = re.compile(spec["placeholder_pattern"])
    pos, refs = 0, []
    for match in pattern.finditer(template):
        if match.start() != pos:
            raise SpecError(f"{where}: {template!r} has text no placeholder rule covers at {pos}")
        pos = match.end()
        if match.group("ref") is not None:
            refs.append(match.group("ref"))
    if pos != len(template):
        raise SpecError(f"{where}: {template!r} has text no placeholder rule covers at {pos}")
    return refs


def substitute(spec: dict, template: str, values: Mapping[str, str], where: str) -> str:
    """regexall(pattern, template) joined: literal text as is, {name} replaced by values[name]."""
    _refs(spec, template, where)
    out = []
    for match in re.finditer(spec["placeholder_pattern"], template):
        ref = match.group("ref")
        if ref is None:
            out.append(match.group("lit"))
        elif ref not in values:
            raise SpecError(f"{where}: unknown name {{{ref}}}")
        else:
            out.append(values[ref])
    return "".join(out)


def validate(spec: dict) -> list[str]:
    """Every structural rule the HCL renderer relies on (uniform shapes, known names, stage order)."""
    errors: list[str] = []
    functions = spec.get("functions") or []
    facts = set(spec.get("facts", {}))
    templates = spec.get("templates", {})
    switches = spec.get("switches", {})
    env = spec.get("env", {})
    try:
        re.compile(spec["placeholder_pattern"])
    except (KeyError, re.error) as exc:
        return [f"placeholder_pattern: {exc}"]

    def check_template(text: Any, allowed: set[str], where: str) -> None:
        if not isinstance(text, str):
            errors.append(f"{where}: must be a string")
            return
        try:
            unknown = [r for r in _refs(spec, text, where) if r not in allowed]
        except SpecError as exc:
            errors.append(str(exc))
            return
        if unknown:
            errors.append(f"{where}: unknown names {unknown} (allowed here: facts"
                          f"{', templates' if allowed - facts else ''}"
                          f"{', switches' if set(switches) & allowed else ''})")

    clash = (facts & set(templates)) | (facts & set(switches)) | (set(templates) & set(switches))
    if clash:
        errors.append(f"names used twice among facts, templates and switches: {sorted(clash)}")
    for name, text in templates.items():
        check_template(text, facts, f"templates.{name}")
    for name, switch in switches.items():
        if not isinstance(switch, dict) or set(switch) != SWITCH_FIELDS:
            errors.append(f"switches.{name}: must have exactly {sorted(SWITCH_FIELDS)}")
            continue
        if switch["when"] not in facts | set(templates):
            errors.append(f"switches.{name}.when: {switch['when']!r} is neither a fact nor a template")
        if not isinstance(switch["equals"], str):
            errors.append(f"switches.{name}.equals: must be a string")
        for branch in ("then", "otherwise"):
            check_template(switch[branch], facts | set(templates), f"switches.{name}.{branch}")
    everything = facts | set(templates) | set(switches)
    for name, per_function in env.items():
        if not re.fullmatch(r"[A-Z][A-Z0-9_]*", name):
            errors.append(f"env.{name}: not an environment variable name")
        if not isinstance(per_function, dict) or not per_function:
            errors.append(f"env.{name}: must map function names to templates")
            continue
        for function, text in per_function.items():
            if function not in functions:
                errors.append(f"env.{name}.{function}: not one of the functions {functions}")
            check_template(text, everything, f"env.{name}.{function}")
    for key in ("lists", "omit_empty"):
        unknown = [n for n in spec.get(key, []) if n not in env]
        if unknown:
            errors.append(f"{key}: not env names: {unknown}")
    secret_ids = spec.get("secret_ids", {})
    for name, text in secret_ids.items():
        check_template(text, facts, f"secret_ids.{name}")
    for name, secret in spec.get("secrets", {}).items():
        if not isinstance(secret, dict) or set(secret) != SECRET_FIELDS:
            errors.append(f"secrets.{name}: must have exactly {sorted(SECRET_FIELDS)}")
            continue
        if name in env:
            errors.append(f"secrets.{name}: also a plain env variable")
        if secret["secret"] not in secret_ids:
            errors.append(f"secrets.{name}.secret: {secret['secret']!r} is not in secret_ids")
        if secret["version"] not in facts:
            errors.append(f"secrets.{name}.version: {secret['version']!r} is not a fact")
        if secret["enabled_by"] not in everything:
            errors.append(f"secrets.{name}.enabled_by: {secret['enabled_by']!r} is not a fact, template or switch")
        unknown = [f for f in secret["functions"] if f not in functions]
        if unknown:
            errors.append(f"secrets.{name}.functions: unknown {unknown}")
    waiting = set(spec.get("not_deployed", {}))
    if waiting & set(functions):
        errors.append(f"not_deployed: {sorted(waiting & set(functions))} are deployed functions")
    missing_urls = [f for f in functions if f"url_{f}" not in templates]
    if missing_urls:
        errors.append(f"templates: no url_<function> for {missing_urls} (their run.app URLs)")
    deploy = spec.get("deploy", {})
    if sorted(deploy) != sorted(functions):
        errors.append(f"deploy: must describe exactly the functions {functions}")
    for function, settings in deploy.items():
        if set(settings) != DEPLOY_FIELDS:
            errors.append(f"deploy.{function}: must have exactly {sorted(DEPLOY_FIELDS)}")
        if settings.get("enabled_by") not in everything:
            errors.append(f"deploy.{function}.enabled_by: {settings.get('enabled_by')!r} "
                          "is not a fact, template or switch")
        if settings.get("ingress") not in GCLOUD_INGRESS:
            errors.append(f"deploy.{function}.ingress: {settings.get('ingress')!r}")
        if settings.get("invokers") not in INVOKER_KINDS:
            errors.append(f"deploy.{function}.invokers: {settings.get('invokers')!r}")
        if not isinstance(settings.get("timeout_s"), int):
            errors.append(f"deploy.{function}.timeout_s: must be an integer")
    return errors


@dataclass
class Rendered:
    values: dict[str, str]
    env: dict[str, dict[str, str]]
    secrets: dict[str, dict[str, tuple[str, str]]]  # function -> env name -> (secret id, version)
    ingress: dict[str, str]
    timeout_s: dict[str, int]
    invokers: dict[str, list[str]]
    jobs_collection: str
    enabled: dict[str, bool] = field(default_factory=dict)  # function -> deployed in this configuration
    urls: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


def render(spec: dict, facts: Mapping[str, str]) -> Rendered:
    errors = validate(spec)
    if errors:
        raise SpecError("env spec is invalid:\n  " + "\n  ".join(errors))
    missing = sorted(set(spec["facts"]) - set(facts))
    unknown = sorted(set(facts) - set(spec["facts"]))
    if missing or unknown:
        raise SpecError(f"facts: missing {missing}, unknown {unknown}")
    not_strings = sorted(k for k, v in facts.items() if not isinstance(v, str))
    if not_strings:
        raise SpecError(f"facts must be strings: {not_strings}")
    named = dict(facts)
    for name, text in spec["templates"].items():
        named[name] = substitute(spec, text, facts, f"templates.{name}")
    values = dict(named)
    for name, switch in spec["switches"].items():
        branch = switch["then"] if named[switch["when"]] == switch["equals"] else switch["otherwise"]
        values[name] = substitute(spec, branch, named, f"switches.{name}")
    env: dict[str, dict[str, str]] = {}
    secrets: dict[str, dict[str, tuple[str, str]]] = {}
    for function in spec["functions"]:
        rendered = {}
        for name, per_function in spec["env"].items():
            if function not in per_function:
                continue
            value = substitute(spec, per_function[function], values, f"env.{name}.{function}")
            if name in spec["lists"]:
                value = ",".join(item for item in value.split(",") if item != "")
            if name in spec["omit_empty"] and value == "":
                continue
            rendered[name] = value
        env[function] = rendered
        secrets[function] = {
            name: (substitute(spec, spec["secret_ids"][s["secret"]], values, f"secret_ids.{s['secret']}"),
                   values[s["version"]])
            for name, s in spec["secrets"].items()
            if function in s["functions"] and values[s["enabled_by"]] == "true"
        }
    callers = [f"serviceAccount:{e}" for e in env[_caller_function(spec)].get(
        "SAFESEND_AUTH_CALLER_SERVICE_ACCOUNTS", "").split(",") if e]
    if values["caller_public_invoker"] == "true":
        callers.append("allUsers")
    kinds = {"callers": callers,
             "tasks": [f"serviceAccount:{values['sa_tasks_invoker']}"],
             "scheduler": [f"serviceAccount:{values['sa_scheduler_invoker']}"],
             "notify_push": [f"serviceAccount:{values['sa_notify_push']}"],
             "iap_agent": [f"serviceAccount:{values['sa_iap_agent']}"]}
    invokers = {function: kinds[settings["invokers"]] for function, settings in spec["deploy"].items()}
    return Rendered(values=values, env=env, secrets=secrets,
                    ingress={f: s["ingress"] for f, s in spec["deploy"].items()},
                    timeout_s={f: s["timeout_s"] for f, s in spec["deploy"].items()},
                    invokers=invokers, jobs_collection=facts["jobs_collection"],
                    enabled={f: values[s["enabled_by"]] == "true" for f, s in spec["deploy"].items()},
                    urls={f: values[f"url_{f}"] for f in spec["functions"]})


def _caller_function(spec: dict) -> str:
    return next(f for f, s in spec["deploy"].items() if s["invokers"] == "callers")


# ------------------------------------------------------------------------ gcloud outputs
def yaml_env_file(env: Mapping[str, str]) -> str:
    """A YAML map for `gcloud functions deploy --env-vars-file`: JSON strings are YAML strings."""
    return "".join(f"{name}: {json.dumps(value)}\n" for name, value in sorted(env.items())) or "{}\n"


def write_gcloud_files(rendered: Rendered, out: Path) -> None:
    """Per function: <f>.env.yaml, .secrets, .ingress, .timeout, .invokers, .url; and `functions`,
    the functions this configuration deploys (one a line, in the spec's order)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "functions").write_text("".join(f + "\n" for f, on in rendered.enabled.items() if on), encoding="utf-8")
    for function, env in rendered.env.items():
        (out / f"{function}.env.yaml").write_text(yaml_env_file(env), encoding="utf-8")
        secrets = ",".join(f"{name}={sid}:{version}"
                           for name, (sid, version) in sorted(rendered.secrets[function].items()))
        (out / f"{function}.secrets").write_text(secrets, encoding="utf-8")
        (out / f"{function}.ingress").write_text(GCLOUD_INGRESS[rendered.ingress[function]], encoding="utf-8")
        (out / f"{function}.timeout").write_text(f"{rendered.timeout_s[function]}s", encoding="utf-8")
        (out / f"{function}.invokers").write_text("".join(m + "\n" for m in rendered.invokers[function]),
                                                  encoding="utf-8")
        (out / f"{function}.url").write_text(rendered.urls[function], encoding="utf-8")


# ------------------------------------------------------------------------ Firestore index
def wanted_indexes(jobs_collection: str, indexes_path: Path = INDEXES_PATH) -> list[dict]:
    """The composite indexes of firestore.indexes.json, on the configured jobs collection.

    The file is written for the default collection (the Firebase CLI reads it as is); its
    collection group must be that default, and every deploy puts the index on the collection
    the functions are configured with instead."""
    data = json.loads(Path(indexes_path).read_text(encoding="utf-8"))
    default = DEFAULT_JOBS_COLLECTION
    out = []
    for index in data["indexes"]:
        if index["collectionGroup"] != default:
            raise SpecError(f"{indexes_path}: collectionGroup {index['collectionGroup']!r} is not the default "
                            f"jobs collection {default!r}")
        out.append({"collectionGroup": jobs_collection, "queryScope": index["queryScope"],
                    "fields": [(f["fieldPath"], f["order"]) for f in index["fields"]]})
    return out


def index_plan(wanted: list[dict], existing: list[dict]) -> list[tuple[str, str]]:
    """("create", gcloud args) for a missing index, ("wait", name) for one still CREATING,
    ("ready", name) for one in place; raises SpecError for any other state (NEEDS_REPAIR)."""
    plan = []
    for index in wanted:
        matches = []
        for item in existing:
            group = item.get("name", "").split("/collectionGroups/", 1)[-1].split("/", 1)[0]
            fields = [(f.get("fieldPath"), f.get("order")) for f in item.get("fields", [])
                      if f.get("fieldPath") != "__name__"]
            if group == index["collectionGroup"] and item.get("queryScope") == index["queryScope"] \
                    and fields == index["fields"]:
                matches.append(item)
        if not matches:
            args = [f"--collection-group={index['collectionGroup']}", f"--query-scope={index['queryScope']}"]
            args += [f"--field-config=field-path={p},order={o.lower()}" for p, o in index["fields"]]
            plan.append(("create", " ".join(args)))
            continue
        item = matches[0]
        state = item.get("state")
        if state == "READY":
            plan.append(("ready", item["name"]))
        elif state == "CREATING":
            plan.append(("wait", item["name"]))
        else:
            raise SpecError(f"index {item.get('name')} is {state}: the sweeper's query would fail; "
                            "delete and recreate it (gcloud firestore indexes composite delete ...)")
    return plan


# ------------------------------------------------------------------------ CLI
def _facts(args_facts: list[str], environ: Mapping[str, str]) -> dict[str, str]:
    facts = {k[len(FACT_ENV_PREFIX):]: v for k, v in environ.items() if k.startswith(FACT_ENV_PREFIX)}
    for item in args_facts or []:
        name, sep, value = item.partition("=")
        if not sep:
            raise SpecError(f"--fact {item!r}: want name=value")
        facts[name] = value
    return facts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    gcloud = sub.add_parser("gcloud", help="write per-function deploy inputs for cloudbuild-gcloud.yaml")
    gcloud.add_argument("--out", type=Path, required=True)
    gcloud.add_argument("--fact", action="append", default=[])
    plan = sub.add_parser("index-plan", help="which composite indexes to create or wait for")
    plan.add_argument("--indexes", type=Path, default=INDEXES_PATH)
    plan.add_argument("--existing", type=Path, required=True, help="gcloud ... composite list --format=json")
    plan.add_argument("--fact", action="append", default=[])
    sub.add_parser("check", help="validate the spec")
    args = parser.parse_args(argv)
    spec = load()
    try:
        if args.command == "check":
            errors = validate(spec)
            for error in errors:
                print(error, file=sys.stderr)
            return 1 if errors else 0
        facts = _facts(args.fact, os.environ)
        if args.command == "gcloud":
            rendered = render(spec, facts)
            write_gcloud_files(rendered, args.out)
            for function, env in rendered.env.items():
                if not rendered.enabled[function]:
                    print(f"{function}: not deployed in this configuration")
                    continue
                print(f"{function}: {len(env)} variables, secrets "
                      f"{sorted(rendered.secrets[function]) or 'none'}, invokers {rendered.invokers[function]}")
            return 0
        if "jobs_collection" not in facts:
            raise SpecError("index-plan needs the jobs_collection fact")
        existing = json.loads(args.existing.read_text(encoding="utf-8") or "[]")
        for action, detail in index_plan(wanted_indexes(facts["jobs_collection"], args.indexes), existing):
            print(f"{action} {detail}")
        return 0
    except SpecError as exc:
        print(f"env_spec: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
