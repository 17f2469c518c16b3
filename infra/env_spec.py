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
  5. secrets[name]: mounted on its functions when value[enabled_by] == "true", version value[version];
     secret_files[path] likewise, as the file `path` (mount directory + file name) instead of a variable.
  6. direct_vpc: when value[enabled_by] == "true", its functions send private-range traffic into the
     rendered network/subnetwork (Direct VPC egress); otherwise they have no VPC settings.
  7. deploy[function]: deployed when value[enabled_by] == "true" (notify and review only with the
     reviewer side), with its ingress, timeout and invokers (who holds roles/run.invoker on it).

    python3 infra/env_spec.py gcloud --out DIR [--fact name=value ...]   (facts also from
        SAFESEND_FACT_<name> environment variables, so values with spaces need no quoting)
    python3 infra/env_spec.py index-plan --indexes infra/firestore.indexes.json \
        --existing listing.json [--fact jobs_collection=...]
    python3 infra/env_spec.py template NAME [--fact ...]     # one template, from the facts it needs
    python3 infra/env_spec.py sql-instance --describe instance.json [--fact ...]
        # the Cloud SQL instance (gcloud sql instances describe --format=json) is the one the spec
        # needs (IAM database authentication, TLS only, private IP on the spec's network, no
        # public access, backups with PITR, deletion protection); prints its private IP
    python3 infra/env_spec.py postgres-setup-sql --fact name_prefix=... --fact project_id=... \
        --fact reviewers=false     # the one-time grants SQL, as the module's output postgres_setup_sql
    python3 infra/env_spec.py mailboxes --file FILE --out DIR [--fact name_prefix=...]
        # SAFESEND_MAILBOXES_JSON (DIR/mailboxes.json) and the mailbox queues (DIR/mailbox-queues)
        # from a JSON file shaped like the Terraform variables mailboxes and mailbox_pools
    python3 infra/env_spec.py sweep-interval "*/5 * * * *"
        # the fact sweep_interval_s (seconds) from a sweep schedule, as monitoring.tf derives it
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
GCLOUD_INGRESS = {
    "ALLOW_ALL": "all",
    "ALLOW_INTERNAL_ONLY": "internal-only",
    "ALLOW_INTERNAL_AND_GCLB": "internal-and-gclb",
}
SECRET_FIELDS = {"secret", "version", "enabled_by", "functions"}
# A secret volume: Cloud Functions mounts each secret in a directory of its own (the directory is
# shadowed), never in these (Cloud Functions API, SecretVolume.mount_path).
RESTRICTED_MOUNTS = ("/cloudsql", "/dev/log", "/pod", "/proc", "/var/log")
SECRET_FILE = re.compile(r"^((?:/[A-Za-z0-9._-]+)+)/([A-Za-z0-9._-]+)$")
DIRECT_VPC_FIELDS = {"enabled_by", "network", "subnetwork", "egress", "functions"}
# Only private ranges go through the VPC (Gmail, Google APIs and webhooks stay on Cloud Run's own
# egress). It is also the API's default (Cloud Functions v2 ServiceConfig.directVpcEgress), which is
# what `gcloud functions deploy --network --subnet` gets when no egress flag is given.
DIRECT_VPC_EGRESS = ("VPC_EGRESS_PRIVATE_RANGES_ONLY",)
DEPLOY_FIELDS = {"ingress", "timeout_s", "cpu", "memory", "concurrency", "invokers", "enabled_by"}
# Cloud Functions (2nd gen) CPU steps (available_cpu / gcloud --cpu); below 1 a function serves one
# request at a time (Cloud Run: concurrency > 1 needs at least 1 vCPU).
CPU_STEPS = ("0.083", "0.167", "0.333", "0.583", "1", "2", "4", "6", "8")
MEMORY = re.compile(r"^[1-9][0-9]*(Mi|Gi)$")
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
            errors.append(
                f"{where}: unknown names {unknown} (allowed here: facts"
                f"{', templates' if allowed - facts else ''}"
                f"{', switches' if set(switches) & allowed else ''})"
            )

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
    mounts: dict[str, str] = {}
    for path, mount in spec.get("secret_files", {}).items():
        if not isinstance(mount, dict) or set(mount) != SECRET_FIELDS:
            errors.append(f"secret_files.{path}: must have exactly {sorted(SECRET_FIELDS)}")
            continue
        match = SECRET_FILE.match(path)
        if not match:
            errors.append(f"secret_files.{path}: want an absolute /directory/file path")
            continue
        directory = match.group(1)
        if any(directory == r or directory.startswith(r + "/") for r in RESTRICTED_MOUNTS):
            errors.append(f"secret_files.{path}: {directory} is a restricted mount path")
        if directory in mounts:
            errors.append(
                f"secret_files.{path}: {directory} already holds {mounts[directory]} (one secret a directory)"
            )
        mounts[directory] = path
        if mount["secret"] not in secret_ids:
            errors.append(f"secret_files.{path}.secret: {mount['secret']!r} is not in secret_ids")
        if mount["version"] not in facts:
            errors.append(f"secret_files.{path}.version: {mount['version']!r} is not a fact")
        if mount["enabled_by"] not in everything:
            errors.append(f"secret_files.{path}.enabled_by: {mount['enabled_by']!r} is not a fact, template or switch")
        unknown = [f for f in mount["functions"] if f not in functions]
        if unknown:
            errors.append(f"secret_files.{path}.functions: unknown {unknown}")
    vpc = spec.get("direct_vpc")
    if vpc is not None:
        if not isinstance(vpc, dict) or set(vpc) != DIRECT_VPC_FIELDS:
            errors.append(f"direct_vpc: must have exactly {sorted(DIRECT_VPC_FIELDS)}")
        else:
            if vpc["enabled_by"] not in everything:
                errors.append(f"direct_vpc.enabled_by: {vpc['enabled_by']!r} is not a fact, template or switch")
            for key in ("network", "subnetwork"):
                check_template(vpc[key], facts | set(templates), f"direct_vpc.{key}")
            if vpc["egress"] not in DIRECT_VPC_EGRESS:
                errors.append(f"direct_vpc.egress: {vpc['egress']!r} is not one of {DIRECT_VPC_EGRESS}")
            unknown = [f for f in vpc["functions"] if f not in functions]
            if unknown:
                errors.append(f"direct_vpc.functions: unknown {unknown}")
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
            errors.append(
                f"deploy.{function}.enabled_by: {settings.get('enabled_by')!r} is not a fact, template or switch"
            )
        if settings.get("ingress") not in GCLOUD_INGRESS:
            errors.append(f"deploy.{function}.ingress: {settings.get('ingress')!r}")
        if settings.get("invokers") not in INVOKER_KINDS:
            errors.append(f"deploy.{function}.invokers: {settings.get('invokers')!r}")
        if not isinstance(settings.get("timeout_s"), int):
            errors.append(f"deploy.{function}.timeout_s: must be an integer")
        errors += _platform_errors(function, settings)
    return errors


