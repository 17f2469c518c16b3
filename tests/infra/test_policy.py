"""(a) Every .tf file parses with python-hcl2, and the parsed infra/ obeys our IAM and auth policy."""

from __future__ import annotations

import json
import re

import pytest

from . import hcl_eval as H  # noqa: N812 - H reads like the HCL it evaluates
from .support import (
    CLOUDBUILD_FILES,
    ENVS,
    INFRA,
    MODULE,
    ROOT,
    Block,
    blocks,
    entry_points,
    locals_of,
    parsed_hcl,
    parsed_yaml,
    reference,
    resource,
    resources,
    tf_files,
    top_level,
)
from .tfmodel import PROJECT_NUMBER, SQL_PRIVATE_IP, ModuleModel

pytestmark = pytest.mark.functions_out_of_process  # tests/coverage_pause.py

PRIMITIVE_ROLES = re.compile(r"roles/(owner|editor|viewer)\b")
PUBLIC_MEMBERS = re.compile(r"\ballUsers\b|\ballAuthenticatedUsers\b")
# Settings of local stacks and tests only (config.py / reviewer_auth.py): never in deployed configuration.
FORBIDDEN_ENV = (
    "SAFESEND_AUTH_DISABLED",
    "SAFESEND_ENABLE_FAULT_INJECTION",
    "SAFESEND_REVIEW_DEV_IDENTITY",
    "SAFESEND_AUTH_INTERNAL_API_KEYS",
    "SAFESEND_TASKS_API_KEY",
    "SAFESEND_CALLBACK_ALLOW_HTTP",
)
FUNCTION = "google_cloudfunctions2_function"
INTERNAL = {"reconcile", "sweep", "notify"}
REVIEWER_FUNCTIONS = ("notify", "review")
WEBHOOK_SECRETS = ("SAFESEND_NOTIFY_CHAT_WEBHOOK_URL", "SAFESEND_NOTIFY_SLACK_WEBHOOK_URL")
# Functions that deliver the outbox (chat posts and their retries, decision answers in the thread).
OUTBOX_DELIVERERS = ("reconcile", "sweep", "notify", "review")
SERVICE_REF = re.compile(r"google_cloudfunctions2_function\.(\w+)(\[0\])?\.service_config\[0\]\.service")
IAM_TYPE = re.compile(r"^google_.*_iam_(member|binding|policy)$")
# Everything the PostgreSQL job store adds; none of it exists with Firestore (the default).
POSTGRES_RESOURCES = (
    ("google_sql_database_instance", "jobs"),
    ("google_sql_database", "safesend"),
    ("google_sql_user", "functions"),
    ("google_project_iam_member", "cloudsql_instance_user"),
    ("google_compute_network", "jobs"),
    ("google_compute_subnetwork", "functions"),
    ("google_compute_firewall", "deny_ingress"),
    ("google_compute_global_address", "cloudsql_psa"),
    ("google_service_networking_connection", "cloudsql"),
    ("google_secret_manager_secret", "cloudsql_server_ca"),
    ("google_secret_manager_secret_version", "cloudsql_server_ca"),
    ("google_secret_manager_secret_iam_member", "cloudsql_server_ca"),
)
POSTGRES_ENV = ("SAFESEND_STORE", "SAFESEND_POSTGRES_DSN", "SAFESEND_POSTGRES_IAM_AUTH", "SAFESEND_POSTGRES_POOL_MAX")
POSTGRES_APIS = ("compute.googleapis.com", "servicenetworking.googleapis.com", "sqladmin.googleapis.com")
CA_FILE = "/etc/secrets/cloudsql/server-ca.pem"


def all_iam_blocks() -> list[Block]:
    return [b for b in blocks("resource") if IAM_TYPE.match(b.type)]


def functions() -> list[Block]:
    return resources(FUNCTION)


def test_every_tf_file_parses():
    parsed = parsed_hcl()
    assert set(parsed) == {str(p.relative_to(ROOT)) for p in tf_files()}
    assert len(parsed) >= 15
    errors = {f: p["__error__"] for f, p in parsed.items() if "__error__" in p}
    assert not errors, errors


def test_layout_module_and_two_environments():
    for env in ENVS:
        calls = [m for f, p in parsed_hcl().items() if f.startswith(f"infra/envs/{env}/") for m in p.get("module", [])]
        assert [list(m) for m in calls] == [["safesend"]], f'{env}: expected one module "safesend"'
        assert calls[0]["safesend"]["source"] == "../../modules/safesend"
    assert not list(INFRA.glob("*.tf")), "no flat root module in infra/ any more: use infra/envs/<env>"


def test_no_primitive_roles_anywhere():
    for file, parsed in parsed_hcl().items():
        text = json.dumps(parsed)
        assert not PRIMITIVE_ROLES.search(text), f"{file}: primitive role {PRIMITIVE_ROLES.search(text).group(0)}"


def test_public_members_only_on_send_and_status_and_only_with_public_callers():
    """allUsers exactly in send_public/status_public (count on var.public_callers); allAuthenticatedUsers nowhere."""
    allowed = {
        ("google_cloud_run_v2_service_iam_member", "send_public"),
        ("google_cloud_run_v2_service_iam_member", "status_public"),
    }
    for file, parsed in parsed_hcl().items():
        assert "allAuthenticatedUsers" not in json.dumps(parsed), file
    for block in blocks("resource"):
        if (block.type, block.name) in allowed:
            assert block.body["member"] == "allUsers" and block.body["count"] == "${var.public_callers ? 1 : 0}", (
                block.address
            )
            fn = block.name.split("_")[0]
            assert block.body["name"] == f"${{google_cloudfunctions2_function.{fn}.service_config[0].service}}"
        else:
            assert not PUBLIC_MEMBERS.search(json.dumps(without_prose(block.body))), (
                f"{block.address} mentions allUsers"
            )
    for file, parsed in parsed_hcl().items():
        rest = without_prose({k: v for k, v in parsed.items() if k != "resource"})
        assert not PUBLIC_MEMBERS.search(json.dumps(rest)), file


def without_prose(value):
    """The parsed HCL minus descriptions and error messages (documentation, not configuration)."""
    if isinstance(value, dict):
        return {k: without_prose(v) for k, v in value.items() if k not in ("description", "error_message")}
    if isinstance(value, list):
        return [without_prose(v) for v in value]
    return value


def test_no_authoritative_or_broad_project_iam():
    for block in all_iam_blocks():
        if block.type.startswith("google_project_iam"):
            assert block.type == "google_project_iam_member", (
                f"{block.address}: authoritative project IAM would remove other members' grants"
            )
            for role in (
                "roles/iam.serviceAccountTokenCreator",
                "roles/iam.serviceAccountUser",
                "roles/iam.serviceAccountOpenIdTokenCreator",
                "roles/iam.serviceAccountKeyAdmin",
            ):
                assert role not in block.text(), (
                    f"{block.address}: {role} must be granted on one account, not the project"
                )


def test_every_entry_point_has_exactly_one_function_and_vice_versa():
    """Every @functions_framework.http entry point is deployed, or listed in env_spec.json's
    not_deployed (an entry point a later issue deploys): none is forgotten silently."""
    spec = json.loads((MODULE / "env_spec.json").read_text())
    points = entry_points()
    assert points >= {"send", "reconcile", "sweep", "status", "notify", "review"}
    declared = [f.first("build_config", "entry_point") for f in functions()]
    assert sorted(declared) == sorted(spec["functions"]), "env_spec.json functions vs function resources"
    waiting = set(spec.get("not_deployed", {}))
    assert sorted(points - waiting) == sorted(declared), (
        f"entry points {sorted(points)} (not deployed yet: {sorted(waiting)}) vs function resources {sorted(declared)}"
    )
    assert waiting <= points, f"not_deployed lists entry points main.py does not have: {sorted(waiting - points)}"
    for function in functions():
        assert function.name == function.first("build_config", "entry_point"), function.address


