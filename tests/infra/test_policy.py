"""(a) Every .tf file parses with python-hcl2, and the parsed infra/ obeys our IAM and auth policy."""

from __future__ import annotations

import json
import re

import pytest

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
    reference,
    resource,
    resources,
    tf_files,
)
from .tfmodel import PROJECT_NUMBER, ModuleModel

PRIMITIVE_ROLES = re.compile(r"roles/(owner|editor|viewer)\b")
PUBLIC_MEMBERS = re.compile(r"\ballUsers\b|\ballAuthenticatedUsers\b")
# Settings of local stacks and tests only (config.py / reviewer_auth.py): never in deployed configuration.
FORBIDDEN_ENV = ("SAFESEND_AUTH_DISABLED", "SAFESEND_ENABLE_FAULT_INJECTION", "SAFESEND_REVIEW_DEV_IDENTITY",
                 "SAFESEND_AUTH_INTERNAL_API_KEYS", "SAFESEND_TASKS_API_KEY", "SAFESEND_CALLBACK_ALLOW_HTTP")
FUNCTION = "google_cloudfunctions2_function"
INTERNAL = {"reconcile", "sweep", "notify"}
REVIEWER_FUNCTIONS = ("notify", "review")
WEBHOOK_SECRETS = ("SAFESEND_NOTIFY_CHAT_WEBHOOK_URL", "SAFESEND_NOTIFY_SLACK_WEBHOOK_URL")
# Functions that deliver the outbox (chat posts and their retries, decision answers in the thread).
OUTBOX_DELIVERERS = ("reconcile", "sweep", "notify", "review")
SERVICE_REF = re.compile(r"google_cloudfunctions2_function\.(\w+)(\[0\])?\.service_config\[0\]\.service")
IAM_TYPE = re.compile(r"^google_.*_iam_(member|binding|policy)$")


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
        assert [list(m) for m in calls] == [["safesend"]], f"{env}: expected one module \"safesend\""
        assert calls[0]["safesend"]["source"] == "../../modules/safesend"
    assert not list(INFRA.glob("*.tf")), "no flat root module in infra/ any more: use infra/envs/<env>"


def test_no_primitive_roles_anywhere():
    for file, parsed in parsed_hcl().items():
        text = json.dumps(parsed)
        assert not PRIMITIVE_ROLES.search(text), f"{file}: primitive role {PRIMITIVE_ROLES.search(text).group(0)}"


def test_public_members_only_on_send_and_status_and_only_with_public_callers():
    """allUsers exactly in send_public/status_public (count on var.public_callers); allAuthenticatedUsers nowhere."""
    allowed = {("google_cloud_run_v2_service_iam_member", "send_public"),
               ("google_cloud_run_v2_service_iam_member", "status_public")}
    for file, parsed in parsed_hcl().items():
        assert "allAuthenticatedUsers" not in json.dumps(parsed), file
    for block in blocks("resource"):
        if (block.type, block.name) in allowed:
            assert block.body["member"] == "allUsers" and block.body["count"] == "${var.public_callers ? 1 : 0}", \
                block.address
            fn = block.name.split("_")[0]
            assert block.body["name"] == f"${{google_cloudfunctions2_function.{fn}.service_config[0].service}}"
        else:
            assert not PUBLIC_MEMBERS.search(json.dumps(without_prose(block.body))), \
                f"{block.address} mentions allUsers"
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
            assert block.type == "google_project_iam_member", \
                f"{block.address}: authoritative project IAM would remove other members' grants"
            for role in ("roles/iam.serviceAccountTokenCreator", "roles/iam.serviceAccountUser",
                         "roles/iam.serviceAccountOpenIdTokenCreator", "roles/iam.serviceAccountKeyAdmin"):
                assert role not in block.text(), \
                    f"{block.address}: {role} must be granted on one account, not the project"


