"""Both deploy paths give every function the same runtime configuration, from one source of truth.

Terraform side: the module's own expressions (local.function_env / local.function_secrets, the
functions' ingress, timeouts, service accounts and every run.invoker grant), evaluated for the
scenario's variables (tfmodel / hcl_eval). gcloud side: cloudbuild-gcloud.yaml's render-config,
upload-and-index and deploy-functions steps run against a stub gcloud (cloudbuild_sim), and what
they pass to `gcloud functions deploy` / `add-invoker-policy-binding` is read back. Every
variable, every secret (id and version), ingress, timeout, runtime account and invoker must be
equal, in several scenarios covering every switch of env_spec.json; with the PostgreSQL job store
also every secret file and the Direct VPC egress settings, and the gcloud path's check of the Cloud
SQL instance it reads the private IP from."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from . import hcl_eval as H  # noqa: N812 - H reads like the HCL it evaluates
from .cloudbuild_sim import Sim, flags, inputs_digest, read_env_yaml
from .support import FUNCTIONS, INFRA, MODULE, locals_of, reference, resources, top_level
from .tfmodel import PROJECT_NUMBER, SQL_PRIVATE_IP, ModuleModel

pytestmark = pytest.mark.functions_out_of_process  # tests/coverage_pause.py

SPEC_MODULE = INFRA / "env_spec.py"

# Terraform module variable -> Cloud Build substitution of cloudbuild-gcloud.yaml feeding the same fact.
VARIABLE_TO_SUBSTITUTION = {
    "region": "_REGION",
    "name_prefix": "_NAME_PREFIX",
    "jobs_collection": "_JOBS_COLLECTION",
    "message_id_domain": "_MESSAGE_ID_DOMAIN",
    "default_from": "_DEFAULT_FROM",
    "log_level": "_LOG_LEVEL",
    "gmail_user": "_GMAIL_USER",
    "gmail_delegated_user": "_GMAIL_DELEGATED_USER",
    "index_lag_seconds": "_INDEX_LAG_S",
    "unknown_window_seconds": "_UNKNOWN_WINDOW_S",
    "verify_horizon_seconds": "_VERIFY_HORIZON_S",
    "retry_horizon_seconds": "_RETRY_HORIZON_S",
    "create_n8n_invoker_service_account": "_CREATE_N8N_INVOKER",
    "extra_caller_service_accounts": "_EXTRA_CALLERS",
    "public_callers": "_PUBLIC_CALLERS",
    "callback_allowed_hosts": "_CALLBACK_ALLOWED_HOSTS",
    "api_deciders": "_API_DECIDERS",
    "gmail_credentials_version": "_GMAIL_CREDENTIALS_VERSION",
    "webhook_hmac_version": "_WEBHOOK_HMAC_VERSION",
    "api_keys_version": "_API_KEYS_VERSION",
    "callback_hmac_version": "_CALLBACK_HMAC_VERSION",
    "reviewers_enabled": "_REVIEWERS",
    "notify_chat_webhook": "_NOTIFY_CHAT_WEBHOOK",
    "notify_slack_webhook": "_NOTIFY_SLACK_WEBHOOK",
    "notify_email_to": "_NOTIFY_EMAIL_TO",
    "notify_email_channel": "_NOTIFY_EMAIL_CHANNEL",
    "review_allowed_emails": "_REVIEW_ALLOWED_EMAILS",
    "review_allowed_domains": "_REVIEW_ALLOWED_DOMAINS",
    "review_notify_timeout_seconds": "_REVIEW_NOTIFY_TIMEOUT_S",
    "notify_chat_webhook_version": "_NOTIFY_CHAT_WEBHOOK_VERSION",
    "notify_slack_webhook_version": "_NOTIFY_SLACK_WEBHOOK_VERSION",
    "review_csrf_version": "_REVIEW_CSRF_VERSION",
    "job_store": "_JOB_STORE",
    "postgres_pool_max": "_POSTGRES_POOL_MAX",
    "postgres_server_ca_version": "_POSTGRES_SERVER_CA_VERSION",
    # not facts of the spec, but settings of resources both paths create
    "review_iap_members": "_REVIEW_IAP_MEMBERS",
    "review_max_delivery_attempts": "_REVIEW_MAX_DELIVERY_ATTEMPTS",
    # the sweep's schedule: Terraform schedules the job with it, gcloud's job was created with it;
    # both derive the fact sweep_interval_s (SAFESEND_SWEEP_INTERVAL_S) from it
    "sweep_schedule": "_SWEEP_SCHEDULE",
}
REVIEWERS = {
    "reviewers_enabled": True,
    "review_iap_members": ["group:mail-reviewers@example.com"],
    "review_allowed_emails": ["ann@example.com"],
}

# Two sender mailboxes (one delegated, one with its own token) and pools (issue 24). The gcloud path
# reads them from a JSON file shaped like these variables (_MAILBOXES_FILE).
MAILBOXES = {
    "mailboxes": {
        "shop": {
            "address": "shop@example.com",
            "delegated_user": "shop@example.com",
            "send_as": ["orders@example.com"],
        },
        "news": {
            "address": "news@example.com",
            "token_secret": "gmail-token-news",
            "limits": "workspace_legacy_rate",
            "messages_per_day": 1500,
            "safety_share": 0.9,
            "max_concurrent_dispatches": 2,
        },
    },
    "mailbox_pools": {
        "default": ["shop", "news"],
        "channels": {"receipts": ["shop"]},
        "from": {"orders@example.com": ["shop"], "example.com": ["shop", "news"]},
    },
}
MAILBOX_VARIABLES = ("mailboxes", "mailbox_pools")
MAILBOXES_FILE = "infra/mailboxes.test.json"

SCENARIOS = {
    "defaults": {},
    "keyless-public-callbacks": {
        "gmail_delegated_user": "boss@example.com",
        "public_callers": True,
        "callback_allowed_hosts": ["n8n.example.com", "*.hooks.example.com"],
    },
    "everything-changed": {
        "region": "europe-west1",
        "name_prefix": "ss-prod",
        "jobs_collection": "mail_jobs",
        "message_id_domain": "mx.example.org",
        "default_from": '"Shop, Inc" <shop@example.org>',
        "log_level": "DEBUG",
        "gmail_user": "shop@example.org",
        "gmail_delegated_user": "",
        "index_lag_seconds": 120,
        "unknown_window_seconds": 600,
        "verify_horizon_seconds": 2400,
        "retry_horizon_seconds": 7200,
        "create_n8n_invoker_service_account": False,
        "extra_caller_service_accounts": ["n8n@other-proj.iam.gserviceaccount.com", "b@p2.iam.gserviceaccount.com"],
        "gmail_credentials_version": "7",
        "webhook_hmac_version": "3",
        "sweep_schedule": "*/2 * * * *",
    },
    "public-with-versions": {
        "public_callers": True,
        "create_n8n_invoker_service_account": False,
        "api_keys_version": "2",
        "callback_allowed_hosts": ["n8n.example.com"],
        "callback_hmac_version": "5",
    },
    "reviewers": {**REVIEWERS},
    "reviewers-everything": {
        **REVIEWERS,
        "region": "europe-west1",
        "name_prefix": "ss-prod",
        "gmail_delegated_user": "boss@example.com",
        "callback_allowed_hosts": ["n8n.example.com"],
        "public_callers": True,
        "review_iap_members": ["group:mail-reviewers@example.com", "user:ann@example.com", "domain:example.org"],
        "review_allowed_emails": ["ann@example.com", "bob@example.org"],
        "review_allowed_domains": ["example.org"],
        "notify_chat_webhook": True,
        "notify_slack_webhook": True,
        "notify_email_to": "reviewers@example.org",
        "notify_email_channel": "notifications",
        "review_notify_timeout_seconds": 900,
        "notify_chat_webhook_version": "4",
        "notify_slack_webhook_version": "6",
        "review_csrf_version": "2",
        "review_max_delivery_attempts": 12,
    },
    # POST /decide on: an API key, the HMAC signer and n8n's service account may decide.
    "deciders": {
        **REVIEWERS,
        "public_callers": True,
        "api_deciders": ["key:n8n-prod", "hmac", "n8n@other-proj.iam.gserviceaccount.com"],
        "extra_caller_service_accounts": ["n8n@other-proj.iam.gserviceaccount.com"],
    },
    "postgres": {"job_store": "postgres", "postgres_pool_max": 1, "postgres_server_ca_version": "3"},
    "mailboxes": {**REVIEWERS, **MAILBOXES, "name_prefix": "ss-prod", "region": "europe-west1"},
    "postgres-reviewers-everything": {
        **REVIEWERS,
        "job_store": "postgres",
        "region": "europe-west1",
        "name_prefix": "ss-prod",
        "gmail_delegated_user": "boss@example.com",
        "callback_allowed_hosts": ["n8n.example.com"],
        "public_callers": True,
        "notify_chat_webhook": True,
        "notify_slack_webhook": True,
        "notify_email_to": "reviewers@example.org",
        "review_allowed_domains": ["example.org"],
    },
}
FILE_SECRET = re.compile(r"^(/[^=]+)=([^:]+):(.+)$")  # /dir/file=secret:version in --set-secrets


def sql_instance_description(name_prefix: str, **changes) -> dict:
    """What `gcloud sql instances describe --format=json` answers for the module's instance (Admin
    API DatabaseInstance), with `changes` applied to settings / ipConfiguration / the top level."""
    instance = {
        "name": f"{name_prefix}-jobs",
        "databaseVersion": "POSTGRES_16",
        "ipAddresses": [{"type": "PRIVATE", "ipAddress": SQL_PRIVATE_IP}],
        "settings": {
            "databaseFlags": [
                {"name": "cloudsql.iam_authentication", "value": "on"},
                {"name": "max_connections", "value": "100"},
            ],
            "ipConfiguration": {
                "ipv4Enabled": False,
                "sslMode": "ENCRYPTED_ONLY",
                "privateNetwork": f"projects/proj-1/global/networks/{name_prefix}-vpc",
            },
            "backupConfiguration": {"enabled": True, "pointInTimeRecoveryEnabled": True},
            "deletionProtectionEnabled": True,
        },
    }
    for key, value in changes.items():
        where, _, name = key.rpartition(".")
        target = instance
        for part in filter(None, where.split(".")):
            target = target[part]
        if value is None:
            target.pop(name, None)
        else:
            target[name] = value
    return instance


def env_spec():
    """infra/env_spec.py, the renderer cloudbuild-gcloud.yaml runs (loaded from this checkout)."""
    import sys

    name = f"safesend_env_spec_{abs(hash(str(SPEC_MODULE)))}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, SPEC_MODULE)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def as_substitution(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value)
    return str(value)


# ---------------------------------------------------------------- Terraform side
def terraform_config(overrides: dict) -> dict:
    model = ModuleModel(overrides)
    env = model.local("function_env")
    secrets = {
        fn: {k: (v["secret_id"], v["version"]) for k, v in m.items()}
        for fn, m in model.local("function_secrets").items()
    }
    out = {}
    for fn_block in resources("google_cloudfunctions2_function"):
        fn = fn_block.name
        if not model.instances(fn_block.type, fn):
            continue  # not deployed in this configuration (count = 0)
        service = fn_block.blocks("service_config")[0]
        dynamic = service.get("dynamic", [])
        assert not [k for k in service if k == "secret_environment_variables"], (
            f"{fn}: secrets must come from env_spec.json (a dynamic block over local.function_secrets.{fn})"
        )
        assert sorted(k for d in dynamic for k in d) == [
            "direct_vpc_network_interface",
            "secret_environment_variables",
            "secret_volumes",
        ], fn
        for_each = {k: v["for_each"] for d in dynamic for k, v in d.items()}
        assert for_each == {
            "secret_environment_variables": f"${{local.function_secrets.{fn}}}",
            "secret_volumes": f"${{local.function_secret_files.{fn}}}",
            "direct_vpc_network_interface": f"${{local.function_direct_vpc.{fn}}}",
        }, f"{fn}: secrets, secret files and Direct VPC must come from env_spec.json"
        assert service["direct_vpc_egress"] == f"${{one(local.function_direct_vpc.{fn}[*].egress)}}", fn
        account_name = re.sub(r"\[0\]$", "", reference(service["service_account_email"]).split(".")[1])
        account = model.instances("google_service_account", account_name)[0]
        evaluated = model.instances(fn_block.type, fn)[0]["service_config"][0]
        files = {}
        for volume in evaluated["secret_volumes"]:
            (version,) = volume["versions"]
            files[f"{volume['mount_path']}/{version['path']}"] = (volume["secret"], version["version"])
        interfaces = evaluated["direct_vpc_network_interface"]
        vpc = None
        if interfaces:
            (interface,) = interfaces
            vpc = {
                "network": interface["network"],
                "subnetwork": interface["subnetwork"],
                "egress": evaluated["direct_vpc_egress"],
            }
        else:
            assert evaluated["direct_vpc_egress"] is None, fn
        out[fn] = {
            "env": env[fn],
            "secrets": secrets[fn],
            "secret_files": files,
            "vpc": vpc,
            "ingress": service["ingress_settings"],
            "timeout": service["timeout_seconds"],
            "platform": (
                evaluated["available_cpu"],
                evaluated["available_memory"],
                int(evaluated["max_instance_request_concurrency"]),
            ),
            "runtime_account": account["email"],
            "entry_point": fn_block.first("build_config", "entry_point"),
            "invokers": set(),
        }
        assert service["environment_variables"] == f"${{local.function_env.{fn}}}", (
            f"{fn}: environment_variables must be local.function_env.{fn} (env_spec.json)"
        )
    for block in resources("google_cloud_run_v2_service_iam_member"):
        match = re.fullmatch(
            r"google_cloudfunctions2_function\.(\w+)(\[0\])?\.service_config\[0\]\.service",
            reference(block.body["name"]) or "",
        )
        assert match and block.body["role"] == "roles/run.invoker", block.address
        for instance in model.instances(block.type, block.name):
            out[match.group(1)]["invokers"].add(instance["member"])
    out["_push"] = None
    blocks = lambda value: value if isinstance(value, list) else []  # noqa: E731 - unwritten block: UNKNOWN
    for sub in model.instances("google_pubsub_subscription", "notify_push"):
        oidc = blocks(sub["push_config"][0]["oidc_token"])
        dead = blocks(sub["dead_letter_policy"])
        retry = blocks(sub["retry_policy"])
        out["_push"] = {
            "name": sub["name"],
            "topic": sub["topic"],
            "endpoint": sub["push_config"][0]["push_endpoint"],
            "oidc_account": oidc[0]["service_account_email"] if oidc else None,
            "audience": oidc[0]["audience"] if oidc else None,
            "ack_deadline_s": sub["ack_deadline_seconds"],
            "min_backoff": retry[0]["minimum_backoff"] if retry else None,
            "max_backoff": retry[0]["maximum_backoff"] if retry else None,
            "dead_letter_topic": dead[0]["dead_letter_topic"] if dead else None,
            "max_delivery_attempts": str(dead[0]["max_delivery_attempts"]) if dead else None,
            "dead_letter_forwarder": [
                g["member"]
                for g in model.instances("google_pubsub_subscription_iam_member", "dead_letter_notify_push_subscriber")
            ],
        }
    out["_queues"] = {
        queue["name"]: {
            "location": queue["location"],
            "rate": queue["rate_limits"][0]["max_dispatches_per_second"],
            "concurrent": queue["rate_limits"][0]["max_concurrent_dispatches"],
            "retry": {
                k: str(queue["retry_config"][0][k])
                for k in ("max_attempts", "min_backoff", "max_backoff", "max_doublings")
            },
            "enqueuers": sorted(
                g["member"]
                for g in model.instances("google_cloud_tasks_queue_iam_member", "mailbox_enqueuer")
                if g["name"] == queue["name"] and g["role"] == "roles/cloudtasks.enqueuer"
            ),
        }
        for queue in model.instances("google_cloud_tasks_queue", "mailbox")
    }
    accessors = model.instances("google_iap_web_cloud_run_service_iam_member", "review_accessors")
    out["_iap"] = {
        "enabled": bool(model.instances("google_cloudfunctions2_function", "review")),
        "accessors": sorted((a["member"], a["role"]) for a in accessors),
    }
    return out


def seconds(duration: str) -> str:
    """gcloud's "10s" / "7d" and Terraform's "10s" / "604800s" on one scale."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    return str(int(duration[:-1]) * units[duration[-1]]) + "s"