def test_every_function_runs_as_its_own_service_account():
    """One account per function, existing exactly when the function does (same count)."""
    used: dict[str, str] = {}
    for function in functions():
        ref = reference(function.first("service_config", "service_account_email"))
        match = re.fullmatch(r"google_service_account\.(\w+)(\[0\])?\.email", ref or "")
        assert match, f"{function.address}: service_account_email must reference a google_service_account"
        account = match.group(1)
        assert account not in used, f"{function.address} shares {account} with {used[account]}"
        used[account] = function.name
        sa = resource("google_service_account", account)
        assert "for_each" not in sa.body, f"{sa.address} must be a single account"
        assert sa.body.get("count") == function.body.get("count"), (
            f"{sa.address} must exist exactly when {function.address} does (same count)"
        )
        assert (match.group(2) is not None) == ("count" in sa.body), function.address
    builder = reference(functions()[0].first("build_config", "service_account"))
    assert builder is not None and builder.split(".")[1] not in used, "the build account must not be a runtime account"


MODES = [
    dict(zip(("keyless", "public", "callbacks", "n8n", "reviewers", "postgres"), bits, strict=True))
    for bits in __import__("itertools").product((False, True), repeat=6)
]


def mode_id(mode: dict) -> str:
    return "-".join(k if v else f"no{k}" for k, v in mode.items())


def model_for(mode: dict) -> ModuleModel:
    """The module for one combination of modes. With reviewers: the Chat webhook always, Slack with
    callbacks (so both one and two webhook targets are covered), an email target without n8n."""
    reviewers = {}
    if mode["reviewers"]:
        reviewers = {
            "reviewers_enabled": True,
            "review_iap_members": ["group:mail-reviewers@example.com"],
            "review_allowed_emails": ["ann@example.com"],
            "review_allowed_domains": ["example.com"] if mode["public"] else [],
            "notify_chat_webhook": True,
            "notify_slack_webhook": mode["callbacks"],
            "notify_email_to": "" if mode["n8n"] else "reviewers@example.com",
        }
    return ModuleModel(
        {
            "gmail_delegated_user": "boss@example.com" if mode["keyless"] else "",
            "public_callers": mode["public"],
            "callback_allowed_hosts": ["n8n.example.com"] if mode["callbacks"] else [],
            "create_n8n_invoker_service_account": mode["n8n"],
            "extra_caller_service_accounts": []
            if mode["n8n"] or mode["public"]
            else ["n8n@other.iam.gserviceaccount.com"],
            "job_store": "postgres" if mode["postgres"] else "firestore",
            **reviewers,
        }
    )


def deployed(model: ModuleModel) -> list[str]:
    """The functions this configuration deploys (their resource has an instance)."""
    return [f.name for f in functions() if model.instances(FUNCTION, f.name)]


def email_of(model: ModuleModel, account: str) -> str | None:
    found = model.instances("google_service_account", account)
    return found[0]["email"] if found else None


SCOPE_KEY = {
    "google_project_iam_member": "project",
    "google_cloud_tasks_queue_iam_member": "name",
    "google_service_account_iam_member": "service_account_id",
    "google_pubsub_topic_iam_member": "topic",
    "google_secret_manager_secret_iam_member": "secret_id",
    "google_cloud_run_v2_service_iam_member": "name",
    "google_storage_bucket_iam_member": "bucket",
    "google_artifact_registry_repository_iam_member": "repository",
    "google_pubsub_subscription_iam_member": "subscription",
    "google_iap_web_cloud_run_service_iam_member": "cloud_run_service_name",
}


def scope_of(block: Block) -> str:
    """What a grant is on: "project", or the referenced resource (type.name, instance key dropped)."""
    key = SCOPE_KEY.get(block.type)
    assert key, f"{block.address}: unexpected IAM resource type"
    if key == "project":
        return "project"
    ref = reference(block.body[key]) or ""
    match = re.fullmatch(r"(google_\w+\.\w+)(\[\d+\]|\[each\.value\.id\])?\.\w+(\[0\]\.\w+)?", ref)
    assert match, f"{block.address}: {key} must reference the resource it is on, got {block.body[key]!r}"
    return match.group(1)


def grants_of(model: ModuleModel, account: str) -> set[tuple[str, str, str]]:
    """(IAM resource type, role, granted-on resource) of every grant instance to this account."""
    email = email_of(model, account)
    found = set()
    if email is None:
        return found
    for block in all_iam_blocks():
        assert block.body.get("member") or block.type.endswith("_policy"), block.address
        for instance in model.instances(block.type, block.name):
            if instance["member"] == f"serviceAccount:{email}":
                found.add((block.type, instance["role"], scope_of(block)))
    return found


DATASTORE = ("google_project_iam_member", "roles/datastore.user", "project")
CLOUDSQL_LOGIN = ("google_project_iam_member", "roles/cloudsql.instanceUser", "project")
CLOUDSQL_CLIENT = ("google_project_iam_member", "roles/cloudsql.client", "project")
WORKERS = {  # what every function that sends holds, whatever the job store
    ("google_cloud_tasks_queue_iam_member", "roles/cloudtasks.enqueuer", "google_cloud_tasks_queue.reconcile"),
    ("google_service_account_iam_member", "roles/iam.serviceAccountUser", "google_service_account.tasks_invoker"),
    ("google_pubsub_topic_iam_member", "roles/pubsub.publisher", "google_pubsub_topic.review"),
}


def accessor(secret: str) -> tuple[str, str, str]:
    return (
        "google_secret_manager_secret_iam_member",
        "roles/secretmanager.secretAccessor",
        f"google_secret_manager_secret.{secret}",
    )


def expected_grants(account: str, mode: dict) -> set[tuple[str, str, str]]:
    if account in (*REVIEWER_FUNCTIONS, "notify_push") and not mode["reviewers"]:
        return set()  # the account does not exist
    gmail = set()
    if account in ("send", "reconcile", "sweep", "notify", "review"):
        gmail = (
            {
                (
                    "google_service_account_iam_member",
                    "roles/iam.serviceAccountTokenCreator",
                    f"google_service_account.{account}",
                )
            }
            if mode["keyless"]
            else {accessor("gmail_credentials")}
        )
        if mode["callbacks"]:
            gmail |= {accessor("callback_hmac")}
    callers = {accessor("webhook_hmac")} | ({accessor("api_keys")} if mode["public"] else set())
    # the job store: Firestore's project-wide role, or (postgres) the login to and connection with
    # the one Cloud SQL instance (conditioned project grants) and the server CA the DSN verifies it with
    store = {CLOUDSQL_LOGIN, CLOUDSQL_CLIENT, accessor("cloudsql_server_ca")} if mode["postgres"] else {DATASTORE}
    # The functions that deliver the outbox read the webhook secrets (chat always in these modes, slack
    # with callbacks): notify, reconcile, sweep and review; never send or status.
    webhooks = (
        {accessor("notify_chat_webhook")} | ({accessor("notify_slack_webhook")} if mode["callbacks"] else set())
        if mode["reviewers"]
        else set()
    )
    return {
        "send": WORKERS | store | gmail | callers,
        "reconcile": WORKERS | store | gmail | webhooks,
        "sweep": WORKERS | store | gmail | webhooks,
        "status": store | callers,
        "notify": WORKERS | store | gmail | webhooks,
        "review": WORKERS | store | gmail | webhooks | {accessor("review_csrf")},
        # the push identity may invoke notify, and nothing else
        "notify_push": {
            ("google_cloud_run_v2_service_iam_member", "roles/run.invoker", "google_cloudfunctions2_function.notify")
        },
    }[account]