def test_every_entry_point_has_exactly_one_function_and_vice_versa():
    """Every @functions_framework.http entry point is deployed, or listed in env_spec.json's
    not_deployed (an entry point a later issue deploys): none is forgotten silently."""
    spec = json.loads((MODULE / "env_spec.json").read_text())
    points = entry_points()
    assert points >= {"send", "reconcile", "sweep", "status", "notify", "review"}
    declared = [f.first("build_config", "entry_point") for f in functions()]
    assert sorted(declared) == sorted(spec["functions"]), "env_spec.json functions vs function resources"
    waiting = set(spec.get("not_deployed", {}))
    assert sorted(points - waiting) == sorted(declared), \
        f"entry points {sorted(points)} (not deployed yet: {sorted(waiting)}) vs function resources {sorted(declared)}"
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
        assert sa.body.get("count") == function.body.get("count"), \
            f"{sa.address} must exist exactly when {function.address} does (same count)"
        assert (match.group(2) is not None) == ("count" in sa.body), function.address
    builder = reference(functions()[0].first("build_config", "service_account"))
    assert builder is not None and builder.split(".")[1] not in used, "the build account must not be a runtime account"


MODES = [dict(zip(("keyless", "public", "callbacks", "n8n", "reviewers"), bits, strict=True))
         for bits in __import__("itertools").product((False, True), repeat=5)]


def mode_id(mode: dict) -> str:
    return "-".join(k if v else f"no{k}" for k, v in mode.items())


def model_for(mode: dict) -> ModuleModel:
    """The module for one combination of modes. With reviewers: the Chat webhook always, Slack with
    callbacks (so both one and two webhook targets are covered), an email target without n8n."""
    reviewers = {}
    if mode["reviewers"]:
        reviewers = {"reviewers_enabled": True, "review_iap_members": ["group:mail-reviewers@example.com"],
                     "review_allowed_emails": ["ann@example.com"],
                     "review_allowed_domains": ["example.com"] if mode["public"] else [],
                     "notify_chat_webhook": True, "notify_slack_webhook": mode["callbacks"],
                     "notify_email_to": "" if mode["n8n"] else "reviewers@example.com"}
    return ModuleModel({
        "gmail_delegated_user": "boss@example.com" if mode["keyless"] else "",
        "public_callers": mode["public"],
        "callback_allowed_hosts": ["n8n.example.com"] if mode["callbacks"] else [],
        "create_n8n_invoker_service_account": mode["n8n"],
        "extra_caller_service_accounts": [] if mode["n8n"] or mode["public"] else ["n8n@other.iam.gserviceaccount.com"],
        **reviewers,
    })


def deployed(model: ModuleModel) -> list[str]:
    """The functions this configuration deploys (their resource has an instance)."""
    return [f.name for f in functions() if model.instances(FUNCTION, f.name)]


def email_of(model: ModuleModel, account: str) -> str | None:
    found = model.instances("google_service_account", account)
    return found[0]["email"] if found else None


SCOPE_KEY = {"google_project_iam_member": "project", "google_cloud_tasks_queue_iam_member": "name",
             "google_service_account_iam_member": "service_account_id",
             "google_pubsub_topic_iam_member": "topic",
             "google_secret_manager_secret_iam_member": "secret_id",
             "google_cloud_run_v2_service_iam_member": "name",
             "google_storage_bucket_iam_member": "bucket",
             "google_artifact_registry_repository_iam_member": "repository",
             "google_pubsub_subscription_iam_member": "subscription",
             "google_iap_web_cloud_run_service_iam_member": "cloud_run_service_name"}


def scope_of(block: Block) -> str:
    """What a grant is on: "project", or the referenced resource (type.name, instance key dropped)."""
    key = SCOPE_KEY.get(block.type)
    assert key, f"{block.address}: unexpected IAM resource type"
    if key == "project":
        return "project"
    ref = reference(block.body[key]) or ""
    match = re.fullmatch(r"(google_\w+\.\w+)(\[\d+\])?\.\w+(\[0\]\.\w+)?", ref)
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
WORKER_GRANTS = {
    DATASTORE,
    ("google_cloud_tasks_queue_iam_member", "roles/cloudtasks.enqueuer", "google_cloud_tasks_queue.reconcile"),
    ("google_service_account_iam_member", "roles/iam.serviceAccountUser", "google_service_account.tasks_invoker"),
    ("google_pubsub_topic_iam_member", "roles/pubsub.publisher", "google_pubsub_topic.review"),
}


def accessor(secret: str) -> tuple[str, str, str]:
    return ("google_secret_manager_secret_iam_member", "roles/secretmanager.secretAccessor",
            f"google_secret_manager_secret.{secret}")


