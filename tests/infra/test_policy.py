"""(a) Every .tf file parses with python-hcl2, and the parsed infra/ obeys our IAM and auth policy."""

from __future__ import annotations

import json
import re

import pytest

from .support import (
    CLOUDBUILD_FILES,
    ENVS,
    FUNCTIONS,
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

PRIMITIVE_ROLES = re.compile(r"roles/(owner|editor|viewer)\b")
PUBLIC_MEMBERS = re.compile(r"\ballUsers\b|\ballAuthenticatedUsers\b")
FORBIDDEN_ENV = ("SAFESEND_AUTH_DISABLED", "SAFESEND_ENABLE_FAULT_INJECTION")
FUNCTION = "google_cloudfunctions2_function"
INTERNAL = {"reconcile", "sweep"}
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


def test_no_public_members_anywhere():
    for file, parsed in parsed_hcl().items():
        assert not PUBLIC_MEMBERS.search(json.dumps(parsed)), f"{file} mentions allUsers/allAuthenticatedUsers"


def test_no_authoritative_or_broad_project_iam():
    for block in all_iam_blocks():
        if block.type.startswith("google_project_iam"):
            assert block.type == "google_project_iam_member", \
                f"{block.address}: authoritative project IAM would remove other members' grants"
            for role in ("roles/iam.serviceAccountTokenCreator", "roles/iam.serviceAccountUser",
                         "roles/iam.serviceAccountOpenIdTokenCreator", "roles/iam.serviceAccountKeyAdmin"):
                assert role not in block.text(), f"{block.address}: {role} must be granted on one account, not the project"


def test_every_entry_point_has_exactly_one_function_and_vice_versa():
    points = entry_points()
    assert points >= {"send", "reconcile", "sweep", "status"}
    declared = [f.first("build_config", "entry_point") for f in functions()]
    assert sorted(declared) == sorted(points), f"entry points {sorted(points)} vs function resources {sorted(declared)}"
    for function in functions():
        assert function.name == function.first("build_config", "entry_point"), function.address


def test_every_function_runs_as_its_own_service_account():
    used: dict[str, str] = {}
    for function in functions():
        ref = reference(function.first("service_config", "service_account_email"))
        assert ref and re.fullmatch(r"google_service_account\.\w+\.email", ref), \
            f"{function.address}: service_account_email must reference a google_service_account"
        account = ref.split(".")[1]
        assert account not in used, f"{function.address} shares {account} with {used[account]}"
        used[account] = function.name
        sa = resource("google_service_account", account)
        assert "count" not in sa.body and "for_each" not in sa.body, f"{sa.address} must be a single account"
    builder = reference(functions()[0].first("build_config", "service_account"))
    assert builder is not None and builder.split(".")[1] not in used, "the build account must not be a runtime account"


def grants_of(account: str) -> set[tuple[str, str, str]]:
    """(IAM resource type, role, granted-on reference) for every grant whose member is this account."""
    member = f"serviceAccount:${{google_service_account.{account}.email}}"
    found = set()
    for block in all_iam_blocks():
        if block.body.get("member") != member:
            assert member not in block.text(), f"{block.address}: grants to {account} must be one member each"
            continue
        scope_key = {"google_project_iam_member": "project", "google_cloud_tasks_queue_iam_member": "name",
                     "google_service_account_iam_member": "service_account_id",
                     "google_pubsub_topic_iam_member": "topic",
                     "google_secret_manager_secret_iam_member": "secret_id",
                     "google_cloud_run_v2_service_iam_member": "name"}.get(block.type)
        assert scope_key, f"{block.address}: unexpected IAM resource type for a function account"
        scope = block.body[scope_key]
        scope = (reference(scope) or scope).rsplit(".", 1)[0] if scope_key != "project" else "project"
        found.add((block.type, block.body["role"], scope))
    return found


WORKER_GRANTS = {
    ("google_project_iam_member", "roles/datastore.user", "project"),
    ("google_cloud_tasks_queue_iam_member", "roles/cloudtasks.enqueuer", "google_cloud_tasks_queue.reconcile"),
    ("google_service_account_iam_member", "roles/iam.serviceAccountUser", "google_service_account.tasks_invoker"),
    ("google_pubsub_topic_iam_member", "roles/pubsub.publisher", "google_pubsub_topic.review"),
    ("google_secret_manager_secret_iam_member", "roles/secretmanager.secretAccessor",
     "google_secret_manager_secret.gmail_credentials"),
}
HMAC = ("google_secret_manager_secret_iam_member", "roles/secretmanager.secretAccessor",
        "google_secret_manager_secret.webhook_hmac")


@pytest.mark.parametrize("account, expected", [
    ("send", WORKER_GRANTS | {HMAC}),
    ("reconcile", WORKER_GRANTS),
    ("sweep", WORKER_GRANTS),
    ("status", {("google_project_iam_member", "roles/datastore.user", "project"), HMAC}),
])
def test_each_function_account_holds_exactly_what_its_entry_point_needs(account, expected):
    assert grants_of(account) == expected


def invoker_grants() -> dict[str, set[str]]:
    """{function: {member expression}} of every roles/run.invoker grant."""
    found: dict[str, set[str]] = {}
    for block in resources("google_cloud_run_v2_service_iam_member"):
        assert block.body["role"] == "roles/run.invoker", block.address
        match = re.fullmatch(r"google_cloudfunctions2_function\.(\w+)\.service_config\[0\]\.service",
                             reference(block.body["name"]) or "")
        assert match, f"{block.address}: name must be a function's service"
        found.setdefault(match.group(1), set()).add(block.body["member"])
    assert not [b for b in all_iam_blocks() if b.type.startswith(("google_cloudfunctions", "google_cloud_run_service"))], \
        "run.invoker goes on the Cloud Run v2 service behind each function, nowhere else"
    return found


def test_run_invoker_tasks_and_scheduler_on_internal_functions_n8n_on_public_ones():
    grants = invoker_grants()
    assert grants["reconcile"] == {"serviceAccount:${google_service_account.tasks_invoker.email}"}
    assert grants["sweep"] == {"serviceAccount:${google_service_account.scheduler_invoker.email}"}
    assert grants["send"] == grants["status"] == {"${each.value}"}
    for name in ("send_callers", "status_callers"):
        assert resource("google_cloud_run_v2_service_iam_member", name).body["for_each"] == "${local.caller_members}"
    caller_members = locals_of(MODULE)["caller_members"]
    assert "google_service_account.n8n_invoker[0].email" in caller_members
    assert "tasks_invoker" not in caller_members and "scheduler_invoker" not in caller_members


def test_internal_functions_use_internal_ingress():
    for function in functions():
        ingress = function.first("service_config", "ingress_settings")
        if function.name in INTERNAL:
            assert ingress == "ALLOW_INTERNAL_ONLY", f"{function.address}: ingress {ingress}"
        else:
            assert ingress in ("ALLOW_ALL", "ALLOW_INTERNAL_AND_GCLB", "ALLOW_INTERNAL_ONLY"), function.address


def test_secrets_are_mounted_per_function():
    expected = {
        "send": {"SAFESEND_GMAIL_CREDENTIALS_JSON": "gmail_credentials", "SAFESEND_AUTH_HMAC_SECRET": "webhook_hmac"},
        "reconcile": {"SAFESEND_GMAIL_CREDENTIALS_JSON": "gmail_credentials"},
        "sweep": {"SAFESEND_GMAIL_CREDENTIALS_JSON": "gmail_credentials"},
        "status": {"SAFESEND_AUTH_HMAC_SECRET": "webhook_hmac"},
    }
    for function in functions():
        service = function.blocks("service_config")[0]
        mounted = {s["key"]: reference(s["secret"]) for s in service.get("secret_environment_variables", [])}
        assert mounted == {k: f"google_secret_manager_secret.{v}.secret_id" for k, v in expected[function.name].items()}, \
            function.address
        assert not service.get("secret_volumes"), function.address


def config_env_names() -> set[str]:
    import ast
    names = set()
    for source in FUNCTIONS.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and re.fullmatch(r"SAFESEND_\w+", node.value):
                names.add(node.value)
    return names | {"GOOGLE_CLOUD_PROJECT"}


def test_environment_sets_only_variables_the_code_reads_and_the_auth_ones():
    env_locals = locals_of(MODULE)
    text = env_locals["common_env"] + env_locals["worker_env"]
    keys = set(re.findall(r"\b([A-Z][A-Z0-9_]+)\s*=", text))
    secret_keys = {"SAFESEND_GMAIL_CREDENTIALS_JSON", "SAFESEND_AUTH_HMAC_SECRET"}
    unknown = (keys | secret_keys) - config_env_names()
    assert not unknown, f"infra sets variables the code in functions/ does not read: {sorted(unknown)}"
    for name in ("SAFESEND_AUTH_CALLER_SERVICE_ACCOUNTS", "SAFESEND_AUTH_INTERNAL_INVOKERS", "SAFESEND_AUTH_AUDIENCES",
                 "SAFESEND_AUTH_TRUST_CLOUD_RUN_IAM"):
        assert name in env_locals["common_env"], f"{name} missing from local.common_env"
    for name in ("SAFESEND_TASKS_QUEUE", "SAFESEND_RECONCILE_URL", "SAFESEND_TASKS_SERVICE_ACCOUNT", "SAFESEND_REVIEW_TOPIC"):
        assert name in env_locals["worker_env"], f"{name} missing from local.worker_env"
    audiences = env_locals["common_env"].split("SAFESEND_AUTH_AUDIENCES", 1)[1].split("\n", 1)[0]
    for name in ("send", "reconcile", "sweep", "status"):
        assert f'"{name}"' in audiences, f"SAFESEND_AUTH_AUDIENCES must list {name}'s URL"
    env_of = {f.name: f.first("service_config", "environment_variables") for f in functions()}
    assert env_of == {"send": "${local.worker_env}", "reconcile": "${local.worker_env}",
                      "sweep": "${local.worker_env}", "status": "${local.common_env}"}


def test_test_only_switches_are_never_set():
    """SAFESEND_AUTH_DISABLED / SAFESEND_ENABLE_FAULT_INJECTION: not in any parsed .tf (comments excluded),
    tfvars example or Cloud Build file."""
    texts = {file: json.dumps(parsed) for file, parsed in parsed_hcl().items()}
    for path in [*INFRA.rglob("*.tfvars.example"), *CLOUDBUILD_FILES, INFRA / "firestore.indexes.json"]:
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
    env = locals_of(MODULE)["worker_env"]
    assert "SAFESEND_RECONCILE_URL = local.function_urls.reconcile" in env
    assert "SAFESEND_TASKS_SERVICE_ACCOUNT = google_service_account.tasks_invoker.email" in env
    urls = locals_of(MODULE)["function_urls"]
    assert "https://${var.name_prefix}-${name}-${data.google_project.this.number}.${var.region}.run.app" in urls


def test_queue_has_rate_limits_and_retries_and_review_has_a_dead_letter_path():
    queue = resource("google_cloud_tasks_queue", "reconcile")
    assert queue.blocks("rate_limits") and queue.blocks("retry_config")
    inbox = resource("google_pubsub_subscription", "review_inbox")
    assert inbox.first("dead_letter_policy", "dead_letter_topic") == "${google_pubsub_topic.review_dead_letter.id}"
    resource("google_pubsub_subscription", "review_dead_letter")
    agent = "${local.pubsub_service_agent}"
    assert "@gcp-sa-pubsub.iam.gserviceaccount.com" in locals_of(MODULE)["pubsub_service_agent"]
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