def _platform_errors(function: str, settings: Mapping[str, object]) -> list[str]:
    """CPU, memory and request concurrency of one function, as Cloud Functions accepts them."""
    errors = []
    cpu, memory, concurrency = settings.get("cpu"), settings.get("memory"), settings.get("concurrency")
    if cpu not in CPU_STEPS:
        errors.append(f"deploy.{function}.cpu: {cpu!r} is not one of {CPU_STEPS}")
    if not isinstance(memory, str) or not MEMORY.match(memory):
        errors.append(f"deploy.{function}.memory: {memory!r} (e.g. 512Mi)")
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or not 1 <= concurrency <= 1000:
        errors.append(f"deploy.{function}.concurrency: {concurrency!r} must be an integer 1-1000")
    elif concurrency > 1 and cpu in CPU_STEPS and float(str(cpu)) < 1:
        errors.append(f"deploy.{function}: concurrency {concurrency} needs cpu >= 1 (Cloud Run), not {cpu}")
    return errors


@dataclass
class Rendered:
    values: dict[str, str]
    env: dict[str, dict[str, str]]
    secrets: dict[str, dict[str, tuple[str, str]]]  # function -> env name -> (secret id, version)
    ingress: dict[str, str]
    timeout_s: dict[str, int]
    invokers: dict[str, list[str]]
    platform: dict[str, tuple[str, str, int]]  # function -> (cpu, memory, concurrency)
    jobs_collection: str
    enabled: dict[str, bool] = field(default_factory=dict)  # function -> deployed in this configuration
    # function -> file path -> (secret id, version)
    secret_files: dict[str, dict[str, tuple[str, str]]] = field(default_factory=dict)
    # function -> {network, subnetwork, egress}, or None without Direct VPC egress
    direct_vpc: dict[str, dict[str, str] | None] = field(default_factory=dict)
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
            name: (
                substitute(spec, spec["secret_ids"][s["secret"]], values, f"secret_ids.{s['secret']}"),
                values[s["version"]],
            )
            for name, s in spec["secrets"].items()
            if function in s["functions"] and values[s["enabled_by"]] == "true"
        }
    secret_files = {
        function: {
            path: (
                substitute(spec, spec["secret_ids"][m["secret"]], values, f"secret_ids.{m['secret']}"),
                values[m["version"]],
            )
            for path, m in spec.get("secret_files", {}).items()
            if function in m["functions"] and values[m["enabled_by"]] == "true"
        }
        for function in spec["functions"]
    }
    vpc = spec.get("direct_vpc")
    direct_vpc: dict[str, dict[str, str] | None] = {}
    for function in spec["functions"]:
        direct_vpc[function] = None
        if vpc and function in vpc["functions"] and values[vpc["enabled_by"]] == "true":
            direct_vpc[function] = {
                "network": substitute(spec, vpc["network"], values, "direct_vpc.network"),
                "subnetwork": substitute(spec, vpc["subnetwork"], values, "direct_vpc.subnetwork"),
                "egress": vpc["egress"],
            }
    callers = [
        f"serviceAccount:{e}"
        for e in env[_caller_function(spec)].get("SAFESEND_AUTH_CALLER_SERVICE_ACCOUNTS", "").split(",")
        if e
    ]
    if values["caller_public_invoker"] == "true":
        callers.append("allUsers")
    kinds = {
        "callers": callers,
        "tasks": [f"serviceAccount:{values['sa_tasks_invoker']}"],
        "scheduler": [f"serviceAccount:{values['sa_scheduler_invoker']}"],
        "notify_push": [f"serviceAccount:{values['sa_notify_push']}"],
        "iap_agent": [f"serviceAccount:{values['sa_iap_agent']}"],
    }
    invokers = {function: kinds[settings["invokers"]] for function, settings in spec["deploy"].items()}
    return Rendered(
        values=values,
        env=env,
        secrets=secrets,
        ingress={f: s["ingress"] for f, s in spec["deploy"].items()},
        timeout_s={f: s["timeout_s"] for f, s in spec["deploy"].items()},
        invokers=invokers,
        platform={f: (s["cpu"], s["memory"], s["concurrency"]) for f, s in spec["deploy"].items()},
        jobs_collection=facts["jobs_collection"],
        enabled={f: values[s["enabled_by"]] == "true" for f, s in spec["deploy"].items()},
        urls={f: values[f"url_{f}"] for f in spec["functions"]},
        secret_files=secret_files,
        direct_vpc=direct_vpc,
    )