def expected_grants(account: str, mode: dict) -> set[tuple[str, str, str]]:
    if account in (*REVIEWER_FUNCTIONS, "notify_push") and not mode["reviewers"]:
        return set()  # the account does not exist
    gmail = set()
    if account in ("send", "reconcile", "sweep", "notify", "review"):
        gmail = {("google_service_account_iam_member", "roles/iam.serviceAccountTokenCreator",
                  f"google_service_account.{account}")} if mode["keyless"] else {accessor("gmail_credentials")}
        if mode["callbacks"]:
            gmail |= {accessor("callback_hmac")}
    callers = {accessor("webhook_hmac")} | ({accessor("api_keys")} if mode["public"] else set())
    # The functions that deliver the outbox read the webhook secrets (chat always in these modes, slack
    # with callbacks): notify, reconcile, sweep and review; never send or status.
    webhooks = ({accessor("notify_chat_webhook")} | ({accessor("notify_slack_webhook")} if mode["callbacks"] else set())
                if mode["reviewers"] else set())
    return {"send": WORKER_GRANTS | gmail | callers, "reconcile": WORKER_GRANTS | gmail | webhooks,
            "sweep": WORKER_GRANTS | gmail | webhooks, "status": {DATASTORE} | callers,
            "notify": WORKER_GRANTS | gmail | webhooks,
            "review": WORKER_GRANTS | gmail | webhooks | {accessor("review_csrf")},
            # the push identity may invoke notify, and nothing else
            "notify_push": {("google_cloud_run_v2_service_iam_member", "roles/run.invoker",
                             "google_cloudfunctions2_function.notify")}}[account]


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
    assert not [b for b in all_iam_blocks()
                if b.type.startswith(("google_cloudfunctions", "google_cloud_run_service"))], \
        "run.invoker goes on the Cloud Run v2 service behind each function, nowhere else"
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
        assert not (fn_env.get("SAFESEND_PUBLIC_INVOKER") == "true"
                    and fn_env.get("SAFESEND_AUTH_TRUST_CLOUD_RUN_IAM") == "true"), fn
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
            assert (name in secrets[fn]) == (fn in OUTBOX_DELIVERERS and mode["reviewers"]
                                             and (name != WEBHOOK_SECRETS[1] or mode["callbacks"])), (fn, name)
        assert "SAFESEND_REVIEW_CSRF_SECRET" not in fn_env, fn
        assert ("SAFESEND_REVIEW_CSRF_SECRET" in secrets[fn]) == (fn == "review"), fn
        # every function that publishes review items records notify's deadline, where notify runs
        publishes = "SAFESEND_REVIEW_TOPIC" in fn_env
        assert ("SAFESEND_REVIEW_NOTIFY_TIMEOUT_S" in fn_env) == (publishes and mode["reviewers"]), fn
    if mode["reviewers"]:
        check_reviewer_configuration(model, env, secrets)
    # every mounted secret exists in this mode (count), and every created one is mounted
    mounted = {s["secret_id"] for m in secrets.values() for s in m.values()}
    created = {i["secret_id"] for b in resources("google_secret_manager_secret")
               for i in model.instances(b.type, b.name)}
    assert mounted == created, mode_id(mode)


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
    assert review["SAFESEND_REVIEW_IAP_AUDIENCE"] == \
        f"/projects/{PROJECT_NUMBER}/locations/{model.variables['region']}/services/{model.variables['name_prefix']}-review"
    assert re.fullmatch(r"/projects/[0-9]+/locations/[a-z0-9-]+/services/[A-Za-z0-9_-]+",
                        review["SAFESEND_REVIEW_IAP_AUDIENCE"])
    assert review["SAFESEND_REVIEW_CONSOLE_URL"] == notify["SAFESEND_REVIEW_CONSOLE_URL"] == urls["review"]
    assert review["SAFESEND_REVIEW_CONSOLE_URL"].startswith("https://")
    allow = [v for k in ("SAFESEND_REVIEW_ALLOWED_EMAILS", "SAFESEND_REVIEW_ALLOWED_DOMAINS") for v in
             review.get(k, "").split(",") if v]
    assert allow, "the console's allowlist is empty"
    assert secrets["review"]["SAFESEND_REVIEW_CSRF_SECRET"]["secret_id"] == \
        model.instances("google_secret_manager_secret", "review_csrf")[0]["secret_id"]
    for name in env["review"]:
        assert name not in ("SAFESEND_NOTIFY_CHAT_WEBHOOK_URL", "SAFESEND_NOTIFY_SLACK_WEBHOOK_URL")