# ---------------------------------------------------------------- gcloud side
@dataclass(frozen=True)
class GcloudRun:
    config: dict  # what gcloud_config returns
    workspace: Path  # the sim's scratch copy the steps ran in (the files they rendered)


# Builds run by this process, by inputs_digest: the same build for the same overrides of the same files
# ran for up to four tests here and in test_gcloud_cli (a second or more of CPU each).
_GCLOUD_RUNS: dict[str, GcloudRun] = {}


def gcloud_run(tmp_path: Path, overrides: dict) -> GcloudRun:
    """The gcloud path's build for `overrides`, run under `tmp_path` unless an identical one (same
    overrides, same bytes of cloudbuild-gcloud.yaml and infra/) already ran in this process."""
    key = inputs_digest("cloudbuild-gcloud.yaml", json.dumps(overrides, sort_keys=True).encode())
    if key not in _GCLOUD_RUNS:
        _GCLOUD_RUNS[key] = GcloudRun(_gcloud_build(tmp_path, overrides), tmp_path / "workspace")
    return _GCLOUD_RUNS[key]


def gcloud_config(tmp_path: Path, overrides: dict) -> dict:
    """What the gcloud path deploys for `overrides` (a copy: callers may change it)."""
    return copy.deepcopy(gcloud_run(tmp_path, overrides).config)