@pytest.mark.parametrize("mode", MODES, ids=mode_id)
def test_each_function_account_holds_exactly_what_its_entry_point_needs_in_every_mode(mode):
    model = model_for(mode)
    for account in ("send", "reconcile", "sweep", "status", "notify", "review", "notify_push"):
        assert grants_of(model, account) == expected_grants(account, mode), (account, mode_id(mode))


@pytest.mark.parametrize("mode", MODES, ids=mode_id)
def test_run_invoker_grants_in_every_mode(mode):
    model = model_for(mode)
    found: dict[str, set[str]] = {}
    for block in resources("google_cloud_run_v2_service_iam_member"):
        assert block.body["role"] == "roles/run.invoker", block.address
        match = SERVICE_REF.fullmatch(reference(block.body["name"]) or "")
        assert match, f"{block.address}: name must be a function's service"
        for instance in model.instances(block.type, block.name):
            found.setdefault(match.group(1), set()).add(instance["member"])
    assert not [
        b for b in all_iam_blocks() if b.type.startswith(("google_cloudfunctions", "google_cloud_run_service"))
    ], "run.invoker goes on the Cloud Run v2 service behind each function, nowhere else"
    email = lambda a: "serviceAccount:" + model.instances("google_service_account", a)[0]["email"]  # noqa: E731
    assert found["reconcile"] == {email("tasks_invoker")}
    assert found["sweep"] == {email("scheduler_invoker")}
    callers = {email("n8n_invoker")} if mode["n8n"] else set()
    callers |= {f"serviceAccount:{e}" for e in model.variables["extra_caller_service_accounts"]}
    callers |= {"allUsers"} if mode["public"] else set()
    assert found.get("send", set()) == found.get("status", set()) == callers, mode_id(mode)
    # notify: the push subscription's identity only; review: the IAP service agent only (never allUsers)
    push = {"serviceAccount:" + email_of(model, "notify_push")} if mode["reviewers"] else set()
    assert found.get("notify", set()) == push, mode_id(mode)
    iap_agent = f"serviceAccount:service-{PROJECT_NUMBER}@gcp-sa-iap.iam.gserviceaccount.com"
    iap = {iap_agent} if mode["reviewers"] else set()
    assert found.get("review", set()) == iap, mode_id(mode)


@pytest.mark.parametrize("mode", MODES, ids=mode_id)
def test_runtime_configuration_combinations_in_every_mode(mode):
    """The public/IAM-trust rule, keyless delegation and callbacks, on the rendered environment."""
    model = model_for(mode)
    env, secrets = model.local("function_env"), model.local("function_secrets")
    live = deployed(model)
    assert live == ["send", "reconcile", "sweep", "status"] + (list(REVIEWER_FUNCTIONS) if mode["reviewers"] else [])
    env = {fn: env[fn] for fn in live}
    secrets = {fn: secrets[fn] for fn in live}
    for fn in ("reconcile", "sweep"):
        assert env[fn]["SAFESEND_AUTH_TRUST_CLOUD_RUN_IAM"] == "true", fn
        assert "SAFESEND_PUBLIC_INVOKER" not in env[fn] and "SAFESEND_AUTH_API_KEYS" not in secrets[fn], fn
    for fn in ("send", "status"):
        public = env[fn].get("SAFESEND_PUBLIC_INVOKER") == "true"
        assert public == mode["public"], fn
        # a public function must never accept a stripped (unsigned) ID token
        assert env[fn]["SAFESEND_AUTH_TRUST_CLOUD_RUN_IAM"] == ("false" if mode["public"] else "true"), fn
        assert ("SAFESEND_AUTH_API_KEYS" in secrets[fn]) == mode["public"], fn
        assert "SAFESEND_AUTH_HMAC_SECRET" in secrets[fn], fn
    for fn, fn_env in env.items():
        assert not (
            fn_env.get("SAFESEND_PUBLIC_INVOKER") == "true"
            and fn_env.get("SAFESEND_AUTH_TRUST_CLOUD_RUN_IAM") == "true"
        ), fn
        gmail = fn in ("send", "reconcile", "sweep", "notify", "review")
        assert ("SAFESEND_GMAIL_DELEGATED_USER" in fn_env) == (gmail and mode["keyless"]), fn
        assert ("SAFESEND_GMAIL_CREDENTIALS_JSON" in secrets[fn]) == (gmail and not mode["keyless"]), fn
        assert ("SAFESEND_CALLBACK_ALLOWED_HOSTS" in fn_env) == (gmail and mode["callbacks"]), fn
        assert ("SAFESEND_CALLBACK_HMAC_SECRET" in secrets[fn]) == (gmail and mode["callbacks"]), fn
        for name in FORBIDDEN_ENV:
            assert name not in fn_env and name not in secrets[fn], (fn, name)
        # webhook URLs are secrets of the outbox's deliverers only (never send or status); the CSRF key a
        # secret of review alone; neither ever plain
        for name in WEBHOOK_SECRETS:
            assert name not in fn_env, (fn, name)
            assert (name in secrets[fn]) == (
                fn in OUTBOX_DELIVERERS and mode["reviewers"] and (name != WEBHOOK_SECRETS[1] or mode["callbacks"])
            ), (fn, name)
        assert "SAFESEND_REVIEW_CSRF_SECRET" not in fn_env, fn
        assert ("SAFESEND_REVIEW_CSRF_SECRET" in secrets[fn]) == (fn == "review"), fn
        # every function that publishes review items records notify's deadline, where notify runs
        publishes = "SAFESEND_REVIEW_TOPIC" in fn_env
        assert ("SAFESEND_REVIEW_NOTIFY_TIMEOUT_S" in fn_env) == (publishes and mode["reviewers"]), fn
    if mode["reviewers"]:
        check_reviewer_configuration(model, env, secrets)
    files = {fn: model.local("function_secret_files")[fn] for fn in live}
    check_job_store(model, env, files, mode)
    # every mounted secret (variable or file) exists in this mode (count), and every created one is mounted
    mounted = {s["secret_id"] for m in [*secrets.values(), *files.values()] for s in m.values()}
    created = {
        i["secret_id"] for b in resources("google_secret_manager_secret") for i in model.instances(b.type, b.name)
    }
    assert mounted == created, mode_id(mode)