def _caller_function(spec: dict) -> str:
    return next(f for f, s in spec["deploy"].items() if s["invokers"] == "callers")


# ------------------------------------------------------------------------ gcloud outputs
def yaml_env_file(env: Mapping[str, str]) -> str:
    """A YAML map for `gcloud functions deploy --env-vars-file`: JSON strings are YAML strings."""
    return "".join(f"{name}: {json.dumps(value)}\n" for name, value in sorted(env.items())) or "{}\n"


def gcloud_secrets(rendered: Rendered, function: str) -> str:
    """`--set-secrets` of one function: NAME=secret:version for variables, /dir/file=secret:version
    for files (gcloud mounts the secret in /dir as `file`)."""
    items = [f"{name}={sid}:{version}" for name, (sid, version) in sorted(rendered.secrets[function].items())]
    items += [f"{path}={sid}:{version}" for path, (sid, version) in sorted(rendered.secret_files[function].items())]
    return ",".join(items)


def gcloud_network_args(rendered: Rendered, function: str) -> str:
    """Direct VPC egress flags of `gcloud functions deploy` (gcloud 558.0.0+), or nothing. No egress
    flag: the API's default is private ranges only, the one egress the spec allows."""
    vpc = rendered.direct_vpc.get(function)
    if not vpc:
        return ""
    if vpc["egress"] not in DIRECT_VPC_EGRESS:
        raise SpecError(f"{function}: direct VPC egress {vpc['egress']!r} cannot be deployed with gcloud")
    return f"--network={vpc['network']} --subnet={vpc['subnetwork']}"