def _gcloud_build(tmp_path: Path, overrides: dict) -> dict:
    tmp_path.mkdir(parents=True, exist_ok=True)
    subs = {
        "_SOURCE_BUCKET": "proj-1-safesend-fn-src",
        "_MESSAGE_ID_DOMAIN": "mail.example.com",
        "_DEFAULT_FROM": "Support <support@example.com>",
    }
    for variable, value in overrides.items():
        if variable not in MAILBOX_VARIABLES:
            subs[VARIABLE_TO_SUBSTITUTION[variable]] = as_substitution(value)
    mailboxes = {k: v for k, v in overrides.items() if k in MAILBOX_VARIABLES}
    if mailboxes:
        subs["_MAILBOXES_FILE"] = MAILBOXES_FILE
    sim = Sim.create("cloudbuild-gcloud.yaml", tmp_path, subs)
    if mailboxes:
        (sim.workdir / MAILBOXES_FILE).write_text(json.dumps(mailboxes))
    instance = json.dumps(sql_instance_description(sim.subs["_NAME_PREFIX"]))
    sim.answers = [
        (r"projects describe", PROJECT_NUMBER + "\n", 0),
        (rf"sql instances describe {re.escape(sim.subs['_NAME_PREFIX'])}-jobs --format=json", instance, 0),
        (r"storage objects describe", "", 1),
        (r"indexes composite list", "[]\n", 0),
        (r"run services get-iam-policy", "\n", 0),
        (
            r"services identity create --service=iap\.googleapis\.com",
            f"service-{PROJECT_NUMBER}@gcp-sa-iap.iam.gserviceaccount.com\n",
            0,
        ),
        (
            r"services identity create --service=pubsub\.googleapis\.com",
            f"service-{PROJECT_NUMBER}@gcp-sa-pubsub.iam.gserviceaccount.com\n",
            0,
        ),
        (r"pubsub subscriptions describe", "", 1),
        # one mailbox queue exists already (updated in place), any other is created
        (r"tasks queues describe \S+-mbx-shop ", "projects/proj-1/locations/x/queues/y\n", 0),
        (r"tasks queues describe", "", 1),
    ]
    (sim.workdir / "functions-source.sha256").write_text("abc123 functions-source.zip\n")
    (sim.workdir / "functions-source.zip").write_bytes(b"PK")
    for step in ("render-config", "upload-and-index", "deploy-functions"):
        proc = sim.run(step)
        assert proc.returncode == 0, f"{step}:\n{proc.stdout}\n{proc.stderr}"
    out = {}
    deploys = [c for c in sim.calls() if c[:3] == ["gcloud", "functions", "deploy"]]
    for call in deploys:
        fn = call[3].split("-")[-1]
        f = flags(call)
        allowed = {
            "gen2",
            "quiet",
            "region",
            "runtime",
            "source",
            "entry-point",
            "trigger-http",
            "no-allow-unauthenticated",
            "service-account",
            "build-service-account",
            "docker-repository",
            "ingress-settings",
            "timeout",
            "env-vars-file",
            "set-secrets",
            "clear-secrets",
            "max-instances",
            "cpu",
            "concurrency",
            "memory",
            "network",
            "subnet",
        }
        assert set(f) <= allowed, (
            f"{fn}: gcloud deploy sets more than env_spec.json renders: {sorted(set(f) - allowed)}"
        )
        assert f["env-vars-file"] == f"deploy-config/{fn}.env.yaml", fn
        secrets, files = {}, {}
        if "set-secrets" in f:
            for item in str(f["set-secrets"]).split(","):
                mounted = FILE_SECRET.match(item)
                if mounted:  # a secret volume: gcloud mounts the secret's directory, the file in it
                    files[mounted.group(1)] = (mounted.group(2), mounted.group(3))
                    continue
                name, _, ref = item.partition("=")
                sid, _, version = ref.partition(":")
                secrets[name] = (sid, version)
        else:
            assert f.get("clear-secrets") is True, fn
        vpc = None
        if "network" in f or "subnet" in f:
            # no egress flag: the Cloud Functions API's default, private ranges only
            vpc = {
                "network": f.get("network"),
                "subnetwork": f.get("subnet"),
                "egress": "VPC_EGRESS_PRIVATE_RANGES_ONLY",
            }
        out[fn] = {
            "env": read_env_yaml(sim.workdir / str(f["env-vars-file"])),
            "secrets": secrets,
            "secret_files": files,
            "vpc": vpc,
            "ingress": {
                "all": "ALLOW_ALL",
                "internal-only": "ALLOW_INTERNAL_ONLY",
                "internal-and-gclb": "ALLOW_INTERNAL_AND_GCLB",
            }[f["ingress-settings"]],
            "timeout": int(str(f["timeout"]).rstrip("s")),
            "platform": (f.get("cpu"), f.get("memory"), int(str(f.get("concurrency")))),
            "runtime_account": f["service-account"],
            "entry_point": f["entry-point"],
            "invokers": set(),
        }
    for call in sim.calls():
        if call[:3] == ["gcloud", "functions", "add-invoker-policy-binding"]:
            out[call[3].split("-")[-1]]["invokers"].add(flags(call)["member"])
    out["_push"] = None
    creates = [c for c in sim.calls() if c[:4] == ["gcloud", "pubsub", "subscriptions", "create"]]
    assert len(creates) <= 1
    for call in creates:
        f = flags(call)
        allowed = {
            "topic",
            "push-endpoint",
            "push-auth-service-account",
            "push-auth-token-audience",
            "ack-deadline",
            "min-retry-delay",
            "max-retry-delay",
            "dead-letter-topic",
            "max-delivery-attempts",
            "expiration-period",
            "message-retention-duration",
        }
        assert set(f) <= allowed, sorted(set(f) - allowed)
        out["_push"] = {
            "name": call[4],
            "topic": f.get("topic"),
            "endpoint": f.get("push-endpoint"),
            "oidc_account": f.get("push-auth-service-account"),
            "audience": f.get("push-auth-token-audience"),
            "ack_deadline_s": int(f["ack-deadline"]) if "ack-deadline" in f else None,
            "min_backoff": f.get("min-retry-delay"),
            "max_backoff": f.get("max-retry-delay"),
            "dead_letter_topic": f.get("dead-letter-topic"),
            "max_delivery_attempts": f.get("max-delivery-attempts"),
            "dead_letter_forwarder": [
                flags(c)["member"]
                for c in sim.calls()
                if c[:4] == ["gcloud", "pubsub", "subscriptions", "add-iam-policy-binding"]
                and c[4] == call[4]
                and flags(c).get("role") == "roles/pubsub.subscriber"
            ],
        }
        assert f.get("expiration-period") == "never" and seconds(f["message-retention-duration"]) == "604800s"
    enabled = [c for c in sim.calls() if c[:5] == ["gcloud", "beta", "run", "services", "update"] and "--iap" in c]
    out["_iap"] = {
        "enabled": bool(enabled),
        "accessors": sorted(
            (flags(c)["member"], flags(c)["role"])
            for c in sim.calls()
            if c[:4] == ["gcloud", "iap", "web", "add-iam-policy-binding"]
            and flags(c).get("resource-type") == "cloud-run"
        ),
    }
    out["_queues"] = {}
    for call in sim.calls():
        if call[:4] in (["gcloud", "tasks", "queues", "create"], ["gcloud", "tasks", "queues", "update"]):
            f = flags(call)
            out["_queues"][call[4]] = {
                "location": f["location"],
                "rate": float(f["max-dispatches-per-second"]),
                "concurrent": int(f["max-concurrent-dispatches"]),
                "retry": {
                    k.replace("-", "_"): f[k] for k in ("max-attempts", "min-backoff", "max-backoff", "max-doublings")
                },
                "enqueuers": sorted(
                    flags(c)["member"]
                    for c in sim.calls()
                    if c[:4] == ["gcloud", "tasks", "queues", "add-iam-policy-binding"]
                    and c[4] == call[4]
                    and flags(c).get("role") == "roles/cloudtasks.enqueuer"
                ),
            }
    out["_calls"] = sim.calls()
    return out