def dsn_problems(dsn: str, own_user: str) -> list[str]:
    """What is wrong with a function's SAFESEND_POSTGRES_DSN: any password (key/value `password=`,
    a URI's `user:secret@`, a PGPASSWORD-style name), TLS that does not verify the server
    (sslmode other than verify-ca / verify-full: disable, allow, prefer, require), no CA to verify
    it with, or a database user other than the function's own. Parsed by libpq's rules (psycopg's
    conninfo_to_dict, what the store's pool uses)."""
    from psycopg.conninfo import conninfo_to_dict

    problems = []
    if re.search(r"pass(word)?\b|passfile", dsn, re.IGNORECASE):
        problems.append("a password (or passfile) in the DSN")
    if re.search(r"://[^/\s]*:[^/\s]*@", dsn):  # user:secret@ in a URI's authority (the user may hold an @)
        problems.append("a password in the URI's user part")
    try:
        parts = conninfo_to_dict(dsn)
    except Exception as exc:  # noqa: BLE001 - any parse error is a finding
        return [*problems, f"not a libpq DSN: {exc}"]
    if parts.get("password") or parts.get("passfile"):
        problems.append("password / passfile parameter")
    if parts.get("sslmode") not in ("verify-ca", "verify-full"):
        problems.append(f"sslmode {parts.get('sslmode')!r}: the server must be verified (verify-ca or verify-full)")
    if not parts.get("sslrootcert"):
        problems.append("no sslrootcert to verify the server with")
    if parts.get("user") != own_user:
        problems.append(f"user {parts.get('user')!r} is not the function's own database user {own_user!r}")
    return problems


def check_job_store(model: ModuleModel, env: dict, files: dict, mode: dict) -> None:
    """Firestore: none of the PostgreSQL settings, files or networks. Postgres: every deployed
    function on the store with IAM login, its own database user, no password, TLS verifying the
    server with the mounted CA, a small pool, and Direct VPC egress to the instance's network."""
    vpc = model.local("function_direct_vpc")
    for fn, fn_env in env.items():
        for name, value in fn_env.items():
            assert "PASSWORD" not in name.upper() and "password=" not in value.lower(), (fn, name)
        if not mode["postgres"]:
            assert not set(POSTGRES_ENV) & set(fn_env), fn
            assert not files[fn] and not vpc[fn], fn
            continue
        own = model.instances("google_service_account", fn)[0]["email"].removesuffix(".gserviceaccount.com")
        assert fn_env["SAFESEND_STORE"] == "postgres", fn
        assert fn_env["SAFESEND_POSTGRES_IAM_AUTH"] == "true", fn
        assert fn_env["SAFESEND_POSTGRES_POOL_MAX"] == str(model.variables["postgres_pool_max"]), fn
        assert "SAFESEND_POSTGRES_MIGRATE" not in fn_env, f"{fn}: the store migrates on first use (README)"
        dsn = fn_env["SAFESEND_POSTGRES_DSN"]
        assert not dsn_problems(dsn, own), (fn, dsn_problems(dsn, own))
        from psycopg.conninfo import conninfo_to_dict

        parts = conninfo_to_dict(dsn)
        assert (
            parts["host"]
            == SQL_PRIVATE_IP
            == model.instances("google_sql_database_instance", "jobs")[0]["private_ip_address"]
        ), fn
        assert parts["dbname"] == model.instances("google_sql_database", "safesend")[0]["name"], fn
        assert set(files[fn]) == {CA_FILE} and parts["sslrootcert"] == CA_FILE, fn
        assert (
            files[fn][CA_FILE]["secret_id"]
            == model.instances("google_secret_manager_secret", "cloudsql_server_ca")[0]["secret_id"]
        ), fn
        assert {"search_path=safesend", "role=safesend_owner"} <= set(parts["options"].split()), fn
        assert vpc[fn] == [
            {
                "network": model.instances("google_compute_network", "jobs")[0]["name"],
                "subnetwork": model.instances("google_compute_subnetwork", "functions")[0]["name"],
                "egress": "VPC_EGRESS_PRIVATE_RANGES_ONLY",
            }
        ], fn
    users = {u.key: u for u in model.instances("google_sql_user", "functions")}
    assert sorted(users) == (sorted(env) if mode["postgres"] else []), "one database user per function, no other"
    for fn, user in users.items():
        assert user["type"] == "CLOUD_IAM_SERVICE_ACCOUNT" and user["name"] in env[fn]["SAFESEND_POSTGRES_DSN"], fn
    for tf_type, name in POSTGRES_RESOURCES:
        assert bool(model.instances(tf_type, name)) == mode["postgres"], (tf_type, name)
    apis = set(model.local("required_apis"))
    assert (set(POSTGRES_APIS) <= apis) if mode["postgres"] else not (set(POSTGRES_APIS) & apis)


def check_reviewer_configuration(model: ModuleModel, env: dict, secrets: dict) -> None:
    urls = model.local("function_urls")
    notify, review = env["notify"], env["review"]
    # notify: only the push subscription's identity, for notify's own URL
    assert notify["SAFESEND_AUTH_INTERNAL_INVOKERS"] == email_of(model, "notify_push")
    assert notify["SAFESEND_AUTH_AUDIENCES"] == urls["notify"]
    assert notify["SAFESEND_AUTH_TRUST_CLOUD_RUN_IAM"] == "true" and "SAFESEND_PUBLIC_INVOKER" not in notify
    for fn, fn_env in env.items():
        if fn != "notify":
            assert email_of(model, "notify_push") not in fn_env["SAFESEND_AUTH_INTERNAL_INVOKERS"], fn
    # review: IAP's Cloud Run audience, its own https URL, a non-empty allowlist, CSRF from a secret
    assert (
        review["SAFESEND_REVIEW_IAP_AUDIENCE"]
        == f"/projects/{PROJECT_NUMBER}/locations/{model.variables['region']}/services/"
        f"{model.variables['name_prefix']}-review"
    )
    assert re.fullmatch(
        r"/projects/[0-9]+/locations/[a-z0-9-]+/services/[A-Za-z0-9_-]+", review["SAFESEND_REVIEW_IAP_AUDIENCE"]
    )
    assert review["SAFESEND_REVIEW_CONSOLE_URL"] == notify["SAFESEND_REVIEW_CONSOLE_URL"] == urls["review"]
    assert review["SAFESEND_REVIEW_CONSOLE_URL"].startswith("https://")
    allow = [
        v
        for k in ("SAFESEND_REVIEW_ALLOWED_EMAILS", "SAFESEND_REVIEW_ALLOWED_DOMAINS")
        for v in review.get(k, "").split(",")
        if v
    ]
    assert allow, "the console's allowlist is empty"
    assert (
        secrets["review"]["SAFESEND_REVIEW_CSRF_SECRET"]["secret_id"]
        == model.instances("google_secret_manager_secret", "review_csrf")[0]["secret_id"]
    )
    for name in env["review"]:
        assert name not in ("SAFESEND_NOTIFY_CHAT_WEBHOOK_URL", "SAFESEND_NOTIFY_SLACK_WEBHOOK_URL")


def test_review_has_preconditions_for_its_allowlist_reviewers_and_iap_settings():
    conditions = " ".join(
        p["condition"] for lc in resource(FUNCTION, "review").blocks("lifecycle") for p in lc.get("precondition", [])
    )
    for needle in (
        "length(var.review_allowed_emails) + length(var.review_allowed_domains) > 0",
        "length(var.review_iap_members) > 0",
        "SAFESEND_REVIEW_IAP_AUDIENCE",
        "/services/",
        "SAFESEND_REVIEW_CONSOLE_URL",
        "^https://",
        "local.function_secrets.review",
        "SAFESEND_REVIEW_CSRF_SECRET",
    ):
        assert needle in conditions, f"review: a precondition must check {needle}"
    notify = " ".join(
        p["condition"] for lc in resource(FUNCTION, "notify").blocks("lifecycle") for p in lc.get("precondition", [])
    )
    assert "google_service_account.notify_push[0].email" in notify and "local.function_urls.notify" in notify