def test_review_has_preconditions_for_its_allowlist_reviewers_and_iap_settings():
    conditions = " ".join(p["condition"] for lc in resource(FUNCTION, "review").blocks("lifecycle")
                          for p in lc.get("precondition", []))
    for needle in ("length(var.review_allowed_emails) + length(var.review_allowed_domains) > 0",
                   "length(var.review_iap_members) > 0", "SAFESEND_REVIEW_IAP_AUDIENCE", "/services/",
                   "SAFESEND_REVIEW_CONSOLE_URL", "^https://", "local.function_secrets.review",
                   "SAFESEND_REVIEW_CSRF_SECRET"):
        assert needle in conditions, f"review: a precondition must check {needle}"
    notify = " ".join(p["condition"] for lc in resource(FUNCTION, "notify").blocks("lifecycle")
                      for p in lc.get("precondition", []))
    assert "google_service_account.notify_push[0].email" in notify and "local.function_urls.notify" in notify


def test_public_functions_have_preconditions_terraform_checks_at_plan_time():
    for name in ("send", "status"):
        conditions = [p["condition"] for lc in resource(FUNCTION, name).blocks("lifecycle")
                      for p in lc.get("precondition", [])]
        rule = next((c for c in conditions if "var.public_callers" in c and "SAFESEND_" in c), "")
        for needle in ("SAFESEND_AUTH_TRUST_CLOUD_RUN_IAM\"] == \"false\"", "SAFESEND_PUBLIC_INVOKER\"] == \"true\"",
                       "SAFESEND_AUTH_API_KEYS"):
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
    texts = {p: p.read_text() for p in [*INFRA.rglob("*.md"), *INFRA.rglob("*.example"), *CLOUDBUILD_FILES,
                                         MODULE / "env_spec.json"]}
    readme = (ROOT / "README.md").read_text()
    texts[ROOT / "README.md (Deploying)"] = readme[readme.index("## Deploying"):]
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
        assert block.body["member"] == f"serviceAccount:${{google_service_account.{account}{index}.email}}", \
            f"{block.address}: token creator only on itself"
        assert block.body["count"] in ("${local.gmail_keyless ? 1 : 0}",
                                       "${local.reviewers_enabled && local.gmail_keyless ? 1 : 0}"), block.address
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
    for name, kind in (("dead_letter_publisher", "google_pubsub_topic_iam_member"),
                       ("dead_letter_source_subscriber", "google_pubsub_subscription_iam_member"),
                       ("dead_letter_notify_push_subscriber", "google_pubsub_subscription_iam_member")):
        assert resource(kind, name).body["member"] == "${local.pubsub_service_agent}", name


def test_iap_service_agent_is_created_explicitly_invokes_review_and_nothing_is_public():
    """IAP on the console: the agent created (never inferred) and the only invoker of review; the
    reviewers (var.review_iap_members, people only) hold roles/iap.httpsResourceAccessor on that
    service; no public member anywhere on it."""
    identity = resource("google_project_service_identity", "iap")
    assert identity.body["service"] == "iap.googleapis.com"
    assert identity.body["provider"] in ("google-beta", "${google-beta}")
    assert resource("time_sleep", "iap_agent").body["triggers"] == \
        {"member": "${google_project_service_identity.iap[0].member}"}
    assert "time_sleep.iap_agent[0].triggers[\"member\"]" in locals_of(MODULE)["iap_service_agent"]
    for file, parsed in parsed_hcl().items():
        assert "gcp-sa-iap" not in json.dumps(parsed), f"{file}: the IAP agent's email is read, not built"
    invoker = resource("google_cloud_run_v2_service_iam_member", "review_iap_invoker").body
    assert (invoker["member"], invoker["role"]) == ("${local.iap_service_agent}", "roles/run.invoker")
    off = ModuleModel()
    assert not off.instances("google_iap_web_cloud_run_service_iam_member", "review_accessors")
    members = ["group:mail-reviewers@example.com", "user:ann@example.com"]
    on = ModuleModel({"reviewers_enabled": True, "review_iap_members": members,
                      "review_allowed_emails": ["a@b.example"]})
    accessors = on.instances("google_iap_web_cloud_run_service_iam_member", "review_accessors")
    assert sorted(a["member"] for a in accessors) == members
    assert {a["role"] for a in accessors} == {"roles/iap.httpsResourceAccessor"}
    block = resource("google_iap_web_cloud_run_service_iam_member", "review_accessors")
    assert block.body["cloud_run_service_name"] == \
        "${google_cloudfunctions2_function.review[0].service_config[0].service}"
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
    model = ModuleModel({"reviewers_enabled": True, "review_iap_members": ["group:r@example.com"],
                         "review_allowed_domains": ["example.com"], "review_max_delivery_attempts": 7})
    (sub,) = model.instances("google_pubsub_subscription", "notify_push")
    url = model.local("function_urls")["notify"]
    push = nested(sub, "push_config")
    assert push and push[0]["push_endpoint"] == url, "notify is fed by a push subscription to its URL"
    oidc = nested(push[0], "oidc_token")
    assert oidc, "the push carries no OIDC token: notify would refuse every item"
    assert oidc[0]["audience"] == url
    assert oidc[0]["service_account_email"] == email_of(model, "notify_push") == \
        model.local("function_env")["notify"]["SAFESEND_AUTH_INTERNAL_INVOKERS"]
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
        ("google_artifact_registry_repository_iam_member", "roles/artifactregistry.writer",
         "google_artifact_registry_repository.functions"),
    }
    condition = resource("google_project_iam_member", "build_source_access").first("condition", "expression")
    assert condition == 'resource.name.startsWith("projects/_/buckets/gcf-v2-sources-' \
                        '${data.google_project.this.number}-${var.region}")'