@pytest.mark.parametrize("scenario", SCENARIOS, ids=list(SCENARIOS))
def test_both_deploy_paths_give_every_function_the_same_configuration(scenario, tmp_path):
    overrides = SCENARIOS[scenario]
    terraform = terraform_config(overrides)
    gcloud = gcloud_config(tmp_path, overrides)
    gcloud.pop("_calls")
    for key in ("_push", "_iap", "_queues"):
        tf, gc = terraform.pop(key), gcloud.pop(key)
        if key == "_push" and tf is not None and gc is not None:
            tf = {**tf, "min_backoff": seconds(tf["min_backoff"]), "max_backoff": seconds(tf["max_backoff"])}
            gc = {
                **gc,
                "min_backoff": seconds(gc["min_backoff"] or "0s"),
                "max_backoff": seconds(gc["max_backoff"] or "0s"),
            }
        assert tf == gc, f"{scenario}: {key} differs: terraform {tf!r}, gcloud {gc!r}"
    assert sorted(gcloud) == sorted(terraform), "both paths deploy the same functions"
    if overrides.get("reviewers_enabled"):
        assert {"notify", "review"} <= set(terraform), scenario
    if overrides.get("mailboxes"):
        assert "SAFESEND_MAILBOXES_JSON" in terraform["send"]["env"], scenario
    for fn in terraform:
        for key in (
            "env",
            "secrets",
            "secret_files",
            "vpc",
            "ingress",
            "timeout",
            "platform",
            "runtime_account",
            "entry_point",
            "invokers",
        ):
            tf, gc = terraform[fn][key], gcloud[fn][key]
            if key == "env":
                differ = {
                    name: (tf.get(name), gc.get(name)) for name in set(tf) | set(gc) if tf.get(name) != gc.get(name)
                }
                assert not differ, f"{scenario}/{fn}: variables differ (terraform, gcloud): {differ}"
            assert tf == gc, f"{scenario}/{fn}: {key} differs: terraform {tf!r}, gcloud {gc!r}"