def test_public_functions_have_preconditions_terraform_checks_at_plan_time():
    for name in ("send", "status"):
        conditions = [
            p["condition"] for lc in resource(FUNCTION, name).blocks("lifecycle") for p in lc.get("precondition", [])
        ]
        rule = next((c for c in conditions if "var.public_callers" in c and "SAFESEND_" in c), "")
        for needle in (
            'SAFESEND_AUTH_TRUST_CLOUD_RUN_IAM"] == "false"',
            'SAFESEND_PUBLIC_INVOKER"] == "true"',
            "SAFESEND_AUTH_API_KEYS",
        ):
            assert needle in rule, f"{name}: the public_callers precondition must check {needle}"


def test_internal_functions_use_internal_ingress_and_callers_all():
    for function in functions():
        ingress = function.first("service_config", "ingress_settings")
        expected = "ALLOW_INTERNAL_ONLY" if function.name in INTERNAL else "ALLOW_ALL"
        assert ingress == expected, f"{function.address}: ingress {ingress}, want {expected}"


def test_no_service_account_key_anywhere_in_the_deployment():
    """No key resource, no key material in the configuration, no key-creating command in the docs
    and pipelines of the deployment (infra/, Cloud Build files, README's Deploying section)."""
    assert not [b for b in blocks("resource") if b.type == "google_service_account_key"]
    for file, parsed in parsed_hcl().items():
        assert "private_key" not in json.dumps(without_prose(parsed)), file
    texts = {
        p: p.read_text()
        for p in [*INFRA.rglob("*.md"), *INFRA.rglob("*.example"), *CLOUDBUILD_FILES, MODULE / "env_spec.json"]
    }
    readme = (ROOT / "README.md").read_text()
    texts[ROOT / "README.md (Deploying)"] = readme[readme.index("## Deploying") :]
    for path, text in texts.items():
        for needle in ("service-accounts keys create", "keys create", '"private_key"', '"type": "service_account"'):
            assert needle not in text, f"{path}: {needle}"


def test_keyless_delegation_grants_token_creator_only_on_the_account_itself():
    for block in all_iam_blocks():
        if "roles/iam.serviceAccountTokenCreator" not in block.text():
            continue
        assert block.type == "google_service_account_iam_member", block.address
        target = reference(block.body["service_account_id"])
        match = re.fullmatch(r"google_service_account\.(\w+)(\[0\])?\.name", target or "")
        assert match, block.address
        account, index = match.group(1), match.group(2) or ""
        assert block.body["member"] == f"serviceAccount:${{google_service_account.{account}{index}.email}}", (
            f"{block.address}: token creator only on itself"
        )
        assert block.body["count"] in (
            "${local.gmail_signs_jwt ? 1 : 0}",
            "${local.reviewers_enabled && local.gmail_signs_jwt ? 1 : 0}",
        ), block.address
        assert account in ("send", "reconcile", "sweep", "notify", "review"), block.address


def test_pubsub_service_agent_is_created_explicitly_and_never_inferred():
    identity = resource("google_project_service_identity", "pubsub")
    assert identity.body["service"] == "pubsub.googleapis.com"
    assert identity.body["provider"] in ("google-beta", "${google-beta}")
    sleep = resource("time_sleep", "pubsub_agent")
    assert sleep.body["triggers"] == {"member": "${google_project_service_identity.pubsub.member}"}
    assert locals_of(MODULE)["pubsub_service_agent"] == '${time_sleep.pubsub_agent.triggers["member"]}'
    for file, parsed in parsed_hcl().items():
        assert "gcp-sa-pubsub" not in json.dumps(parsed), f"{file}: the agent's email is read, not built"
    for name, kind in (
        ("dead_letter_publisher", "google_pubsub_topic_iam_member"),
        ("dead_letter_source_subscriber", "google_pubsub_subscription_iam_member"),
        ("dead_letter_notify_push_subscriber", "google_pubsub_subscription_iam_member"),
    ):
        assert resource(kind, name).body["member"] == "${local.pubsub_service_agent}", name


def test_iap_service_agent_is_created_explicitly_invokes_review_and_nothing_is_public():
    """IAP on the console: the agent created (never inferred) and the only invoker of review; the
    reviewers (var.review_iap_members, people only) hold roles/iap.httpsResourceAccessor on that
    service; no public member anywhere on it."""
    identity = resource("google_project_service_identity", "iap")
    assert identity.body["service"] == "iap.googleapis.com"
    assert identity.body["provider"] in ("google-beta", "${google-beta}")
    assert resource("time_sleep", "iap_agent").body["triggers"] == {
        "member": "${google_project_service_identity.iap[0].member}"
    }
    assert 'time_sleep.iap_agent[0].triggers["member"]' in locals_of(MODULE)["iap_service_agent"]
    for file, parsed in parsed_hcl().items():
        assert "gcp-sa-iap" not in json.dumps(parsed), f"{file}: the IAP agent's email is read, not built"
    invoker = resource("google_cloud_run_v2_service_iam_member", "review_iap_invoker").body
    assert (invoker["member"], invoker["role"]) == ("${local.iap_service_agent}", "roles/run.invoker")
    off = ModuleModel()
    assert not off.instances("google_iap_web_cloud_run_service_iam_member", "review_accessors")
    members = ["group:mail-reviewers@example.com", "user:ann@example.com"]
    on = ModuleModel(
        {"reviewers_enabled": True, "review_iap_members": members, "review_allowed_emails": ["a@b.example"]}
    )
    accessors = on.instances("google_iap_web_cloud_run_service_iam_member", "review_accessors")
    assert sorted(a["member"] for a in accessors) == members
    assert {a["role"] for a in accessors} == {"roles/iap.httpsResourceAccessor"}
    block = resource("google_iap_web_cloud_run_service_iam_member", "review_accessors")
    assert (
        block.body["cloud_run_service_name"] == "${google_cloudfunctions2_function.review[0].service_config[0].service}"
    )
    assert "iap.googleapis.com" in on.local("required_apis") and "iap.googleapis.com" not in off.local("required_apis")
    for iam in all_iam_blocks():
        for instance in on.instances(iam.type, iam.name):
            assert not PUBLIC_MEMBERS.search(str(instance["member"])), iam.address


def nested(instance, name: str) -> list:
    """A nested block's instances; [] when the block is not written (the model answers UNKNOWN)."""
    value = instance[name]
    return value if isinstance(value, list) else []