def test_sweep_and_review_are_deployed_only_with_their_indexes():
    for name in ("sweep", "review"):
        assert "${google_firestore_index.jobs}" in resource(FUNCTION, name).body["depends_on"], name


def test_test_only_switches_are_never_set():
    """FORBIDDEN_ENV (auth off, fault injection, the console's development identity, the local stacks'
    internal/tasks API keys and plain-http callbacks): not in any parsed .tf (comments excluded), the
    env spec, tfvars example or Cloud Build file."""
    texts = {file: json.dumps(parsed) for file, parsed in parsed_hcl().items()}
    for path in [*INFRA.rglob("*.tfvars.example"), *CLOUDBUILD_FILES, INFRA / "firestore.indexes.json",
                 MODULE / "env_spec.json"]:
        texts[str(path.relative_to(ROOT))] = path.read_text()
    for file, text in texts.items():
        for name in FORBIDDEN_ENV:
            assert name not in text, f"{file} sets {name}"


def test_task_and_scheduler_calls_carry_oidc_tokens_for_the_function_urls():
    job = resource("google_cloud_scheduler_job", "sweep")
    assert job.first("http_target", "uri") == "${local.function_urls.sweep}"
    assert job.first("http_target", "oidc_token", "audience") == "${local.function_urls.sweep}"
    assert job.first("http_target", "oidc_token", "service_account_email") == \
        "${google_service_account.scheduler_invoker.email}"
    model = ModuleModel()
    env = model.local("function_env")
    for fn in ("send", "reconcile", "sweep"):
        assert env[fn]["SAFESEND_RECONCILE_URL"] == model.local("function_urls")["reconcile"], fn
        assert env[fn]["SAFESEND_TASKS_SERVICE_ACCOUNT"] == \
            model.instances("google_service_account", "tasks_invoker")[0]["email"], fn
        assert env[fn]["SAFESEND_AUTH_AUDIENCES"].split(",") == \
            [model.local("function_urls")[f] for f in ("send", "reconcile", "sweep", "status")], fn
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
    assert (publisher["member"], publisher["role"], publisher["topic"]) == \
        (agent, "roles/pubsub.publisher", "${google_pubsub_topic.review_dead_letter.name}")
    subscriber = resource("google_pubsub_subscription_iam_member", "dead_letter_source_subscriber").body
    assert (subscriber["member"], subscriber["role"], subscriber["subscription"]) == \
        (agent, "roles/pubsub.subscriber", "${google_pubsub_subscription.review_inbox.name}")


def test_source_object_name_carries_the_content_hash():
    obj = resource("google_storage_bucket_object", "functions_source")
    assert obj.body["name"] == "functions-${data.archive_file.functions_source.output_sha256}.zip"
    for function in functions():
        source = function.first("build_config", "source", "storage_source")
        assert source["object"] == "${local.source_object}", function.address
    assert locals_of(MODULE)["source_object"] == "${google_storage_bucket_object.functions_source.name}"