def test_api_deciders_reach_send_alone_on_both_paths(tmp_path):
    """SAFESEND_API_DECIDERS turns POST /decide on, and only send serves it: both paths give send
    the same list, no other function has it, and unset (the default) it is absent everywhere."""
    overrides = SCENARIOS["deciders"]
    terraform = terraform_config(overrides)
    gcloud = gcloud_config(tmp_path / "on", overrides)
    expected = "key:n8n-prod,hmac,n8n@other-proj.iam.gserviceaccount.com"
    for config in (terraform, gcloud):
        assert config["send"]["env"].get("SAFESEND_API_DECIDERS") == expected
        assert {"send", "status", "reconcile", "sweep", "notify", "review"} <= set(config)
        assert deciding(config) == {"send"}
    defaults = (terraform_config({}), gcloud_config(tmp_path / "off", {}))
    for config in defaults:
        assert deciding(config) == set()


@pytest.mark.parametrize(
    ("schedule", "interval"), [(None, "300"), ("* * * * *", "60"), ("*/15 * * * *", "900")], ids=["default", "1", "15"]
)
def test_every_function_counts_sweeps_late_by_the_schedule_on_both_paths(schedule, interval, tmp_path):
    """/health and the console's Health page call the sweep late after 3 SAFESEND_SWEEP_INTERVAL_S:
    every function gets the schedule's interval, or a healthy */15 is "late" before each sweep."""
    overrides = {**REVIEWERS, **({"sweep_schedule": schedule} if schedule else {})}
    for config in (terraform_config(overrides), gcloud_config(tmp_path, overrides)):
        functions = {
            fn: c["env"].get("SAFESEND_SWEEP_INTERVAL_S") for fn, c in config.items() if not fn.startswith("_")
        }
        assert functions == dict.fromkeys(("send", "reconcile", "sweep", "status", "notify", "review"), interval)


@pytest.mark.parametrize("schedule", ["*/0 * * * *", "0 * * * *", "*/5 * * * 1-5", "*/61 * * * *", "*/5"])
def test_the_gcloud_path_refuses_a_schedule_without_a_fixed_interval(schedule, tmp_path):
    """As var.sweep_schedule's validation: only "* * * * *" and "*/N * * * *" (1 <= N <= 60) have an
    interval the late check can count with."""
    variable = top_level("variable", MODULE)["sweep_schedule"]
    (check,) = variable["validation"]
    assert H.evaluate_value(check["condition"], H.Scope(variables={"sweep_schedule": schedule})) is False
    with pytest.raises(env_spec().SpecError, match="sweep schedule"):
        env_spec().sweep_interval_seconds(schedule)
    for good, seconds in (("* * * * *", 60), ("*/1 * * * *", 60), ("*/60 * * * *", 3600)):
        assert H.evaluate_value(check["condition"], H.Scope(variables={"sweep_schedule": good})) is True
        assert env_spec().sweep_interval_seconds(good) == seconds


def deciding(config: dict) -> set[str]:
    """The functions whose environment has SAFESEND_API_DECIDERS."""
    return {fn for fn, c in config.items() if not fn.startswith("_") and "SAFESEND_API_DECIDERS" in c["env"]}


@pytest.mark.parametrize("scenario", SCENARIOS, ids=list(SCENARIOS))
def test_terraform_expressions_render_the_spec_exactly_as_env_spec_py(scenario):
    """The HCL renderer and infra/env_spec.py's are the same function: evaluated for the same facts
    (the HCL's own local.env_facts), they agree on every variable and secret."""
    model = ModuleModel(SCENARIOS[scenario])
    facts = model.local("env_facts")
    module = env_spec()
    rendered = module.render(module.load(), facts)
    assert rendered.env == model.local("function_env")
    assert {
        fn: {k: (v["secret_id"], v["version"]) for k, v in m.items()}
        for fn, m in model.local("function_secrets").items()
    } == rendered.secrets
    assert {
        fn: {path: (v["secret_id"], v["version"]) for path, v in m.items()}
        for fn, m in model.local("function_secret_files").items()
    } == rendered.secret_files
    assert {
        fn: (vpc[0] if vpc else None) for fn, vpc in model.local("function_direct_vpc").items()
    } == rendered.direct_vpc


def test_gcloud_substitution_defaults_are_the_terraform_variable_defaults():
    from .support import CLOUDBUILD_FILES, parsed_yaml

    subs = parsed_yaml(*CLOUDBUILD_FILES)["cloudbuild-gcloud.yaml"]["substitutions"]
    variables = top_level("variable", MODULE)
    for variable, substitution in VARIABLE_TO_SUBSTITUTION.items():
        assert "default" in variables[variable] or substitution in ("_MESSAGE_ID_DOMAIN", "_DEFAULT_FROM")
        if "default" not in variables[variable]:
            continue
        assert str(subs[substitution]) == as_substitution(variables[variable]["default"]), (
            f"{substitution} default {subs[substitution]!r} vs var.{variable} default "
            f"{variables[variable]['default']!r}"
        )