def write_gcloud_files(rendered: Rendered, out: Path) -> None:
    """Per function: <f>.env.yaml, .secrets, .network, .ingress, .timeout, .platform (the --cpu,
    --memory and --concurrency flags), .invokers, .url; and
    `functions`, the functions this configuration deploys (one a line, in the spec's order)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "functions").write_text("".join(f + "\n" for f, on in rendered.enabled.items() if on), encoding="utf-8")
    for function, env in rendered.env.items():
        (out / f"{function}.env.yaml").write_text(yaml_env_file(env), encoding="utf-8")
        (out / f"{function}.secrets").write_text(gcloud_secrets(rendered, function), encoding="utf-8")
        (out / f"{function}.network").write_text(gcloud_network_args(rendered, function), encoding="utf-8")
        (out / f"{function}.ingress").write_text(GCLOUD_INGRESS[rendered.ingress[function]], encoding="utf-8")
        (out / f"{function}.timeout").write_text(f"{rendered.timeout_s[function]}s", encoding="utf-8")
        cpu, memory, concurrency = rendered.platform[function]
        (out / f"{function}.platform").write_text(
            f"--cpu={cpu} --memory={memory} --concurrency={concurrency}", encoding="utf-8"
        )
        (out / f"{function}.invokers").write_text(
            "".join(m + "\n" for m in rendered.invokers[function]), encoding="utf-8"
        )
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
            raise SpecError(
                f"{indexes_path}: collectionGroup {index['collectionGroup']!r} is not the default "
                f"jobs collection {default!r}"
            )
        out.append(
            {
                "collectionGroup": jobs_collection,
                "queryScope": index["queryScope"],
                "fields": [(f["fieldPath"], f["order"]) for f in index["fields"]],
            }
        )
    return out


def index_plan(wanted: list[dict], existing: list[dict]) -> list[tuple[str, str]]:
    """("create", gcloud args) for a missing index, ("wait", name) for one still CREATING,
    ("ready", name) for one in place; raises SpecError for any other state (NEEDS_REPAIR)."""
    plan = []
    for index in wanted:
        matches = []
        for item in existing:
            group = item.get("name", "").split("/collectionGroups/", 1)[-1].split("/", 1)[0]
            fields = [
                (f.get("fieldPath"), f.get("order")) for f in item.get("fields", []) if f.get("fieldPath") != "__name__"
            ]
            if (
                group == index["collectionGroup"]
                and item.get("queryScope") == index["queryScope"]
                and fields == index["fields"]
            ):
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
            raise SpecError(
                f"index {item.get('name')} is {state}: the sweeper's query would fail; "
                "delete and recreate it (gcloud firestore indexes composite delete ...)"
            )
    return plan


# ------------------------------------------------------------------------ Cloud SQL instance
def render_template(spec: dict, name: str, facts: Mapping[str, str]) -> str:
    """One template from the facts it names (the gcloud path names the instance before it knows
    every fact: the instance's private IP is one)."""
    if name not in spec["templates"]:
        raise SpecError(f"{name!r} is not a template of the spec")
    return substitute(spec, spec["templates"][name], facts, f"templates.{name}")


def sql_instance_problems(instance: Mapping[str, Any], network: str) -> list[str]:
    """What makes a Cloud SQL instance (`gcloud sql instances describe --format=json`, the Admin API's
    DatabaseInstance) unfit for the functions' DSN: PostgreSQL, IAM database authentication on, TLS
    required, reachable on a private IP of `network`, open to no authorized network, backups with
    point-in-time recovery, deletion protection."""
    settings = instance.get("settings") or {}
    flags = {f.get("name"): f.get("value") for f in settings.get("databaseFlags") or []}
    ip = settings.get("ipConfiguration") or {}
    backup = settings.get("backupConfiguration") or {}
    problems = []
    if not str(instance.get("databaseVersion", "")).startswith("POSTGRES_"):
        problems.append(f"databaseVersion {instance.get('databaseVersion')!r} is not PostgreSQL")
    if flags.get("cloudsql.iam_authentication") != "on":
        problems.append("database flag cloudsql.iam_authentication is not on (IAM database users cannot log in)")
    if ip.get("sslMode") != "ENCRYPTED_ONLY":
        problems.append(f"sslMode is {ip.get('sslMode')!r}, not ENCRYPTED_ONLY")
    if ip.get("authorizedNetworks"):
        problems.append("authorized networks are set: only the private IP (and connectors) may reach it")
    if str(ip.get("privateNetwork", "")).rsplit("/", 1)[-1] != network:
        problems.append(f"private network {ip.get('privateNetwork')!r} is not {network!r}")
    if not [a for a in instance.get("ipAddresses") or [] if a.get("type") == "PRIVATE" and a.get("ipAddress")]:
        problems.append("no PRIVATE ip address")
    if settings.get("deletionProtectionEnabled") is not True:
        problems.append("deletion protection is off")
    if not (backup.get("enabled") and backup.get("pointInTimeRecoveryEnabled")):
        problems.append("backups with point-in-time recovery are off")
    return problems


def sql_instance_private_ip(instance: Mapping[str, Any], network: str) -> str:
    problems = sql_instance_problems(instance, network)
    if problems:
        raise SpecError(f"Cloud SQL instance {instance.get('name')!r}: " + "; ".join(problems))
    return next(a["ipAddress"] for a in instance["ipAddresses"] if a.get("type") == "PRIVATE")


# ------------------------------------------------------------------------ PostgreSQL: the one-time SQL
# Every function's IAM database user starts with no privilege, and PostgreSQL 15+ gives ordinary
# users no CREATE on `public`. So the schema the store migrates into (search_path in every DSN)
# belongs to one NOLOGIN role that every function's user is granted and becomes for its sessions
# (`-c role=` in every DSN): whichever function migrates first, the tables are the role's, and every
# function reads, writes and migrates them. Run once as the built-in `postgres` user, in database
# safesend; again after adding functions (idempotent). cloudsql.tf renders the same text (output
# postgres_setup_sql; tests/infra compare the two and run it on a real PostgreSQL).
POSTGRES_OWNER_ROLE = "safesend_owner"
POSTGRES_SCHEMA = "safesend"


def postgres_setup_sql(users: list[str]) -> str:
    """The SQL for these database users (in the order given: Terraform's is by function name)."""
    return "\n".join(
        [
            f"DO $$ BEGIN CREATE ROLE {POSTGRES_OWNER_ROLE} NOLOGIN; "
            "EXCEPTION WHEN duplicate_object THEN NULL; END $$;",
            f"GRANT {POSTGRES_OWNER_ROLE} TO CURRENT_USER;",
            f"CREATE SCHEMA IF NOT EXISTS {POSTGRES_SCHEMA} AUTHORIZATION {POSTGRES_OWNER_ROLE};",
            *(f'GRANT {POSTGRES_OWNER_ROLE} TO "{user}";' for user in users),
        ]
    )


def postgres_users(spec: dict, facts: Mapping[str, str]) -> dict[str, str]:
    """function -> its IAM database user (template pg_user_<function>), for the functions this
    configuration deploys (deploy[function].enabled_by: a fact or a template), by function name."""
    users = {}
    for function, deploy in sorted(spec["deploy"].items()):
        name = deploy["enabled_by"]
        enabled = facts.get(name) if name in spec["facts"] else render_template(spec, name, facts)
        if enabled is None:
            raise SpecError(f"postgres-setup-sql needs the {name} fact")
        if enabled == "true":
            users[function] = render_template(spec, f"pg_user_{function}", facts)
    return users


# -------------------------------------------------------------- mailboxes (issue 24)
# The gcloud path's mirror of modules/safesend/mailboxes.tf: a JSON file shaped like the Terraform
# variables ({"mailboxes": {...}, "mailbox_pools": {...}}) becomes the same SAFESEND_MAILBOXES_JSON
# document (jsonencode's bytes) and the same queues. Presets: functions/safesend/core/mailboxes.py's.
MAILBOX_PRESET_UNITS: dict[str, int | None] = {
    "workspace": 6000,
    "workspace_legacy_rate": 15000,
    "trial": 6000,
    "consumer": 6000,
    "unlimited": None,
    "exchange_online": 3000,
}
MAILBOX_KIND_PRESET = {"gmail": "workspace", "graph": "exchange_online"}  # mailboxes.py's defaults
GRAPH_ONLY = ("tenant_id", "client_id", "federated", "certificate_secret")
MAILBOX_DEFAULTS: dict[str, Any] = {
    "kind": "gmail",
    "delegated_user": None,
    "token_secret": None,
    "tenant_id": None,
    "client_id": None,
    "federated": None,
    "certificate_secret": None,
    "send_as": [],
    "limits": None,
    "units_per_minute": None,
    "messages_per_day": None,
    "recipients_per_day": None,
    "safety_share": 0.95,
    "max_concurrent_dispatches": 4,
}
MAILBOX_ID = re.compile(r"^[a-z][a-z0-9-]{0,39}$")
BARE_ADDRESS = re.compile(r"^[^@\s<>]+@[^@\s<>]+\.[^@\s<>]+$")
SECRET_ID = re.compile(r"^[A-Za-z0-9_-]{1,255}$")
ENTRA_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]{0,99}$")  # a GUID, or a tenant's domain name
MAX_DISPATCHES_PER_SECOND = 500  # Cloud Tasks' maximum