def test_notify_push_subscription_carries_oidc_for_the_notify_url_and_dead_letters():
    """The push subscription: endpoint and OIDC audience = notify's URL, OIDC identity = the only
    account notify accepts and Cloud Run admits; backoff; a dead-letter policy to the dead-letter
    topic (whose publisher and this subscription's subscriber grants the Pub/Sub agent holds); an
    ack deadline beyond notify's timeout."""
    assert not ModuleModel().instances("google_pubsub_subscription", "notify_push")
    model = ModuleModel(
        {
            "reviewers_enabled": True,
            "review_iap_members": ["group:r@example.com"],
            "review_allowed_domains": ["example.com"],
            "review_max_delivery_attempts": 7,
        }
    )
    (sub,) = model.instances("google_pubsub_subscription", "notify_push")
    url = model.local("function_urls")["notify"]
    push = nested(sub, "push_config")
    assert push and push[0]["push_endpoint"] == url, "notify is fed by a push subscription to its URL"
    oidc = nested(push[0], "oidc_token")
    assert oidc, "the push carries no OIDC token: notify would refuse every item"
    assert oidc[0]["audience"] == url
    assert (
        oidc[0]["service_account_email"]
        == email_of(model, "notify_push")
        == model.local("function_env")["notify"]["SAFESEND_AUTH_INTERNAL_INVOKERS"]
    )
    assert sub["topic"] == model.instances("google_pubsub_topic", "review")[0]["id"]
    dead = nested(sub, "dead_letter_policy")
    assert dead, "the push subscription has no dead-letter policy"
    assert dead[0]["dead_letter_topic"] == model.instances("google_pubsub_topic", "review_dead_letter")[0]["id"]
    assert dead[0]["max_delivery_attempts"] == 7
    retry = nested(sub, "retry_policy")
    assert retry and retry[0]["minimum_backoff"] and retry[0]["maximum_backoff"]
    notify_timeout = model.instances(FUNCTION, "notify")[0]["service_config"][0]["timeout_seconds"]
    assert sub["ack_deadline_seconds"] >= notify_timeout
    assert sub["expiration_policy"][0]["ttl"] == ""
    (grant,) = model.instances("google_pubsub_subscription_iam_member", "dead_letter_notify_push_subscriber")
    assert grant["role"] == "roles/pubsub.subscriber"
    block = resource("google_pubsub_subscription_iam_member", "dead_letter_notify_push_subscriber")
    assert block.body["subscription"] == "${google_pubsub_subscription.notify_push[0].name}"


def test_build_account_holds_exactly_the_documented_roles_each_on_one_target():
    grants = set()
    for block in all_iam_blocks():
        if block.body.get("member") == "serviceAccount:${google_service_account.build.email}":
            grants.add((block.type, block.body["role"], scope_of(block)))
    assert grants == {
        ("google_project_iam_member", "roles/logging.logWriter", "project"),
        ("google_project_iam_member", "roles/storage.objectAdmin", "project"),
        ("google_storage_bucket_iam_member", "roles/storage.objectViewer", "google_storage_bucket.functions_source"),
        (
            "google_artifact_registry_repository_iam_member",
            "roles/artifactregistry.writer",
            "google_artifact_registry_repository.functions",
        ),
    }
    condition = resource("google_project_iam_member", "build_source_access").first("condition", "expression")
    assert (
        condition == 'resource.name.startsWith("projects/_/buckets/gcf-v2-sources-'
        '${data.google_project.this.number}-${var.region}")'
    )


def test_sweep_and_review_are_deployed_only_with_their_indexes():
    for name in ("sweep", "review"):
        assert "${google_firestore_index.jobs}" in resource(FUNCTION, name).body["depends_on"], name


def test_test_only_switches_are_never_set():
    """FORBIDDEN_ENV (auth off, fault injection, the console's development identity, the local stacks'
    internal/tasks API keys and plain-http callbacks): not in any parsed .tf (comments excluded), the
    env spec, tfvars example or Cloud Build file."""
    texts = {file: json.dumps(parsed) for file, parsed in parsed_hcl().items()}
    for path in [
        *INFRA.rglob("*.tfvars.example"),
        *CLOUDBUILD_FILES,
        INFRA / "firestore.indexes.json",
        MODULE / "env_spec.json",
    ]:
        texts[str(path.relative_to(ROOT))] = path.read_text()
    for file, text in texts.items():
        for name in FORBIDDEN_ENV:
            assert name not in text, f"{file} sets {name}"


def test_task_and_scheduler_calls_carry_oidc_tokens_for_the_function_urls():
    job = resource("google_cloud_scheduler_job", "sweep")
    assert job.first("http_target", "uri") == "${local.function_urls.sweep}"
    assert job.first("http_target", "oidc_token", "audience") == "${local.function_urls.sweep}"
    assert (
        job.first("http_target", "oidc_token", "service_account_email")
        == "${google_service_account.scheduler_invoker.email}"
    )
    model = ModuleModel()
    env = model.local("function_env")
    for fn in ("send", "reconcile", "sweep"):
        assert env[fn]["SAFESEND_RECONCILE_URL"] == model.local("function_urls")["reconcile"], fn
        assert (
            env[fn]["SAFESEND_TASKS_SERVICE_ACCOUNT"]
            == model.instances("google_service_account", "tasks_invoker")[0]["email"]
        ), fn
        assert env[fn]["SAFESEND_AUTH_AUDIENCES"].split(",") == [
            model.local("function_urls")[f] for f in ("send", "reconcile", "sweep", "status")
        ], fn
    urls = locals_of(MODULE)["function_urls"]
    assert "https://${var.name_prefix}-${name}-${data.google_project.this.number}.${var.region}.run.app" in urls


def test_queue_has_rate_limits_and_retries_and_review_has_a_dead_letter_path():
    queue = resource("google_cloud_tasks_queue", "reconcile")
    assert queue.blocks("rate_limits") and queue.blocks("retry_config")
    inbox = resource("google_pubsub_subscription", "review_inbox")
    assert inbox.first("dead_letter_policy", "dead_letter_topic") == "${google_pubsub_topic.review_dead_letter.id}"
    resource("google_pubsub_subscription", "review_dead_letter")
    agent = "${local.pubsub_service_agent}"
    publisher = resource("google_pubsub_topic_iam_member", "dead_letter_publisher").body
    assert (publisher["member"], publisher["role"], publisher["topic"]) == (
        agent,
        "roles/pubsub.publisher",
        "${google_pubsub_topic.review_dead_letter.name}",
    )
    subscriber = resource("google_pubsub_subscription_iam_member", "dead_letter_source_subscriber").body
    assert (subscriber["member"], subscriber["role"], subscriber["subscription"]) == (
        agent,
        "roles/pubsub.subscriber",
        "${google_pubsub_subscription.review_inbox.name}",
    )


def test_source_object_name_carries_the_content_hash():
    obj = resource("google_storage_bucket_object", "functions_source")
    assert obj.body["name"] == "functions-${data.archive_file.functions_source.output_sha256}.zip"
    for function in functions():
        source = function.first("build_config", "source", "storage_source")
        assert source["object"] == "${local.source_object}", function.address
    assert locals_of(MODULE)["source_object"] == "${google_storage_bucket_object.functions_source.name}"


# ---------------------------------------------------------------- the PostgreSQL job store
def test_the_dsn_check_refuses_passwords_unverified_tls_and_other_users():
    """dsn_problems can fail: each of these is refused (and the module's own DSN is not)."""
    me = "safesend-fn-send@proj-1.iam"
    good = (
        f"host=10.0.0.3 port=5432 dbname=safesend user={me} sslmode=verify-ca "
        f"sslrootcert={CA_FILE} options='-c search_path=safesend'"
    )
    assert dsn_problems(good, me) == []
    bad = {
        "password=": good + " password=hunter2",
        "PASSWORD= upper": good + " PASSWORD=hunter2",
        "passfile": good + " passfile=/tmp/pgpass",
        "uri :pass@": f"postgresql://{me.replace('@', '%40')}:hunter2@10.0.0.3:5432/safesend?sslmode=verify-ca"
        f"&sslrootcert={CA_FILE}",
        "uri :pass@, user unencoded": f"postgresql://{me}:hunter2@10.0.0.3/safesend?sslmode=verify-ca"
        f"&sslrootcert={CA_FILE}",
        "sslmode=disable": good.replace("sslmode=verify-ca", "sslmode=disable"),
        "sslmode=require": good.replace("sslmode=verify-ca", "sslmode=require"),
        "sslmode=prefer": good.replace("sslmode=verify-ca", "sslmode=prefer"),
        "no sslmode": good.replace("sslmode=verify-ca ", ""),
        "no CA": good.replace(f"sslrootcert={CA_FILE} ", ""),
        "another user": good.replace(me, "safesend-fn-review@proj-1.iam"),
        "unparseable": good + " options='unterminated",
    }
    for name, dsn in bad.items():
        assert dsn_problems(dsn, me), f"{name} was not refused: {dsn}"