def test_every_fact_is_fed_by_a_variable_here_and_a_substitution_there():
    spec = env_spec().load()
    facts = locals_of(MODULE)["env_facts"]
    assert sorted(facts) == sorted(spec["facts"]), "local.env_facts must supply exactly the spec's facts"
    for name, expr in facts.items():
        plain = r"\$\{(var\.\w+|tostring\(var\.\w+\)|join\(\",\", var\.\w+\)|data\.google_project\.this\.number)\}"
        if name == "postgres_host":  # what only the instance knows: its private IP (gcloud: describe)
            assert expr == '${local.postgres ? google_sql_database_instance.jobs[0].private_ip_address : ""}', expr
            continue
        if name == "mailboxes_json":  # rendered from two typed variables (gcloud: env_spec.py mailboxes)
            assert expr == "${local.mailboxes_json}", expr
            continue
        if name == "sweep_interval_s":  # from sweep_schedule (gcloud: env_spec.py sweep-interval)
            assert expr == "${tostring(local.sweep_interval_seconds)}", expr
            continue
        assert re.fullmatch(plain, expr), f"env_facts.{name} = {expr}: keep facts plain references to variables"
    from .support import CLOUDBUILD_FILES, parsed_yaml

    render = {s["id"]: s for s in parsed_yaml(*CLOUDBUILD_FILES)["cloudbuild-gcloud.yaml"]["steps"]}["render-config"]
    fed = {item.split("=", 1)[0].removeprefix("SAFESEND_FACT_") for item in render["env"]}
    computed_facts = {"project_number", "postgres_host", "mailboxes_json", "sweep_interval_s"}
    assert fed | computed_facts == set(spec["facts"]), (
        "render-config must feed every fact (project number, the instance's private IP: read with gcloud; "
        "the mailboxes document: rendered from _MAILBOXES_FILE; the sweep interval: from _SWEEP_SCHEDULE)"
    )
    script = render["args"][-1]
    for computed in sorted(computed_facts):
        assert f"export SAFESEND_FACT_{computed}" in script, computed


def test_spec_is_valid_and_names_what_the_module_creates():
    module = env_spec()
    spec = module.load()
    assert module.validate(spec) == []
    model = ModuleModel()
    values = model.local("env_values")
    # The spec's names of things are the names the module gives them.
    assert values["tasks_queue"] == model.instances("google_cloud_tasks_queue", "reconcile")[0]["id"]
    assert values["review_topic"] == model.instances("google_pubsub_topic", "review")[0]["id"]
    assert values["sa_tasks_invoker"] == model.instances("google_service_account", "tasks_invoker")[0]["email"]
    assert values["sa_scheduler_invoker"] == model.instances("google_service_account", "scheduler_invoker")[0]["email"]
    assert (
        ModuleModel({"create_n8n_invoker_service_account": True}).local("env_values")["n8n_invoker_email"]
        == model.instances("google_service_account", "n8n_invoker")[0]["email"]
    )
    for fn in spec["functions"]:
        assert values[f"url_{fn}"] == model.local("function_urls")[fn]
    reviewers = ModuleModel(REVIEWERS)
    on = reviewers.local("env_values")
    assert on["sa_notify_push"] == reviewers.instances("google_service_account", "notify_push")[0]["email"]
    assert on["sa_iap_agent"] == reviewers.instances("google_project_service_identity", "iap")[0]["email"]
    assert "serviceAccount:" + on["sa_iap_agent"] == reviewers.local("iap_service_agent")
    # a function is deployed exactly when the spec says so
    for check in (model, reviewers):
        for fn, settings in spec["deploy"].items():
            wanted = check.local("env_values")[settings["enabled_by"]] == "true"
            assert bool(check.instances("google_cloudfunctions2_function", fn)) == wanted, fn
    for name, template in spec["secret_ids"].items():
        block = resources("google_secret_manager_secret")
        assert any(b.name == name for b in block), f"no google_secret_manager_secret.{name}"
        rendered = module.substitute(spec, template, values, name)
        assert rendered == model.local("secret_ids")[name] or model.local("secret_ids")[name] is None
        everything_on = ModuleModel(
            {
                "gmail_delegated_user": "",
                "public_callers": True,
                "callback_allowed_hosts": ["n8n.example.com"],
                **REVIEWERS,
                "notify_chat_webhook": True,
                "notify_slack_webhook": True,
                "job_store": "postgres",
            }
        )
        assert everything_on.local("secret_ids")[name] == module.substitute(
            spec, template, everything_on.local("env_values"), name
        )
    # the PostgreSQL job store: the spec's instance, network, subnet and users are the module's
    postgres = ModuleModel({**REVIEWERS, "job_store": "postgres"})
    pg = postgres.local("env_values")
    assert pg["postgres"] == "true" and values["postgres"] == "false"
    assert pg["postgres_instance"] == postgres.instances("google_sql_database_instance", "jobs")[0]["name"]
    assert pg["postgres_network"] == postgres.instances("google_compute_network", "jobs")[0]["name"]
    assert pg["postgres_subnet"] == postgres.instances("google_compute_subnetwork", "functions")[0]["name"]
    users = {u.key: u["name"] for u in postgres.instances("google_sql_user", "functions")}
    assert users == {fn: pg[f"pg_user_{fn}"] for fn in spec["functions"]}, "the spec's DSN users are the database users"
    for fn, user in users.items():
        assert user == postgres.local("postgres_accounts")[fn].removesuffix(".gserviceaccount.com"), fn
    assert (
        postgres.local("env_facts")["postgres_host"]
        == postgres.instances("google_sql_database_instance", "jobs")[0]["private_ip_address"]
    )
    dsn_files = {re.search(r"sslrootcert=(\S+)", pg[f"pg_dsn_{fn}"]).group(1) for fn in spec["functions"]}
    assert dsn_files == set(spec["secret_files"]), "every DSN verifies the server with the mounted CA file"
    assert spec["direct_vpc"]["enabled_by"] == "postgres" and spec["direct_vpc"]["functions"] == spec["functions"]
    # deploy settings of the spec are the functions' own
    for block in resources("google_cloudfunctions2_function"):
        service = block.blocks("service_config")[0]
        assert spec["deploy"][block.name]["ingress"] == service["ingress_settings"], block.address
        assert spec["deploy"][block.name]["timeout_s"] == service["timeout_seconds"], block.address