@dataclass
class MailboxQueue:
    name: str
    max_dispatches_per_second: float
    max_concurrent_dispatches: int


def tf_jsonencode(value: Any) -> str:
    """Terraform's jsonencode(): sorted keys, no spaces, whole numbers without a fraction, Go's
    escapes of <, >, & and U+2028/U+2029."""

    def plain(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: plain(v[k]) for k in sorted(v)}
        if isinstance(v, list):
            return [plain(x) for x in v]
        if isinstance(v, float) and v.is_integer():
            return int(v)
        return v

    text = json.dumps(plain(value), separators=(",", ":"), ensure_ascii=False, sort_keys=True)
    for char, escape in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(char, escape)
    return text


def _whole(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= 1 and float(value).is_integer()


def mailbox_problems(mailboxes: Mapping[str, Any], pools: Mapping[str, Any]) -> list[str]:
    """The Terraform variables' validations and the pools precondition, for the gcloud path."""
    problems = []
    for mailbox_id, m in mailboxes.items():
        where = f"mailboxes.{mailbox_id}"
        if not MAILBOX_ID.match(mailbox_id):
            problems.append(f"{where}: an id is 1-40 of a-z, 0-9 and '-', starting with a letter")
        unknown = sorted(set(m) - set(MAILBOX_DEFAULTS) - {"address"})
        if unknown:
            problems.append(f"{where}: unknown attributes {unknown}")
        if m["limits"] is not None and m["limits"] not in MAILBOX_PRESET_UNITS:
            problems.append(f"{where}: limits must be a preset of {sorted(MAILBOX_PRESET_UNITS)}")
        problems.extend(_kind_problems(where, m))
        addresses = [
            m.get("address"),
            *([m["delegated_user"]] if m["delegated_user"] is not None else []),
            *m["send_as"],
        ]
        if not all(isinstance(a, str) and BARE_ADDRESS.match(a) for a in addresses):
            problems.append(f"{where}: address, delegated_user and send_as must be bare email addresses")
        for secret in ("token_secret", "certificate_secret"):
            if m[secret] is not None and not SECRET_ID.match(str(m[secret])):
                problems.append(f"{where}: {secret} must be a Secret Manager secret id")
        for limit in ("units_per_minute", "messages_per_day", "recipients_per_day"):
            if m[limit] is not None and not _whole(m[limit]):
                problems.append(f"{where}: {limit} must be a whole number >= 1")
        share, concurrent = m["safety_share"], m["max_concurrent_dispatches"]
        if not (isinstance(share, int | float) and 0 < share <= 1):
            problems.append(f"{where}: safety_share must be in (0, 1]")
        if not (_whole(concurrent) and concurrent <= 1000):
            problems.append(f"{where}: max_concurrent_dispatches must be in 1..1000")
    lists = ([pools["default"]] if pools.get("default") is not None else []) + [
        *pools.get("channels", {}).values(),
        *pools.get("from", {}).values(),
    ]
    for pool in lists:
        if not pool or len(set(pool)) != len(pool):
            problems.append(f"mailbox_pools: a pool is a non-empty list of mailbox ids, each at most once: {pool}")
        unknown_ids = sorted(set(pool) - set(mailboxes))
        if unknown_ids:
            problems.append(f"mailbox_pools: unknown mailbox(es) {unknown_ids}")
    return problems


def _kind_problems(where: str, m: Mapping[str, Any]) -> list[str]:
    """The kind's credential rules: Gmail's delegation or token, Graph's Entra app and credential."""
    if m["kind"] not in MAILBOX_KIND_PRESET:
        return [f"{where}: kind must be gmail or graph"]
    if m["kind"] == "gmail":
        problems = []
        if (m["delegated_user"] is None) == (m["token_secret"] is None):
            problems.append(f"{where}: set exactly one of delegated_user and token_secret")
        if any(m[key] is not None for key in GRAPH_ONLY):
            problems.append(f"{where}: {list(GRAPH_ONLY)} are Graph settings, not for kind gmail")
        return problems
    problems = []
    if m["delegated_user"] is not None or m["token_secret"] is not None:
        problems.append(f"{where}: delegated_user and token_secret are Gmail settings, not for kind graph")
    if bool(m["federated"]) == (m["certificate_secret"] is not None):
        problems.append(f"{where}: set exactly one of federated = true and certificate_secret")
    if not all(isinstance(m[key], str) and ENTRA_ID.match(m[key]) for key in ("tenant_id", "client_id")):
        problems.append(f"{where}: a graph mailbox needs tenant_id and client_id (its Entra app registration's)")
    return problems


def render_mailboxes(doc: Mapping[str, Any], name_prefix: str) -> tuple[str, list[MailboxQueue]]:
    """(SAFESEND_MAILBOXES_JSON, queues) from {"mailboxes": ..., "mailbox_pools": ...}; ("", [])
    without mailboxes. SpecError on what Terraform's validations refuse."""
    unknown = sorted(set(doc) - {"mailboxes", "mailbox_pools"})
    if unknown:
        raise SpecError(f"mailboxes file: unknown keys {unknown} (want mailboxes, mailbox_pools)")
    mailboxes = {
        k: {**MAILBOX_DEFAULTS, **{a: v for a, v in m.items() if v is not None}}
        for k, m in (doc.get("mailboxes") or {}).items()
    }
    raw_pools = doc.get("mailbox_pools") or {}
    pools = {
        "default": raw_pools.get("default"),
        "channels": raw_pools.get("channels") or {},
        "from": raw_pools.get("from") or {},
    }
    problems = mailbox_problems(mailboxes, pools)
    if problems:
        raise SpecError("; ".join(problems))
    if not mailboxes:
        return "", []
    document = {
        "mailboxes": {
            mailbox_id: {
                key: value
                for key, value in {
                    "address": m["address"],
                    "kind": None if m["kind"] == "gmail" else m["kind"],
                    "delegated_user": m["delegated_user"],
                    "token_secret": m["token_secret"],
                    "tenant_id": m["tenant_id"],
                    "client_id": m["client_id"],
                    "federated": bool(m["federated"]) if m["kind"] == "graph" else None,
                    "certificate_secret": m["certificate_secret"],
                    "send_as": m["send_as"],
                    "safety_share": m["safety_share"],
                    "limits": {
                        key: value
                        for key, value in {
                            "preset": _preset(m),
                            "units_per_minute": m["units_per_minute"],
                            "messages_per_day": m["messages_per_day"],
                            "recipients_per_day": m["recipients_per_day"],
                        }.items()
                        if value is not None
                    },
                }.items()
                if value is not None
            }
            for mailbox_id, m in mailboxes.items()
        },
        "pools": {key: value for key, value in pools.items() if value is not None},
    }
    queues = []
    for mailbox_id, m in sorted(mailboxes.items()):
        units = m["units_per_minute"] if m["units_per_minute"] is not None else MAILBOX_PRESET_UNITS[_preset(m)]
        rate = (
            MAX_DISPATCHES_PER_SECOND
            if units is None
            else min(MAX_DISPATCHES_PER_SECOND, units * m["safety_share"] / 6000)
        )
        queues.append(MailboxQueue(f"{name_prefix}-mbx-{mailbox_id}", rate, int(m["max_concurrent_dispatches"])))
    return tf_jsonencode(document), queues


def _preset(m: Mapping[str, Any]) -> str:
    return str(m["limits"] or MAILBOX_KIND_PRESET[m["kind"]])


def write_mailbox_files(doc: Mapping[str, Any], name_prefix: str, out: Path) -> tuple[str, list[MailboxQueue]]:
    """deploy-config/mailboxes.json (the env value, "" without mailboxes) and mailbox-queues (one
    line per queue: name, max dispatches per second, max concurrent dispatches)."""
    document, queues = render_mailboxes(doc, name_prefix)
    out.mkdir(parents=True, exist_ok=True)
    (out / "mailboxes.json").write_text(document, encoding="utf-8")
    (out / "mailbox-queues").write_text(
        "".join(f"{q.name} {q.max_dispatches_per_second!r} {q.max_concurrent_dispatches}\n" for q in queues),
        encoding="utf-8",
    )
    return document, queues


# The schedules var.sweep_schedule's validation accepts: every minute, or every N minutes (1-60).
SWEEP_SCHEDULE = re.compile(r"\* \* \* \* \*|\*/([1-9]|[1-5][0-9]|60) \* \* \* \*")


def sweep_interval_seconds(schedule: str) -> int:
    """monitoring.tf's local.sweep_interval_seconds, the fact sweep_interval_s: /health and the
    console call the sweep late after 3 of them, and the dead man's switch waits 3."""
    match = SWEEP_SCHEDULE.fullmatch(schedule)
    if not match:
        raise SpecError(
            f"sweep schedule {schedule!r}: use '* * * * *' or '*/N * * * *' with N from 1 to 60 "
            "(the late checks and the dead man's switch count in its interval)"
        )
    return 60 * int(match.group(1) or 1)


# ------------------------------------------------------------------------ CLI
def _facts(args_facts: list[str], environ: Mapping[str, str]) -> dict[str, str]:
    facts = {k[len(FACT_ENV_PREFIX) :]: v for k, v in environ.items() if k.startswith(FACT_ENV_PREFIX)}
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
    template = sub.add_parser("template", help="print one template rendered from the facts it needs")
    template.add_argument("name")
    template.add_argument("--fact", action="append", default=[])
    sql = sub.add_parser("sql-instance", help="check the Cloud SQL instance, print its private IP")
    sql.add_argument("--describe", type=Path, required=True, help="gcloud sql instances describe --format=json")
    sql.add_argument("--fact", action="append", default=[])
    setup = sub.add_parser("postgres-setup-sql", help="print the one-time SQL of the PostgreSQL job store")
    setup.add_argument("--fact", action="append", default=[])
    boxes = sub.add_parser("mailboxes", help="SAFESEND_MAILBOXES_JSON and the mailbox queues from a mailboxes file")
    boxes.add_argument(
        "--file", default="", help="JSON {mailboxes, mailbox_pools} as the Terraform variables; empty: none"
    )
    boxes.add_argument("--out", type=Path, required=True)
    boxes.add_argument("--fact", action="append", default=[])
    interval = sub.add_parser("sweep-interval", help="print the seconds between sweeps of a sweep schedule")
    interval.add_argument("schedule")
    sub.add_parser("check", help="validate the spec")
    args = parser.parse_args(argv)
    spec = load()
    try:
        if args.command == "check":
            errors = validate(spec)
            for error in errors:
                print(error, file=sys.stderr)
            return 1 if errors else 0
        if args.command == "sweep-interval":
            print(sweep_interval_seconds(args.schedule))
            return 0
        facts = _facts(args.fact, os.environ)
        if args.command == "gcloud":
            rendered = render(spec, facts)
            write_gcloud_files(rendered, args.out)
            for function, env in rendered.env.items():
                if not rendered.enabled[function]:
                    print(f"{function}: not deployed in this configuration")
                    continue
                print(
                    f"{function}: {len(env)} variables, secrets "
                    f"{sorted(rendered.secrets[function]) or 'none'}, files "
                    f"{sorted(rendered.secret_files[function]) or 'none'}, invokers {rendered.invokers[function]}"
                )
            return 0
        if args.command == "mailboxes":
            if "name_prefix" not in facts:
                raise SpecError("mailboxes needs the name_prefix fact")
            try:
                doc = json.loads(Path(args.file).read_text(encoding="utf-8")) if args.file else {}
            except (OSError, json.JSONDecodeError) as exc:
                raise SpecError(f"cannot read mailboxes file {args.file}: {exc}") from None
            _, queues = write_mailbox_files(doc, facts["name_prefix"], args.out)
            for queue in queues:
                rate, concurrent = queue.max_dispatches_per_second, queue.max_concurrent_dispatches
                print(f"mailbox queue {queue.name}: {rate}/s, {concurrent} concurrent")
            return 0
        if args.command == "template":
            print(render_template(spec, args.name, facts))
            return 0
        if args.command == "postgres-setup-sql":
            print(postgres_setup_sql(list(postgres_users(spec, facts).values())))
            return 0
        if args.command == "sql-instance":
            instance = json.loads(args.describe.read_text(encoding="utf-8") or "{}")
            print(sql_instance_private_ip(instance, render_template(spec, "postgres_network", facts)))
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