def test_firestore_is_the_default_and_creates_nothing_of_the_postgres_store():
    """Off by default everywhere: the module's, both roots' and the gcloud path's default is Firestore,
    and with it no Cloud SQL, network, secret, grant, API, setting or file of the PostgreSQL store."""
    assert top_level("variable", MODULE)["job_store"]["default"] == "firestore"
    for env in ENVS:  # the environments leave it to the module's default
        assert "job_store" not in top_level("module", INFRA / "envs" / env)["safesend"], env
        example = (INFRA / "envs" / env / "terraform.tfvars.example").read_text()
        assert not re.search(r"(?m)^job_store\s*=", example), env
    assert parsed_yaml(*CLOUDBUILD_FILES)["cloudbuild-gcloud.yaml"]["substitutions"]["_JOB_STORE"] == "firestore"
    model = ModuleModel()
    check_job_store(
        model,
        {fn: model.local("function_env")[fn] for fn in deployed(model)},
        {fn: model.local("function_secret_files")[fn] for fn in deployed(model)},
        {"postgres": False},
    )
    assert model.local("postgres_accounts") == {} and model.local("postgres_users") == {}
    for fn in deployed(model):
        service = model.instances(FUNCTION, fn)[0]["service_config"][0]
        assert service["direct_vpc_egress"] is None and not service["direct_vpc_network_interface"], fn
        assert not service["secret_volumes"], fn


def postgres_instance(overrides: dict | None = None):
    model = ModuleModel({"job_store": "postgres", **(overrides or {})})
    (instance,) = model.instances("google_sql_database_instance", "jobs")
    return model, instance


def test_the_instance_has_iam_authentication_tls_private_ip_backups_and_deletion_protection():
    model, instance = postgres_instance()
    settings = instance["settings"][0]
    flags = {f["name"]: f["value"] for f in settings["database_flags"]}
    assert flags["cloudsql.iam_authentication"] == "on", "IAM database users cannot log in without the flag"
    assert flags["max_connections"] == str(model.variables["postgres_max_connections"])
    assert instance["deletion_protection"] is True, "Terraform must refuse to destroy the job store"
    assert settings["deletion_protection_enabled"] is True, "Cloud SQL must refuse to delete the job store"
    assert instance["database_version"] in ("POSTGRES_15", "POSTGRES_16")
    assert settings["edition"] == "ENTERPRISE"  # PostgreSQL 16's default, Enterprise Plus, refuses db-custom tiers
    ip = settings["ip_configuration"][0]
    assert ip["ssl_mode"] == "ENCRYPTED_ONLY" and ip["server_ca_mode"] == "GOOGLE_MANAGED_INTERNAL_CA"
    assert ip["ipv4_enabled"] is False, "no public IP unless postgres_proxy_public_ip"
    assert ip["private_network"] == model.instances("google_compute_network", "jobs")[0]["id"]
    backup = settings["backup_configuration"][0]
    assert backup["enabled"] is True and backup["point_in_time_recovery_enabled"] is True
    assert 1 <= backup["transaction_log_retention_days"] <= 7  # Enterprise edition's range
    assert (
        postgres_instance({"postgres_proxy_public_ip": True})[1]["settings"][0]["ip_configuration"][0]["ipv4_enabled"]
        is True
    )
    block = resource("google_sql_database_instance", "jobs")
    assert "authorized_networks" not in block.first("settings", "ip_configuration"), (
        "no authorized network: the public IP (proxy only) admits IAM-authorized connectors alone"
    )
    assert "${google_service_networking_connection.cloudsql}" in block.body["depends_on"]
    assert resource("google_sql_database", "safesend").body["deletion_policy"] == "ABANDON"


def test_every_function_logs_in_as_itself_on_this_instance_only():
    """A CLOUD_IAM_SERVICE_ACCOUNT user per function that touches the store (notify and review with
    the reviewer side), named after its own runtime account; roles/cloudsql.instanceUser (the IAM
    login) and roles/cloudsql.client (connect), both conditioned on this instance; no BUILT_IN user
    and no password argument anywhere in infra/."""
    for reviewers in (False, True):
        extra = (
            {
                "reviewers_enabled": True,
                "review_iap_members": ["group:r@example.com"],
                "review_allowed_emails": ["a@b.example"],
            }
            if reviewers
            else {}
        )
        model, instance = postgres_instance(extra)
        live = deployed(model)
        users = {u.key: u for u in model.instances("google_sql_user", "functions")}
        assert sorted(users) == sorted(live)
        for fn, user in users.items():
            assert user["type"] == "CLOUD_IAM_SERVICE_ACCOUNT" and user["instance"] == instance["name"], fn
            assert user["name"] == email_of(model, fn).removesuffix(".gserviceaccount.com"), fn
        for name, role in (
            ("cloudsql_instance_user", "roles/cloudsql.instanceUser"),
            ("cloudsql_client", "roles/cloudsql.client"),
        ):
            grants = {g.key: g for g in model.instances("google_project_iam_member", name)}
            assert sorted(grants) == sorted(live), name
            for fn, grant in grants.items():
                assert (grant["role"], grant["member"]) == (role, f"serviceAccount:{email_of(model, fn)}"), fn
                assert grant["condition"][0]["expression"] == (
                    f"resource.name == 'projects/proj-1/instances/{instance['name']}' "
                    "&& resource.type == 'sqladmin.googleapis.com/Instance'"
                ), (name, fn)
    for file, parsed in parsed_hcl().items():
        text = json.dumps(without_prose(parsed))
        for argument in ('"password"', '"password_wo"', '"root_password"', '"root_password_wo"'):
            assert argument not in text, f"{file}: {argument} (IAM database authentication only)"
    roles = {
        g["role"] for b in resources("google_project_iam_member") for g in [b.body] if "cloudsql" in str(g.get("role"))
    }
    assert roles == {"roles/cloudsql.instanceUser", "roles/cloudsql.client"}, roles


def test_deletion_protection_is_on_by_default_and_pinned_in_prod():
    """Terraform's deletion_protection and Cloud SQL's deletion_protection_enabled both follow
    postgres_deletion_protection: true by default in the module, dev leaves it at that, and prod
    sets true in its module block, not as a variable (removing the job store there is a deliberate
    code change)."""
    _, instance = postgres_instance()
    assert instance["deletion_protection"] is True and instance["settings"][0]["deletion_protection_enabled"] is True
    _, off = postgres_instance({"postgres_deletion_protection": False})
    assert off["deletion_protection"] is False and off["settings"][0]["deletion_protection_enabled"] is False
    assert top_level("variable", MODULE)["postgres_deletion_protection"]["default"] is True
    for env in ENVS:
        assert "postgres_deletion_protection" not in top_level("variable", INFRA / "envs" / env), env
    assert "postgres_deletion_protection" not in top_level("module", INFRA / "envs" / "dev")["safesend"]
    assert top_level("module", INFRA / "envs" / "prod")["safesend"]["postgres_deletion_protection"] is True