def code_env_names() -> set[str]:
    import ast

    names = set()
    for source in FUNCTIONS.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and re.fullmatch(r"SAFESEND_\w+", node.value)
            ):
                names.add(node.value)
    return names | {"GOOGLE_CLOUD_PROJECT"}


def test_the_spec_sets_only_variables_the_code_reads():
    spec = env_spec().load()
    unknown = (set(spec["env"]) | set(spec["secrets"])) - code_env_names()
    assert not unknown, f"env_spec.json sets variables the code in functions/ does not read: {sorted(unknown)}"
    for name in (
        "SAFESEND_AUTH_CALLER_SERVICE_ACCOUNTS",
        "SAFESEND_AUTH_INTERNAL_INVOKERS",
        "SAFESEND_AUTH_AUDIENCES",
        "SAFESEND_AUTH_TRUST_CLOUD_RUN_IAM",
    ):
        assert set(spec["env"][name]) == set(spec["functions"]), f"{name} must reach every function"


def test_the_gcloud_path_is_checked_by_running_it(tmp_path):
    """The stub sees what a real build would do: one deploy per function, the index before them; no
    reviewer side unless asked for."""
    calls = gcloud_config(tmp_path / "default", {})["_calls"]
    order = [" ".join(c[1:4]) for c in calls]
    create = next(i for i, c in enumerate(order) if c.startswith("firestore indexes composite"))
    first_deploy = next(i for i, c in enumerate(order) if c.startswith("functions deploy"))
    assert create < first_deploy
    assert sorted(c[3] for c in calls if c[:3] == ["gcloud", "functions", "deploy"]) == sorted(
        f"safesend-{fn}" for fn in ("send", "reconcile", "sweep", "status")
    )
    assert not [c for c in calls if "pubsub" in c or "iap" in " ".join(c)]


def test_the_gcloud_reviewer_side_deploys_then_wires_push_and_iap(tmp_path):
    """With _REVIEWERS=true: notify and review are deployed before their push subscription and IAP;
    the IAP agent is created and checked; an existing push subscription is updated in place."""
    calls = gcloud_config(tmp_path / "new", REVIEWERS)["_calls"]
    text = [" ".join(c) for c in calls]
    deploy_review = text.index(next(c for c in text if c.startswith("gcloud functions deploy safesend-review")))
    agent = text.index(next(c for c in text if "identity create --service=iap.googleapis.com" in c))
    iap_on = text.index(next(c for c in text if c.startswith("gcloud beta run services update safesend-review")))
    sub = text.index(next(c for c in text if c.startswith("gcloud pubsub subscriptions create safesend-notify-push")))
    deploy_notify = text.index(next(c for c in text if c.startswith("gcloud functions deploy safesend-notify")))
    assert deploy_review < agent < iap_on and deploy_notify < sub
    assert not [c for c in text if "allUsers" in c]


@pytest.mark.parametrize(
    "members",
    ["", "allUsers", "group:ok@example.com,allAuthenticatedUsers", "serviceAccount:x@p.iam.gserviceaccount.com"],
)
def test_the_gcloud_console_needs_people_to_let_through_and_never_the_public(tmp_path, members):
    sim = Sim.create(
        "cloudbuild-gcloud.yaml",
        tmp_path,
        {
            "_SOURCE_BUCKET": "b",
            "_MESSAGE_ID_DOMAIN": "mail.example.com",
            "_DEFAULT_FROM": "S <s@example.com>",
            "_REVIEWERS": "true",
            "_REVIEW_ALLOWED_EMAILS": "ann@example.com",
            "_REVIEW_IAP_MEMBERS": members,
        },
    )
    sim.answers = [
        (r"projects describe", PROJECT_NUMBER + "\n", 0),
        (r"storage objects describe", "", 1),
        (r"indexes composite list", "[]\n", 0),
        (r"run services get-iam-policy", "\n", 0),
        (
            r"services identity create --service=iap",
            f"service-{PROJECT_NUMBER}@gcp-sa-iap.iam.gserviceaccount.com\n",
            0,
        ),
    ]
    (sim.workdir / "functions-source.sha256").write_text("abc123 functions-source.zip\n")
    (sim.workdir / "functions-source.zip").write_bytes(b"PK")
    for step in ("render-config", "upload-and-index"):
        assert sim.run(step).returncode == 0
    proc = sim.run("deploy-functions")
    assert proc.returncode != 0 and "_REVIEW_IAP_MEMBERS" in proc.stderr
    assert not [c for c in sim.calls() if c[:4] == ["gcloud", "iap", "web", "add-iam-policy-binding"]]


def test_the_gcloud_path_refuses_an_iap_agent_it_did_not_render(tmp_path):
    sim = Sim.create(
        "cloudbuild-gcloud.yaml",
        tmp_path,
        {
            "_SOURCE_BUCKET": "b",
            "_MESSAGE_ID_DOMAIN": "mail.example.com",
            "_DEFAULT_FROM": "S <s@example.com>",
            "_REVIEWERS": "true",
            "_REVIEW_ALLOWED_EMAILS": "ann@example.com",
            "_REVIEW_IAP_MEMBERS": "group:r@example.com",
        },
    )
    sim.answers = [
        (r"projects describe", PROJECT_NUMBER + "\n", 0),
        (r"storage objects describe", "", 1),
        (r"indexes composite list", "[]\n", 0),
        (r"run services get-iam-policy", "\n", 0),
        (r"services identity create --service=iap", "service-999@gcp-sa-iap.iam.gserviceaccount.com\n", 0),
    ]
    (sim.workdir / "functions-source.sha256").write_text("abc123 functions-source.zip\n")
    (sim.workdir / "functions-source.zip").write_bytes(b"PK")
    for step in ("render-config", "upload-and-index"):
        assert sim.run(step).returncode == 0
    proc = sim.run("deploy-functions")
    assert proc.returncode != 0 and "IAP service agent" in proc.stderr
    assert not [c for c in sim.calls() if c[:3] == ["gcloud", "functions", "add-invoker-policy-binding"]]