def test_every_pool_fits_the_instance_and_the_plan_refuses_otherwise():
    """max instances x pool size + 10 <= max_connections: the instance's precondition, evaluated; and
    its per-function maxima are the functions' own max_instance_count."""
    block = resource("google_sql_database_instance", "jobs")
    (condition,) = [p["condition"] for lc in block.blocks("lifecycle") for p in lc.get("precondition", [])]
    assert condition == "${local.postgres_connections_needed <= var.postgres_max_connections}"
    reviewers = {
        "reviewers_enabled": True,
        "review_iap_members": ["group:r@example.com"],
        "review_allowed_emails": ["a@b.example"],
    }
    for overrides, fits in (
        ({}, True),
        (reviewers, True),
        ({"postgres_pool_max": 3}, False),
        ({**reviewers, "postgres_max_connections": 90}, False),
        ({"postgres_pool_max": 3, "postgres_max_connections": 200}, True),
    ):
        model = ModuleModel({"job_store": "postgres", **overrides})
        assert H.evaluate_value(condition, model.scope) is fits, overrides
        maxima = model.local("postgres_max_instances")
        for fn in deployed(model):
            assert maxima[fn] == model.instances(FUNCTION, fn)[0]["service_config"][0]["max_instance_count"], fn
    for env in ENVS:  # each environment's settings fit, with the reviewer side too
        call = top_level("module", INFRA / "envs" / env)["safesend"]
        defaults = {k: v["default"] for k, v in top_level("variable", MODULE).items() if "default" in v}
        keep = {
            k: call.get(k, defaults[k])
            for k in (
                "send_max_instances",
                "status_max_instances",
                "reconcile_max_instances",
                "notify_max_instances",
                "review_max_instances",
                "postgres_pool_max",
                "postgres_max_connections",
            )
        }
        assert H.evaluate_value(condition, ModuleModel({"job_store": "postgres", **reviewers, **keep}).scope), env


def test_dsn_rules_are_also_a_plan_time_precondition():
    conditions = " ".join(
        p["condition"] for lc in resource(FUNCTION, "send").blocks("lifecycle") for p in lc.get("precondition", [])
    )
    for needle in (
        "local.function_env",
        "SAFESEND_POSTGRES_DSN",
        "(?i)password",
        "sslmode=verify-(ca|full)",
        "SAFESEND_POSTGRES_IAM_AUTH",
    ):
        assert needle in conditions, f"send: a precondition must check {needle}"
    rule = next(
        p["condition"]
        for lc in resource(FUNCTION, "send").blocks("lifecycle")
        for p in lc.get("precondition", [])
        if "SAFESEND_POSTGRES_DSN" in p["condition"]
    )
    assert H.evaluate_value(rule, ModuleModel({"job_store": "postgres"}).scope) is True
    assert H.evaluate_value(rule, ModuleModel().scope) is True


def test_the_setup_sql_creates_the_owner_role_and_schema_and_grants_every_user():
    """The one manual step, rendered by the module (output postgres_setup_sql): idempotent, the role
    every DSN's options switch to, the schema in its search_path, one grant per database user."""
    model = ModuleModel(
        {
            "job_store": "postgres",
            "reviewers_enabled": True,
            "review_iap_members": ["group:r@e.x"],
            "review_allowed_emails": ["a@b.example"],
        }
    )
    sql = model.local("postgres_setup_sql").splitlines()
    assert sql[:3] == [
        "DO $$ BEGIN CREATE ROLE safesend_owner NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$;",
        "GRANT safesend_owner TO CURRENT_USER;",
        "CREATE SCHEMA IF NOT EXISTS safesend AUTHORIZATION safesend_owner;",
    ]
    users = sorted(u["name"] for u in model.instances("google_sql_user", "functions"))
    assert sql[3:] == [f'GRANT safesend_owner TO "{u}";' for u in users] and len(users) == 6
    assert ModuleModel().local("postgres_setup_sql")  # rendered either way; the output is null with Firestore
    outputs = top_level("output", MODULE)
    assert outputs["postgres_setup_sql"]["value"] == "${local.postgres ? local.postgres_setup_sql : null}"


def test_the_network_admits_nothing_and_reaches_the_instance_privately():
    model = ModuleModel({"job_store": "postgres"})
    (network,) = model.instances("google_compute_network", "jobs")
    assert network["auto_create_subnetworks"] is False
    (subnet,) = model.instances("google_compute_subnetwork", "functions")
    assert subnet["network"] == network["id"] and subnet["region"] == model.variables["region"]
    assert subnet["private_ip_google_access"] is True
    (rule,) = model.instances("google_compute_firewall", "deny_ingress")
    assert (rule["direction"], rule["source_ranges"]) == ("INGRESS", ["0.0.0.0/0"])
    assert [d["protocol"] for d in nested(rule, "deny")] == ["all"] and not nested(rule, "allow")
    (psa,) = model.instances("google_compute_global_address", "cloudsql_psa")
    assert (psa["purpose"], psa["address_type"], psa["network"]) == ("VPC_PEERING", "INTERNAL", network["id"])
    (peering,) = model.instances("google_service_networking_connection", "cloudsql")
    assert peering["service"] == "servicenetworking.googleapis.com"
    assert peering["reserved_peering_ranges"] == [psa["name"]]
    for block in resources("google_compute_firewall"):
        assert not block.blocks("allow"), f"{block.address}: the job store's network allows no ingress"


MAILBOX_MODES = [m for m in MODES if not m["postgres"] and m["n8n"]]


@pytest.mark.parametrize("mode", MAILBOX_MODES, ids=mode_id)
def test_mailboxes_add_their_queues_tokens_and_delegation_to_the_functions_that_send(mode):
    """Two mailboxes (issue 24): every function that sends may enqueue on both mailbox queues and read
    the token of the one that has its own; the delegated one makes them sign their JWTs as
    themselves (the one client ID per function serves every delegated mailbox); status gets nothing."""
    from .test_env_parity import MAILBOXES

    plain = model_for(mode)
    model = ModuleModel({**{k: plain.variables[k] for k in OVERRIDDEN}, **MAILBOXES})
    for account in ("send", "reconcile", "sweep", "status", "notify", "review", "notify_push"):
        expected = expected_grants(account, mode)
        if expected and account in ("send", "reconcile", "sweep", "notify", "review"):
            expected = expected | {
                (
                    "google_cloud_tasks_queue_iam_member",
                    "roles/cloudtasks.enqueuer",
                    "google_cloud_tasks_queue.mailbox",
                ),
                accessor("mailbox_token"),
                (
                    "google_service_account_iam_member",
                    "roles/iam.serviceAccountTokenCreator",
                    f"google_service_account.{account}",
                ),
            }
        assert grants_of(model, account) == expected, (account, mode_id(mode))
    enqueuers = model.instances("google_cloud_tasks_queue_iam_member", "mailbox_enqueuer")
    assert sorted({g["name"] for g in enqueuers}) == ["safesend-mbx-news", "safesend-mbx-shop"]
    readers = model.instances("google_secret_manager_secret_iam_member", "mailbox_token")
    assert {r.key.split("/")[1] for r in readers} == {"news"}
    assert [s["secret_id"] for s in model.instances("google_secret_manager_secret", "mailbox_token")] == [
        "gmail-token-news"
    ]


OVERRIDDEN = (
    "gmail_delegated_user",
    "public_callers",
    "callback_allowed_hosts",
    "create_n8n_invoker_service_account",
    "extra_caller_service_accounts",
    "job_store",
    "reviewers_enabled",
    "review_iap_members",
    "review_allowed_emails",
    "review_allowed_domains",
    "notify_chat_webhook",
    "notify_slack_webhook",
    "notify_email_to",
)