def test_the_gcloud_path_uses_the_sql_instance_only_with_postgres(tmp_path):
    """Firestore (default): no Cloud SQL call, no network flag, no secret file. Postgres: the instance
    is described before anything is rendered, and every function gets its DSN host from it, the CA
    file and Direct VPC egress on the module's network."""
    calls = gcloud_config(tmp_path / "firestore", {})["_calls"]
    assert not [c for c in calls if c[1:2] == ["sql"]]
    assert not [c for c in calls if any(a.startswith(("--network", "--subnet")) for a in c)]
    config = gcloud_config(tmp_path / "postgres", {"job_store": "postgres"})
    calls = config.pop("_calls")
    describe = next(i for i, c in enumerate(calls) if c[1:4] == ["sql", "instances", "describe"])
    first_deploy = next(i for i, c in enumerate(calls) if c[1:3] == ["functions", "deploy"])
    assert describe < first_deploy and calls[describe][4] == "safesend-jobs"
    assert not [c for c in calls if c[1:2] == ["sql"] and c[2:4] != ["instances", "describe"]], (
        "the gcloud path never changes the instance"
    )
    for fn in ("send", "reconcile", "sweep", "status"):
        assert f"host={SQL_PRIVATE_IP} " in config[fn]["env"]["SAFESEND_POSTGRES_DSN"], fn
        assert config[fn]["vpc"] == {
            "network": "safesend-vpc",
            "subnetwork": "safesend-functions",
            "egress": "VPC_EGRESS_PRIVATE_RANGES_ONLY",
        }, fn
        assert config[fn]["secret_files"] == {
            "/etc/secrets/cloudsql/server-ca.pem": ("safesend-cloudsql-server-ca", "latest")
        }, fn


UNFIT_INSTANCES = {
    "no-iam-authentication": {"settings.databaseFlags": [{"name": "max_connections", "value": "100"}]},
    "iam-authentication-off": {"settings.databaseFlags": [{"name": "cloudsql.iam_authentication", "value": "off"}]},
    "unencrypted-allowed": {"settings.ipConfiguration.sslMode": "ALLOW_UNENCRYPTED_AND_ENCRYPTED"},
    "authorized-network": {"settings.ipConfiguration.authorizedNetworks": [{"value": "0.0.0.0/0"}]},
    "other-network": {"settings.ipConfiguration.privateNetwork": "projects/proj-1/global/networks/default"},
    "no-private-ip": {"ipAddresses": [{"type": "PRIMARY", "ipAddress": "34.1.2.3"}]},
    "no-deletion-protection": {"settings.deletionProtectionEnabled": False},
    "no-point-in-time-recovery": {"settings.backupConfiguration": {"enabled": True}},
    "mysql": {"databaseVersion": "MYSQL_8_0"},
}


@pytest.mark.parametrize("problem", UNFIT_INSTANCES, ids=list(UNFIT_INSTANCES))
def test_the_gcloud_path_refuses_an_unfit_sql_instance(tmp_path, problem):
    """The gcloud path does not create the instance; it refuses to deploy against one that lacks
    what the DSN relies on (IAM database authentication, TLS only, its private network, ...)."""
    sim = Sim.create(
        "cloudbuild-gcloud.yaml",
        tmp_path,
        {
            "_SOURCE_BUCKET": "b",
            "_MESSAGE_ID_DOMAIN": "mail.example.com",
            "_DEFAULT_FROM": "S <s@example.com>",
            "_JOB_STORE": "postgres",
        },
    )
    instance = json.dumps(sql_instance_description("safesend", **UNFIT_INSTANCES[problem]))
    sim.answers = [
        (r"projects describe", PROJECT_NUMBER + "\n", 0),
        (r"sql instances describe safesend-jobs", instance, 0),
    ]
    proc = sim.run("render-config")
    assert proc.returncode != 0 and "Cloud SQL instance" in proc.stderr, proc.stderr
    assert not (sim.workdir / "deploy-config" / "send.env.yaml").exists()


def test_the_gcloud_path_refuses_an_unknown_job_store(tmp_path):
    sim = Sim.create(
        "cloudbuild-gcloud.yaml",
        tmp_path,
        {
            "_SOURCE_BUCKET": "b",
            "_MESSAGE_ID_DOMAIN": "mail.example.com",
            "_DEFAULT_FROM": "S <s@example.com>",
            "_JOB_STORE": "Postgres",
        },
    )
    sim.answers = [(r"projects describe", PROJECT_NUMBER + "\n", 0)]
    proc = sim.run("render-config")
    assert proc.returncode != 0 and "_JOB_STORE" in proc.stderr


def test_gcloud_relies_on_the_api_default_egress_which_is_private_ranges_only():
    """cloudbuild-gcloud.yaml passes --network/--subnet and no egress flag: the Cloud Functions v2
    API documents private ranges only as the default, the one egress env_spec.py allows."""
    from pathlib import Path

    import googleapiclient

    doc = Path(googleapiclient.__file__).parent / "discovery_cache" / "documents" / "cloudfunctions.v2.json"
    field = json.loads(doc.read_text())["schemas"]["ServiceConfig"]["properties"]["directVpcEgress"]
    assert "defaults to VPC_EGRESS_PRIVATE_RANGES_ONLY" in field["description"]
    assert env_spec().DIRECT_VPC_EGRESS == ("VPC_EGRESS_PRIVATE_RANGES_ONLY",)
    assert env_spec().load()["direct_vpc"]["egress"] == "VPC_EGRESS_PRIVATE_RANGES_ONLY"


@pytest.mark.parametrize(
    "overrides",
    [{}, {"name_prefix": "ss-prod", "project_id": "acme-mail"}, REVIEWERS],
    ids=["default", "prefix-project", "reviewers"],
)
def test_the_gcloud_path_renders_the_same_setup_sql_as_terraform(overrides):
    """The one-time grants SQL: `env_spec.py postgres-setup-sql` (the gcloud path, infra/README.md)
    prints exactly the module's output postgres_setup_sql, so it grants the very users
    google_sql_user creates, and the role and schema every rendered DSN names."""
    model = ModuleModel({"job_store": "postgres", **overrides})
    values = model.local("env_values")
    facts = {name: values[name] for name in ("name_prefix", "project_id", "reviewers")}
    spec = env_spec()
    users = spec.postgres_users(spec.load(), facts)
    assert users == {u.key: u["name"] for u in model.instances("google_sql_user", "functions")}
    assert spec.postgres_setup_sql(list(users.values())) == model.local("postgres_setup_sql")
    dsn = model.local("function_env")["send"]["SAFESEND_POSTGRES_DSN"]
    assert f"-c role={spec.POSTGRES_OWNER_ROLE}" in dsn and f"-c search_path={spec.POSTGRES_SCHEMA}" in dsn
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, str(SPEC_MODULE), "postgres-setup-sql", *[f"--fact={k}={v}" for k, v in facts.items()]],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert out == model.local("postgres_setup_sql") + "\n"
