"""The offline checks can fail: each mutation below, applied to a scratch copy of the repository,
must make the named tests of tests/infra fail there (and the unmutated copy passes them).

Each mutation is one edit that used to pass, or that would break a promise of infra/ silently:
the issue-11 list (an attribute typo, a wrong type, three enum typos, a gcloud env drift), and one
per rule the other checks enforce (public/IAM-trust combinations, keyless delegation, the index's
collection, plan-only default, the prod approval and lock gates, the snapshot regeneration, ...).
An edit whose text is not found exactly once is an error, so a mutation cannot silently miss."""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests import mutation_baseline

from .mutation_stop import NEEDLES
from .mutation_zygote import ZygotePool
from .shared_bytecode import share_bytecode
from .support import PARSE_CACHE, ROOT, SNAPSHOT_CACHE

M = "infra/modules/safesend"
GCLOUD = "cloudbuild-gcloud.yaml"
TF_PIPELINE = "cloudbuild.yaml"


@dataclass(frozen=True)
class Mutation:
    name: str
    proves: str
    file: str
    old: str
    new: str
    fails: tuple[str, ...]  # substrings of test node ids that must fail
    tests: tuple[str, ...]  # test files to run in the copy


SCHEMA_TESTS = ("tests/infra/test_provider_schema.py",)
PARITY_TESTS = ("tests/infra/test_env_parity.py",)
POLICY_TESTS = ("tests/infra/test_policy.py",)
PIPELINE_TESTS = ("tests/infra/test_cloudbuild.py",)
INDEX_TESTS = ("tests/infra/test_firestore_indexes.py",)
SETUP_TESTS = ("tests/infra/test_postgres_setup.py",)
DOCS_TESTS = ("tests/infra/test_postgres_docs.py",)
TERRAFORM_TESTS = ("tests/infra/test_terraform.py",)
GCLOUD_CLI_TESTS = ("tests/infra/test_gcloud_cli.py",)
MONITORING_TESTS = ("tests/infra/test_monitoring.py",)
ENV_SETTINGS_TESTS = ("tests/infra/test_env_settings.py",)
SPEC = f"{M}/env_spec.json"
TAIL = '"pg_dsn_tail": " sslmode=verify-ca sslrootcert=/etc/secrets/cloudsql/server-ca.pem options=\'-c search_path=safesend -c role=safesend_owner\'"'

MUTATIONS = [
    # ---- issue 11, item 6: edits that passed the old checks
    Mutation(
        "attribute-typo",
        "references are checked against the schema's attributes",
        f"{M}/iam.tf",
        '  location = google_cloud_tasks_queue.reconcile.location\n  name     = google_cloud_tasks_queue.reconcile.name\n  role     = "roles/cloudtasks.enqueuer"\n  member   = "serviceAccount:${google_service_account.send.email}"',
        '  location = google_cloud_tasks_queue.reconcile.locaton\n  name     = google_cloud_tasks_queue.reconcile.name\n  role     = "roles/cloudtasks.enqueuer"\n  member   = "serviceAccount:${google_service_account.send.email}"',
        ("test_every_reference_resolves",),
        SCHEMA_TESTS,
    ),
    Mutation(
        "number-as-word",
        "literal values are checked against the argument's type",
        f"{M}/tasks.tf",
        "max_doublings = 4",
        'max_doublings = "four"',
        (
            "test_block_arguments_types_enums_and_nested_blocks_match_the_provider_schema[google_cloud_tasks_queue.reconcile]",
        ),
        SCHEMA_TESTS,
    ),
    Mutation(
        "repository-format-typo",
        "enums the API documents (discovery) are checked",
        f"{M}/build.tf",
        'format        = "DOCKER"',
        'format        = "DOCKERR"',
        ("match_the_provider_schema[google_artifact_registry_repository.functions]",),
        SCHEMA_TESTS,
    ),
    Mutation(
        "database-type-typo",
        "enums the provider documents are checked",
        f"{M}/firestore.tf",
        'type        = "FIRESTORE_NATIVE"',
        'type        = "FIRESTORE_NATIV"',
        ("match_the_provider_schema[google_firestore_database.default]",),
        SCHEMA_TESTS,
    ),
    Mutation(
        "scheduler-method-typo",
        "enums of nested blocks are checked",
        f"{M}/scheduler.tf",
        'http_method = "POST"',
        'http_method = "PUSH"',
        ("match_the_provider_schema[google_cloud_scheduler_job.sweep]",),
        SCHEMA_TESTS,
    ),
    Mutation(
        "gcloud-extra-env-flag",
        "the gcloud path sets nothing but the rendered spec (issue 11 item 1)",
        GCLOUD,
        '--env-vars-file="deploy-config/$$f.env.yaml" "$$secrets"',
        '--env-vars-file="deploy-config/$$f.env.yaml" "$$secrets" --update-env-vars=SAFESEND_AUTH_TRUST_CLOUD_RUN_IAM=false',
        ("test_both_deploy_paths_give_every_function_the_same_configuration",),
        PARITY_TESTS,
    ),
    Mutation(
        "gcloud-own-env",
        "the gcloud path cannot go back to its own variable list",
        GCLOUD,
        '--env-vars-file="deploy-config/$$f.env.yaml"',
        '--set-env-vars="GOOGLE_CLOUD_PROJECT=$PROJECT_ID"',
        ("test_both_deploy_paths_give_every_function_the_same_configuration",),
        PARITY_TESTS,
    ),
    Mutation(
        "gcloud-fact-drift",
        "a fact wired to the wrong value on the gcloud side is a difference",
        GCLOUD,
        "- SAFESEND_FACT_name_prefix=${_NAME_PREFIX}\n      - SAFESEND_FACT_jobs_collection=${_JOBS_COLLECTION}",
        "- SAFESEND_FACT_name_prefix=${_NAME_PREFIX}\n      - SAFESEND_FACT_jobs_collection=ai_jobs",
        ("test_both_deploy_paths_give_every_function_the_same_configuration[everything-changed]",),
        PARITY_TESTS,
    ),
    Mutation(
        "gcloud-default-drift",
        "gcloud defaults are Terraform's defaults",
        GCLOUD,
        '_INDEX_LAG_S: "90"',
        '_INDEX_LAG_S: "60"',
        (
            "test_gcloud_substitution_defaults_are_the_terraform_variable_defaults",
            "test_both_deploy_paths_give_every_function_the_same_configuration[defaults]",
        ),
        PARITY_TESTS,
    ),
    Mutation(
        "terraform-fact-drift",
        "a fact wired to the wrong variable on the Terraform side is a difference",
        f"{M}/functions.tf",
        "    jobs_collection           = var.jobs_collection\n",
        "    jobs_collection           = var.name_prefix\n",
        ("test_both_deploy_paths_give_every_function_the_same_configuration[everything-changed]",),
        PARITY_TESTS,
    ),
    Mutation(
        "terraform-renderer-drift",
        "the HCL renderer is evaluated, not compared as text",
        f"{M}/functions.tf",
        'contains(local.env_spec.lists, name) ? join(",", compact(split(",", raw))) : raw',
        'contains(local.env_spec.lists, name) ? join(";", compact(split(",", raw))) : raw',
        ("test_terraform_expressions_render_the_spec_exactly_as_env_spec_py",),
        PARITY_TESTS,
    ),
    # ---- issue 9 item 2: public callers
    Mutation(
        "public-status-trusts-iam",
        "a public function never trusts stripped ID tokens",
        f"{M}/env_spec.json",
        '"reconcile": "true", "sweep": "true", "status": "{caller_trust_iam}"',
        '"reconcile": "true", "sweep": "true", "status": "true"',
        ("test_runtime_configuration_combinations_in_every_mode[nokeyless-public",),
        POLICY_TESTS,
    ),
    Mutation(
        "public-invoker-on-reconcile",
        "reconcile/sweep stay IAM-only",
        f"{M}/env_spec.json",
        '"SAFESEND_PUBLIC_INVOKER": {"send": "{caller_public_invoker}"',
        '"SAFESEND_PUBLIC_INVOKER": {"reconcile": "{caller_public_invoker}", "send": "{caller_public_invoker}"',
        ("test_runtime_configuration_combinations_in_every_mode",),
        POLICY_TESTS,
    ),
    Mutation(
        "all-users-on-reconcile",
        "allUsers only on send and status",
        f"{M}/iam.tf",
        'resource "google_cloud_run_v2_service_iam_member" "send_public" {\n  count = var.public_callers ? 1 : 0\n\n  project  = var.project_id\n  location = var.region\n  name     = google_cloudfunctions2_function.send.service_config[0].service',
        'resource "google_cloud_run_v2_service_iam_member" "send_public" {\n  count = var.public_callers ? 1 : 0\n\n  project  = var.project_id\n  location = var.region\n  name     = google_cloudfunctions2_function.reconcile.service_config[0].service',
        ("test_public_members_only_on_send_and_status", "test_run_invoker_grants_in_every_mode"),
        POLICY_TESTS,
    ),
    Mutation(
        "public-without-api-keys",
        "public mode mounts the API keys",
        f"{M}/env_spec.json",
        '"enabled_by": "caller_public_invoker"',
        '"enabled_by": "callbacks"',
        ("test_runtime_configuration_combinations_in_every_mode",),
        POLICY_TESTS,
    ),
    Mutation(
        "status-ingress-any",
        "send/status ingress is exact, not any value",
        f"{M}/functions.tf",
        '    timeout_seconds                  = 30\n    service_account_email            = google_service_account.status.email\n    ingress_settings                 = "ALLOW_ALL"',
        '    timeout_seconds                  = 30\n    service_account_email            = google_service_account.status.email\n    ingress_settings                 = "ALLOW_INTERNAL_AND_GCLB"',
        ("test_internal_functions_use_internal_ingress_and_callers_all",),
        POLICY_TESTS,
    ),
    # ---- issue 11 item 4: keyless delegation
    Mutation(
        "token-creator-on-another-account",
        "token creator only on the function's own account",
        f"{M}/iam.tf",
        '  service_account_id = google_service_account.send.name\n  role               = "roles/iam.serviceAccountTokenCreator"',
        '  service_account_id = google_service_account.reconcile.name\n  role               = "roles/iam.serviceAccountTokenCreator"',
        (
            "test_keyless_delegation_grants_token_creator_only_on_the_account_itself",
            "test_each_function_account_holds_exactly_what_its_entry_point_needs_in_every_mode",
        ),
        POLICY_TESTS,
    ),
    Mutation(
        "gmail-secret-in-keyless-mode",
        "no Gmail credential secret with keyless delegation",
        f"{M}/env_spec.json",
        '"enabled_by": "gmail_oauth_token"',
        '"enabled_by": "always"',
        ("test_runtime_configuration_combinations_in_every_mode[keyless",),
        POLICY_TESTS,
    ),
    # ---- issue 11 item 5: first apply
    Mutation(
        "pubsub-agent-inferred",
        "the Pub/Sub agent's email comes from its created identity",
        f"{M}/pubsub.tf",
        '  role    = "roles/pubsub.publisher"\n  member  = local.pubsub_service_agent',
        '  role    = "roles/pubsub.publisher"\n  member  = "serviceAccount:service-${data.google_project.this.number}@gcp-sa-pubsub.iam.gserviceaccount.com"',
        ("test_pubsub_service_agent_is_created_explicitly_and_never_inferred",),
        POLICY_TESTS,
    ),
    # ---- issue 11 item 2: the index
    Mutation(
        "index-collection-hardcoded",
        "the index is on the configured collection",
        f"{M}/firestore.tf",
        "collection  = var.jobs_collection",
        'collection  = "ai_jobs"',
        ("test_terraform_indexes_the_collection_the_functions_use",),
        INDEX_TESTS,
    ),
    Mutation(
        "index-file-collection",
        "the index file is tied to the default collection",
        "infra/firestore.indexes.json",
        '"indexes": [\n    {\n      "collectionGroup": "ai_jobs"',
        '"indexes": [\n    {\n      "collectionGroup": "jobs"',
        ("test_firestore_indexes_json_declares_the_same_index",),
        INDEX_TESTS,
    ),
    Mutation(
        "index-errors-hidden",
        "index creation errors fail the build",
        GCLOUD,
        "gcloud firestore indexes composite create --database='(default)' \"$${index_args[@]}\" ;;",
        "gcloud firestore indexes composite create --database='(default)' \"$${index_args[@]}\" || true ;;",
        ("test_gcloud_index_errors_fail_the_build[create-fails]", "test_no_error_is_hidden"),
        INDEX_TESTS,
    ),
    # ---- issue 11 item 3: plan-only, approval, lock
    Mutation(
        "auto-apply-default",
        "plan-only is the default",
        TF_PIPELINE,
        '_AUTO_APPLY: "false"',
        '_AUTO_APPLY: "true"',
        ("test_terraform_pipeline_defaults_to_a_plan", "test_default_build_plans_and_never_applies"),
        PIPELINE_TESTS,
    ),
    Mutation(
        "approval-not-checked",
        "a prod apply needs an approved build",
        TF_PIPELINE,
        'if [ "$$approval" != "APPROVED" ]; then',
        "if false; then",
        ("test_prod_apply_without_approval_is_refused",),
        PIPELINE_TESTS,
    ),
    Mutation(
        "lock-not-required",
        "a prod apply needs a committed lock file",
        TF_PIPELINE,
        'if [ "${_ENV}" = "prod" ] && [ "${_AUTO_APPLY}" = "true" ]; then',
        "if false; then",
        ("test_prod_apply_without_a_committed_lock_is_refused",),
        PIPELINE_TESTS,
    ),
    Mutation(
        "lock-not-readonly",
        "init installs exactly the locked providers",
        TF_PIPELINE,
        "      - -lockfile=readonly\n",
        "",
        (
            "test_terraform_pipeline_defaults_to_a_plan_and_orders_its_steps",
            "test_approved_prod_build_with_a_committed_lock_applies_the_saved_plan",
        ),
        PIPELINE_TESTS,
    ),
    Mutation(
        "lock-pins-other-version",
        "a committed lock must pin the snapshot's provider versions",
        "infra/envs/prod/.terraform.lock.hcl",
        None,
        'provider "registry.terraform.io/hashicorp/google" {\n  version     = "8.6.0"\n  constraints = "8.6.0"\n'
        '  hashes      = ["h1:abc="]\n}\n',
        ("test_a_committed_lock_file_pins_the_snapshot_versions[prod]",),
        SCHEMA_TESTS,
    ),
    Mutation(
        "snapshot-edited-by-hand",
        "the snapshots are regenerated, not trusted (regenerate.py --check runs)",
        "infra/schema/google-provider-snapshot.json",
        '"FORMAT_UNSPECIFIED",\n      "DOCKER",',
        '"FORMAT_UNSPECIFIED",\n      "DOCKER",\n      "DOCKERR",',
        ("test_snapshots_are_exactly_what_regenerate_makes_from_the_pinned_wheels",),
        SCHEMA_TESTS,
    ),
    Mutation(
        "module-output-typo",
        "the module call the environments' output passes on exists",
        "infra/envs/prod/main.tf",
        "  value       = module.safesend\n",
        "  value       = module.safesen\n",
        ("test_every_reference_resolves_against_declarations_and_the_schema[infra/envs/prod/main.tf]",),
        SCHEMA_TESTS,
    ),
    # ---- issue 21: thin environments in step with the module and its docs
    Mutation(
        "env-setting-typo",
        "every argument an environment gives is a module variable",
        "infra/envs/dev/main.tf",
        "  send_max_instances               = 5\n",
        "  send_max_instance                = 5\n",
        ("test_the_environments_the_module_and_its_docs_are_in_step",),
        ENV_SETTINGS_TESTS,
    ),
    Mutation(
        "env-setting-wrong-value",
        "an environment's literal passes the module variable's validation",
        "infra/envs/dev/main.tf",
        '  log_level                        = "DEBUG"\n',
        '  log_level                        = "VERBOSE"\n',
        ("test_the_environments_the_module_and_its_docs_are_in_step",),
        ENV_SETTINGS_TESTS,
    ),
    Mutation(
        "env-parity-drift",
        "dev and prod differ only in the listed choices",
        "infra/envs/prod/main.tf",
        "  send_min_instances           = 1\n",
        "  send_min_instances           = 1\n  public_callers               = true\n",
        ("test_the_environments_the_module_and_its_docs_are_in_step",),
        ENV_SETTINGS_TESTS,
    ),
    Mutation(
        "variables-doc-drift",
        "infra/README.md's Variables list names every module variable",
        "infra/README.md",
        "`source_bucket_force_destroy` (false), `artifact_keep_count` (10);",
        "`source_bucket_force_destroy` (false);",
        ("test_the_environments_the_module_and_its_docs_are_in_step",),
        ENV_SETTINGS_TESTS,
    ),
    # ---- issue 10: the reviewer side (notify, review behind IAP)
    Mutation(
        "all-users-on-review",
        "the console is never public: only the IAP agent invokes it",
        f"{M}/iam.tf",
        '  role     = "roles/run.invoker"\n  member   = local.iap_service_agent',
        '  role     = "roles/run.invoker"\n  member   = "allUsers"',
        (
            "test_public_members_only_on_send_and_status",
            "test_run_invoker_grants_in_every_mode",
            "test_iap_service_agent_is_created_explicitly",
        ),
        POLICY_TESTS,
    ),
    Mutation(
        "iap-agent-not-invoker",
        "IAP's service agent (read, not built) holds run.invoker on the console",
        f"{M}/iam.tf",
        '  role     = "roles/run.invoker"\n  member   = local.iap_service_agent',
        '  role     = "roles/run.invoker"\n  member   = "serviceAccount:${google_service_account.notify_push[0].email}"',
        ("test_run_invoker_grants_in_every_mode", "test_iap_service_agent_is_created_explicitly"),
        POLICY_TESTS,
    ),
    Mutation(
        "no-accessor-grant",
        "the reviewers get roles/iap.httpsResourceAccessor on the console",
        f"{M}/iap.tf",
        'role                   = "roles/iap.httpsResourceAccessor"',
        'role                   = "roles/iap.tunnelResourceAccessor"',
        (
            "test_iap_service_agent_is_created_explicitly",
            "test_both_deploy_paths_give_every_function_the_same_configuration[reviewers]",
        ),
        POLICY_TESTS + PARITY_TESTS,
    ),
    Mutation(
        "push-without-oidc",
        "the push to notify carries an OIDC token for notify's URL",
        f"{M}/pubsub.tf",
        "    oidc_token {\n      service_account_email = google_service_account.notify_push[0].email\n"
        "      audience              = local.function_urls.notify\n    }\n",
        "",
        (
            "test_notify_push_subscription_carries_oidc",
            "test_both_deploy_paths_give_every_function_the_same_configuration[reviewers]",
        ),
        POLICY_TESTS + PARITY_TESTS,
    ),
    Mutation(
        "push-audience-elsewhere",
        "the OIDC audience is notify's own URL",
        f"{M}/pubsub.tf",
        "      audience              = local.function_urls.notify",
        "      audience              = local.function_urls.review",
        ("test_notify_push_subscription_carries_oidc",),
        POLICY_TESTS,
    ),
    Mutation(
        "missing-dead-letter",
        "the push subscription dead-letters what notify keeps refusing",
        f"{M}/pubsub.tf",
        "  dead_letter_policy {\n    dead_letter_topic     = google_pubsub_topic.review_dead_letter.id\n"
        "    max_delivery_attempts = var.review_max_delivery_attempts\n  }\n\n  # Pushes start",
        "  # Pushes start",
        (
            "test_notify_push_subscription_carries_oidc",
            "test_both_deploy_paths_give_every_function_the_same_configuration[reviewers]",
        ),
        POLICY_TESTS + PARITY_TESTS,
    ),
    Mutation(
        "webhook-secret-on-send",
        "the reviewers' webhook URLs reach the outbox's deliverers alone",
        f"{M}/env_spec.json",
        '"enabled_by": "notify_chat", "functions": ["reconcile", "sweep", "notify", "review"]',
        '"enabled_by": "notify_chat", "functions": ["reconcile", "sweep", "notify", "review", "send"]',
        ("test_runtime_configuration_combinations_in_every_mode",),
        POLICY_TESTS,
    ),
    Mutation(
        "dev-identity-in-env",
        "the console's development identity is never deployed",
        f"{M}/env_spec.json",
        '  "SAFESEND_REVIEW_IAP_AUDIENCE": {"review": "{review_iap_audience}"},',
        '  "SAFESEND_REVIEW_IAP_AUDIENCE": {"review": "{review_iap_audience}"},\n'
        '  "SAFESEND_REVIEW_DEV_IDENTITY": {"review": "dev@localhost"},',
        ("test_test_only_switches_are_never_set", "test_runtime_configuration_combinations_in_every_mode"),
        POLICY_TESTS,
    ),
    Mutation(
        "tasks-api-key-in-env",
        "the local stacks' task key is never deployed",
        f"{M}/env_spec.json",
        '  "SAFESEND_REVIEW_IAP_AUDIENCE": {"review": "{review_iap_audience}"},',
        '  "SAFESEND_REVIEW_IAP_AUDIENCE": {"review": "{review_iap_audience}"},\n'
        '  "SAFESEND_TASKS_API_KEY": {"reconcile": "{name_prefix}"},',
        ("test_test_only_switches_are_never_set", "test_runtime_configuration_combinations_in_every_mode"),
        POLICY_TESTS,
    ),
    Mutation(
        "iap-audience-as-url",
        "the IAP audience has the Cloud Run form, not the service URL",
        f"{M}/env_spec.json",
        '"review_iap_audience": "/projects/{project_number}/locations/{region}/services/{name_prefix}-review"',
        '"review_iap_audience": "https://{name_prefix}-review-{project_number}.{region}.run.app"',
        ("test_runtime_configuration_combinations_in_every_mode",),
        POLICY_TESTS,
    ),
    Mutation(
        "console-url-http",
        "the console's own URL is https",
        f"{M}/env_spec.json",
        '"SAFESEND_REVIEW_CONSOLE_URL": {"notify": "{url_review}", "review": "{url_review}"}',
        '"SAFESEND_REVIEW_CONSOLE_URL": {"notify": "{url_review}", "review": "http://{name_prefix}-review-{project_number}.{region}.run.app"}',
        ("test_runtime_configuration_combinations_in_every_mode",),
        POLICY_TESTS,
    ),
    Mutation(
        "csrf-not-mounted",
        "the CSRF key comes from Secret Manager whenever the console runs",
        f"{M}/env_spec.json",
        '"version": "review_csrf_version", "enabled_by": "reviewers"',
        '"version": "review_csrf_version", "enabled_by": "notify_slack"',
        ("test_runtime_configuration_combinations_in_every_mode",),
        POLICY_TESTS,
    ),
    Mutation(
        "empty-allowlist-allowed",
        "an empty reviewer allowlist is refused at plan time",
        f"{M}/functions.tf",
        "condition     = length(var.review_allowed_emails) + length(var.review_allowed_domains) > 0",
        "condition     = true",
        ("test_review_has_preconditions",),
        POLICY_TESTS,
    ),
    Mutation(
        "notify-ingress-all",
        "notify is internal-only (Pub/Sub push on the run.app URL)",
        f"{M}/functions.tf",
        "    service_account_email            = google_service_account.notify[0].email\n"
        '    ingress_settings                 = "ALLOW_INTERNAL_ONLY"',
        "    service_account_email            = google_service_account.notify[0].email\n"
        '    ingress_settings                 = "ALLOW_ALL"',
        ("test_internal_functions_use_internal_ingress",),
        POLICY_TESTS,
    ),
    Mutation(
        "notify-accepts-tasks",
        "only the push identity may invoke notify, for the app too",
        f"{M}/env_spec.json",
        '"notify": "{sa_notify_push}"',
        '"notify": "{sa_notify_push},{sa_tasks_invoker}"',
        ("test_runtime_configuration_combinations_in_every_mode",),
        POLICY_TESTS,
    ),
    Mutation(
        "gcloud-push-without-dead-letter",
        "the gcloud path's push subscription dead-letters too",
        GCLOUD,
        '                --dead-letter-topic="projects/$PROJECT_ID/topics/${_NAME_PREFIX}-review-dead-letter"\n',
        "",
        ("test_both_deploy_paths_give_every_function_the_same_configuration[reviewers]",),
        PARITY_TESTS,
    ),
    Mutation(
        "gcloud-no-iap",
        "the gcloud path switches IAP on for the console",
        GCLOUD,
        'gcloud beta run services update "${_NAME_PREFIX}-review" --region=${_REGION} --iap --quiet >/dev/null',
        "true",
        ("test_both_deploy_paths_give_every_function_the_same_configuration[reviewers]",),
        PARITY_TESTS,
    ),
    Mutation(
        "terraform-ci-no-iap",
        "the Terraform pipeline switches IAP on for an applied console",
        TF_PIPELINE,
        'gcloud beta run services update "$$service" --region=${_REGION} --iap --quiet',
        "true",
        ("test_an_applied_review_console_is_put_behind_iap",),
        PIPELINE_TESTS,
    ),
    # ---- issue 14: the PostgreSQL job store (job_store = "postgres")
    Mutation(
        "dsn-with-password",
        "no DSN carries a password (key/value form)",
        SPEC,
        TAIL,
        TAIL.replace('" sslmode=', '" password=hunter2 sslmode='),
        ("test_runtime_configuration_combinations_in_every_mode", "test_dsn_rules_are_also_a_plan_time_precondition"),
        POLICY_TESTS,
    ),
    Mutation(
        "dsn-uri-with-password",
        "no DSN carries a password (URI user:secret@ form)",
        SPEC,
        '"then": "host={postgres_host} port=5432 dbname=safesend user={pg_user_send}{pg_dsn_tail}"',
        '"then": "postgresql://{name_prefix}-fn-send%40{project_id}.iam:hunter2@{postgres_host}:5432/safesend?sslmode=verify-ca&sslrootcert=/etc/secrets/cloudsql/server-ca.pem"',
        ("test_runtime_configuration_combinations_in_every_mode", "test_dsn_rules_are_also_a_plan_time_precondition"),
        POLICY_TESTS,
    ),
    Mutation(
        "sslmode-disable",
        "TLS is never turned off (sslmode=disable refused)",
        SPEC,
        TAIL,
        TAIL.replace("sslmode=verify-ca", "sslmode=disable"),
        ("test_runtime_configuration_combinations_in_every_mode", "test_dsn_rules_are_also_a_plan_time_precondition"),
        POLICY_TESTS,
    ),
    Mutation(
        "iam-auth-off",
        "the store logs in with IAM database authentication",
        SPEC,
        '"postgres_iam_auth": {"when": "job_store", "equals": "postgres", "then": "true"',
        '"postgres_iam_auth": {"when": "job_store", "equals": "postgres", "then": "false"',
        ("test_runtime_configuration_combinations_in_every_mode", "test_dsn_rules_are_also_a_plan_time_precondition"),
        POLICY_TESTS,
    ),
    Mutation(
        "dsn-names-another-user",
        "each function's DSN names its own database user",
        SPEC,
        "dbname=safesend user={pg_user_status}{pg_dsn_tail}",
        "dbname=safesend user={pg_user_send}{pg_dsn_tail}",
        ("test_runtime_configuration_combinations_in_every_mode",),
        POLICY_TESTS,
    ),
    Mutation(
        "no-owner-role-in-dsn",
        "every session acts as safesend_owner, so any function can use and migrate the tables",
        SPEC,
        TAIL,
        TAIL.replace(" -c role=safesend_owner", ""),
        (
            "test_runtime_configuration_combinations_in_every_mode",
            "test_the_setup_sql_lets_every_function_run_and_migrate_the_store_as_the_owner_role",
        ),
        POLICY_TESTS + SETUP_TESTS,
    ),
    Mutation(
        "ca-file-not-mounted",
        "the server's CA is mounted wherever the store is PostgreSQL",
        SPEC,
        '"version": "postgres_server_ca_version", "enabled_by": "postgres"',
        '"version": "postgres_server_ca_version", "enabled_by": "reviewers"',
        ("test_runtime_configuration_combinations_in_every_mode",),
        POLICY_TESTS,
    ),
    Mutation(
        "setup-sql-without-grants",
        "the manual step lets every function's user act as the owner role",
        f"{M}/cloudsql.tf",
        'for fn, user in local.postgres_users : "GRANT safesend_owner TO \\"${user}\\";"',
        'for fn, user in local.postgres_users : "SELECT 1;"',
        (
            "test_the_setup_sql_creates_the_owner_role_and_schema_and_grants_every_user",
            "test_the_setup_sql_lets_every_function_run_and_migrate_the_store_as_the_owner_role",
        ),
        POLICY_TESTS + SETUP_TESTS,
    ),
    Mutation(
        "instance-without-iam-flag",
        "the instance enables IAM database authentication",
        f"{M}/cloudsql.tf",
        '      name  = "cloudsql.iam_authentication"\n      value = "on"',
        '      name  = "cloudsql.iam_authentication"\n      value = "off"',
        ("test_the_instance_has_iam_authentication_tls_private_ip_backups_and_deletion_protection",),
        POLICY_TESTS,
    ),
    Mutation(
        "instance-without-deletion-protection",
        "Terraform refuses to destroy the job store",
        f"{M}/cloudsql.tf",
        "  deletion_protection = var.postgres_deletion_protection\n",
        "  deletion_protection = false\n",
        (
            "test_the_instance_has_iam_authentication_tls_private_ip_backups_and_deletion_protection",
            "test_deletion_protection_is_on_by_default_and_pinned_in_prod",
        ),
        POLICY_TESTS,
    ),
    Mutation(
        "deletion-protection-default-off",
        "deletion protection is on unless an operator turns it off",
        f"{M}/variables.tf",
        'The prod root pins it to true."\n  type        = bool\n  default     = true',
        'The prod root pins it to true."\n  type        = bool\n  default     = false',
        (
            "test_the_instance_has_iam_authentication_tls_private_ip_backups_and_deletion_protection",
            "test_deletion_protection_is_on_by_default_and_pinned_in_prod",
        ),
        POLICY_TESTS,
    ),
    Mutation(
        "prod-deletion-protection-unpinned",
        "prod refuses to turn the job store's deletion protection off",
        "infra/envs/prod/main.tf",
        "  postgres_deletion_protection = true\n",
        "  postgres_deletion_protection = false\n",
        ("test_deletion_protection_is_on_by_default_and_pinned_in_prod",),
        POLICY_TESTS,
    ),
    Mutation(
        "no-cloudsql-client",
        "each function's account may connect to the instance (roles/cloudsql.client)",
        f"{M}/cloudsql.tf",
        'role    = "roles/cloudsql.client"',
        'role    = "roles/cloudsql.viewer"',
        (
            "test_every_function_logs_in_as_itself_on_this_instance_only",
            "test_each_function_account_holds_exactly_what_its_entry_point_needs_in_every_mode",
        ),
        POLICY_TESTS,
    ),
    Mutation(
        "cloudsql-client-any-instance",
        "the Cloud SQL roles are conditioned on this instance",
        f"{M}/cloudsql.tf",
        'description = "Connections to the safesend Cloud SQL instance, no other."\n    expression  = local.postgres_instance_condition',
        'description = "Connections to the safesend Cloud SQL instance, no other."\n    expression  = "true"',
        (
            "test_every_function_logs_in_as_itself_on_this_instance_only",
            "test_the_documented_gcloud_commands_create_what_the_module_creates",
        ),
        POLICY_TESTS + DOCS_TESTS,
    ),
    Mutation(
        "setup-sql-no-self-grant",
        "the admin running the setup SQL can create the schema for the owner role",
        f"{M}/cloudsql.tf",
        '    "GRANT safesend_owner TO CURRENT_USER;",\n',
        "",
        (
            "test_the_setup_sql_creates_the_owner_role_and_schema_and_grants_every_user",
            "test_the_setup_sql_lets_every_function_run_and_migrate_the_store_as_the_owner_role",
            "test_the_gcloud_path_renders_the_same_setup_sql_as_terraform",
            "test_the_documented_sql_is_the_modules_for_the_defaults",
        ),
        POLICY_TESTS + SETUP_TESTS + PARITY_TESTS + DOCS_TESTS,
    ),
    Mutation(
        "gcloud-setup-sql-misses-a-user",
        "the gcloud path's setup SQL grants every user Terraform would create",
        "infra/env_spec.py",
        """*(f'GRANT {POSTGRES_OWNER_ROLE} TO "{user}";' for user in users),""",
        """*(f'GRANT {POSTGRES_OWNER_ROLE} TO "{user}";' for user in users[:-1]),""",
        ("test_the_gcloud_path_renders_the_same_setup_sql_as_terraform",),
        PARITY_TESTS,
    ),
    Mutation(
        "readme-sql-misses-a-user",
        "the README's setup SQL is the module's",
        "infra/README.md",
        'GRANT safesend_owner TO "safesend-fn-sweep@P.iam";\n',
        "",
        ("test_the_documented_sql_is_the_modules_for_the_defaults",),
        DOCS_TESTS,
    ),
    Mutation(
        "readme-instance-without-iam-flag",
        "the README's gcloud instance has IAM database authentication",
        "infra/README.md",
        "--database-flags=cloudsql.iam_authentication=on,max_connections=100",
        "--database-flags=max_connections=100",
        ("test_the_documented_instance_is_one_the_gcloud_pipeline_accepts_and_the_module_would_create",),
        DOCS_TESTS,
    ),
    Mutation(
        "readme-without-client-role",
        "the README's gcloud commands grant both Cloud SQL roles",
        "infra/README.md",
        '  gcloud projects add-iam-policy-binding P --member="$(sa fn-$f)" --role=roles/cloudsql.client --condition="$cond"\n',
        "",
        ("test_the_documented_gcloud_commands_create_what_the_module_creates",),
        DOCS_TESTS,
    ),
    Mutation(
        "readme-built-in-user",
        "the README's gcloud users are IAM service-account users",
        "infra/README.md",
        "--type=cloud_iam_service_account",
        "--type=built_in",
        ("test_the_documented_gcloud_commands_create_what_the_module_creates",),
        DOCS_TESTS,
    ),
    Mutation(
        "instance-unencrypted-allowed",
        "the instance accepts TLS connections only",
        f"{M}/cloudsql.tf",
        'ssl_mode       = "ENCRYPTED_ONLY"',
        'ssl_mode       = "ALLOW_UNENCRYPTED_AND_ENCRYPTED"',
        ("test_the_instance_has_iam_authentication_tls_private_ip_backups_and_deletion_protection",),
        POLICY_TESTS,
    ),
    Mutation(
        "ssl-mode-typo",
        "the API's enums are checked on the Cloud SQL instance too",
        f"{M}/cloudsql.tf",
        'ssl_mode       = "ENCRYPTED_ONLY"',
        'ssl_mode       = "ENCRYPTED_ONY"',
        ("match_the_provider_schema[google_sql_database_instance.jobs]",),
        SCHEMA_TESTS,
    ),
    Mutation(
        "instance-public-ip-always",
        "no public IP unless operators ask for proxy access",
        f"{M}/cloudsql.tf",
        "ipv4_enabled    = var.postgres_proxy_public_ip",
        "ipv4_enabled    = true",
        ("test_the_instance_has_iam_authentication_tls_private_ip_backups_and_deletion_protection",),
        POLICY_TESTS,
    ),
    Mutation(
        "sql-user-built-in",
        "database users are the functions' IAM accounts, never built-in users",
        f"{M}/cloudsql.tf",
        'type     = "CLOUD_IAM_SERVICE_ACCOUNT"',
        'type     = "BUILT_IN"',
        (
            "test_every_function_logs_in_as_itself_on_this_instance_only",
            "test_runtime_configuration_combinations_in_every_mode",
        ),
        POLICY_TESTS,
    ),
    Mutation(
        "sql-admin-instead-of-login",
        "the accounts may log in to the database, nothing more",
        f"{M}/cloudsql.tf",
        'role    = "roles/cloudsql.instanceUser"',
        'role    = "roles/cloudsql.admin"',
        (
            "test_every_function_logs_in_as_itself_on_this_instance_only",
            "test_each_function_account_holds_exactly_what_its_entry_point_needs_in_every_mode",
        ),
        POLICY_TESTS,
    ),
    Mutation(
        "datastore-with-postgres",
        "no Firestore role when the store is PostgreSQL",
        f"{M}/iam.tf",
        'resource "google_project_iam_member" "send_datastore_user" {\n  count = local.postgres ? 0 : 1\n',
        'resource "google_project_iam_member" "send_datastore_user" {\n  count = 1\n',
        ("test_each_function_account_holds_exactly_what_its_entry_point_needs_in_every_mode",),
        POLICY_TESTS,
    ),
    Mutation(
        "pool-budget-unchecked",
        "the plan refuses pools that do not fit max_connections",
        f"{M}/cloudsql.tf",
        "condition     = local.postgres_connections_needed <= var.postgres_max_connections",
        "condition     = true",
        ("test_every_pool_fits_the_instance_and_the_plan_refuses_otherwise",),
        POLICY_TESTS,
    ),
    Mutation(
        "postgres-on-by-default",
        "Firestore stays the default",
        f"{M}/variables.tf",
        'default     = "firestore"',
        'default     = "postgres"',
        (
            "test_firestore_is_the_default_and_creates_nothing_of_the_postgres_store",
            "test_gcloud_substitution_defaults_are_the_terraform_variable_defaults",
        ),
        POLICY_TESTS + PARITY_TESTS,
    ),
    Mutation(
        "gcloud-without-direct-vpc",
        "the gcloud path deploys the functions into the job store's network",
        GCLOUD,
        '"$$secrets" "$${network[@]}"',
        '"$$secrets"',
        ("test_both_deploy_paths_give_every_function_the_same_configuration[postgres]",),
        PARITY_TESTS,
    ),
    Mutation(
        "gcloud-instance-unchecked",
        "the gcloud path refuses an instance without IAM database authentication",
        "infra/env_spec.py",
        'if flags.get("cloudsql.iam_authentication") != "on":',
        "if False:",
        (
            "test_the_gcloud_path_refuses_an_unfit_sql_instance[no-iam-authentication]",
            "test_the_gcloud_path_refuses_an_unfit_sql_instance[iam-authentication-off]",
        ),
        PARITY_TESTS,
    ),
    # ---- issue 23: what only real Terraform (or the real gcloud) refuses
    Mutation(
        "invalid-escape",
        "terraform parses the module (python-hcl2 accepted \\s, Terraform does not)",
        f"{M}/variables.tf",
        'can(regex("^[^@\\\\s]+@[^@\\\\s]+\\\\.[^@\\\\s]+$", var.gmail_delegated_user))',
        'can(regex("^[^@\\s]+@[^@\\s]+\\.[^@\\s]+$", var.gmail_delegated_user))',
        (
            "test_terraform_fmt_finds_nothing_to_change",
            "test_terraform_validate[module]",
            "test_terraform_validate[dev]",
        ),
        TERRAFORM_TESTS,
    ),
    Mutation(
        "missing-nested-attribute",
        "terraform validate reads references against the provider's real schema",
        f"{M}/outputs.tf",
        "send      = google_cloudfunctions2_function.send.service_config[0].uri",
        "send      = google_cloudfunctions2_function.send.service_config[0].url",
        ("test_terraform_validate[module]",),
        TERRAFORM_TESTS,
    ),
    Mutation(
        "for-each-wrong-type",
        "for_each must be a map or a set of strings",
        f"{M}/apis.tf",
        "for_each = local.required_apis",
        "for_each = tolist(local.required_apis)",
        ("test_terraform_validate[module]",),
        TERRAFORM_TESTS,
    ),
    Mutation(
        "count-on-unknown",
        "count must be known at plan time (terraform test plans it)",
        f"{M}/firestore.tf",
        "count = var.manage_firestore_database ? 1 : 0",
        'count = google_service_account.build.email != "" ? 1 : 0',
        ("test_terraform_test[module]", "test_terraform_test[dev]"),
        TERRAFORM_TESTS,
    ),
    Mutation(
        "precondition-never-holds",
        "terraform test plans every configuration, so an impossible precondition fails",
        f"{M}/tasks.tf",
        "condition     = var.reconcile_max_instances >= var.tasks_max_concurrent_dispatches",
        "condition     = var.reconcile_max_instances < 0",
        ("test_terraform_test[module]", "test_terraform_test[prod]"),
        TERRAFORM_TESTS,
    ),
    Mutation(
        "gcloud-flag-typo",
        "the real gcloud parses every command of the gcloud path",
        GCLOUD,
        "--ack-deadline=180 --min-retry-delay=10s",
        "--ack-deadline=180 --min-retry-dalay=10s",
        ("test_every_pipeline_command_fails_only_for_want_of_credentials",),
        GCLOUD_CLI_TESTS,
    ),
    # ---- issue 20: the alerts cannot go quiet unnoticed
    Mutation(
        "renamed-log-event",
        "a signal renamed in the code no longer matches its metric",
        "functions/safesend/core/signals.py",
        'SWEEP_COMPLETED = "sweep_completed"',
        'SWEEP_COMPLETED = "sweep_done"',
        (
            "test_the_captured_lines_are_the_code_s_signals_with_every_field",
            "test_every_metric_counts_a_signal_and_reads_only_its_fields[sweep_completed]",
        ),
        MONITORING_TESTS,
    ),
    Mutation(
        "log-filter-typo",
        "every log-based metric's filter matches a log line the code prints",
        f"{M}/monitoring.json",
        'jsonPayload.event=\\"gmail_refused\\"',
        'jsonPayload.event=\\"gmail_refusd\\"',
        ("test_every_metric_filter_matches_a_real_log_line[gmail_refused]",),
        MONITORING_TESTS,
    ),
    Mutation(
        "alert-without-documentation",
        "every alert carries its runbook",
        f"{M}/monitoring.tf",
        '  documentation {\n    subject   = "safesend ${var.name_prefix}: ${each.value.title}"\n'
        '    content   = replace(file("${path.module}/runbooks/${each.key}.md"), "{prefix}", var.name_prefix)\n'
        '    mime_type = "text/markdown"\n  }\n',
        "",
        ("test_every_alert_watches_a_declared_metric_and_has_its_runbook[sweep_missing]",),
        MONITORING_TESTS,
    ),
    Mutation(
        "absent-duration-too-short",
        "the dead man's switch waits at least 3 sweep intervals",
        f"{M}/monitoring.json",
        '"type": "absent", "metric": "sweep_completed", "sweeps": 3',
        '"type": "absent", "metric": "sweep_completed", "sweeps": 2',
        ("test_the_dead_man_s_switch_waits_three_sweep_intervals",),
        MONITORING_TESTS,
    ),
    Mutation(
        "index-lag-alert-fixed-threshold",
        "the index-lag alert fires past half the deployment's unknown window, not at a fixed 0.5 s",
        f"{M}/monitoring.json",
        '"scale": 1, "per_unknown_window": true',
        '"scale": 1, "per_unknown_window": false',
        ("test_the_index_lag_alert_fires_past_half_the_unknown_window_per_mailbox[300]",),
        MONITORING_TESTS,
    ),
    Mutation(
        "index-lag-field-renamed",
        "the index_lag metric reads a field its signal carries",
        "functions/safesend/core/signals.py",
        '("mailbox", "kind", "lag_s", "beyond_horizon")',
        '("mailbox", "kind", "lag", "beyond_horizon")',
        ("test_every_metric_counts_a_signal_and_reads_only_its_fields[index_lag]",),
        MONITORING_TESTS,
    ),
]

COPY = [
    "infra",
    "functions",
    "devstack",
    "tools",
    "cloudbuild.yaml",
    "cloudbuild-gcloud.yaml",
    "README.md",
    "pytest.ini",
]
FAILED = re.compile(r"^FAILED (\S+)", re.M)


def make_copy(dest: Path) -> Path:
    dest.mkdir(parents=True)
    for name in COPY:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", ".terraform", "*.pyc"))
        else:
            shutil.copy2(src, dest / name)
    (dest / "tests").mkdir()
    shutil.copy2(ROOT / "tests" / "__init__.py", dest / "tests" / "__init__.py")
    shutil.copytree(
        ROOT / "tests" / "infra",
        dest / "tests" / "infra",
        ignore=shutil.ignore_patterns("__pycache__", "test_mutations.py"),
    )
    (dest / ".venv-infra").symlink_to(ROOT / ".venv-infra")
    (dest / ".venv-tfplugin").symlink_to(ROOT / ".venv-tfplugin")
    return dest


def apply(mutation: Mutation, tree: Path) -> None:
    path = tree / mutation.file
    if mutation.old is None:
        assert not path.exists(), f"{mutation.name}: {mutation.file} exists already"
        path.write_text(mutation.new)
        return
    text = path.read_text()
    count = text.count(mutation.old)
    assert count == 1, f"{mutation.name}: expected the text once in {mutation.file}, found it {count} times"
    path.write_text(text.replace(mutation.old, mutation.new))


# What pytest's -k takes as one name (matched as a substring of each test's name, parameters included).
K_NAME = re.compile(r"[\w:+\-.\[\]\\/]+")


def keyword(needles) -> str:
    """A -k expression selecting the tests the needles name: a needle with its parameters
    (`test_x[reviewers]`, `test_y[keyless`) selects only those cases, not all of test_x's: the
    same nodes that can contain the needle, so the verdict is the same for a fraction of the CPU."""
    names = sorted({n if K_NAME.fullmatch(n) else re.sub(r"\[.*", "", n) for n in needles})
    return " or ".join(names)


def nested_env(tree: Path) -> dict[str, str]:
    """The environment of a pytest run in a copy."""
    # Outside the gate's coverage measurement (COVERAGE_PROCESS_CONFIG would start it in every run):
    # a scratch copy's infra checks measure nothing of functions/, and tracing made each run ~1.7x slower.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SAFESEND_", "COVERAGE_"))}
    # Only the plugin the infra checks use (pytest.ini's timeout): the autoloaded hypothesis and
    # schemathesis plugins cost each of the ~88 runs about a second of imports.
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    # The copies side by side share their .tf files' parses (keyed by the files' bytes).
    env[PARSE_CACHE] = str(tree.parent / "hcl-parses")
    env[SNAPSHOT_CACHE] = str(tree.parent / "schema-snapshots")
    return env


def nested_pytest(tree: Path) -> list[str]:
    """The start of a pytest command line run in a copy (its own pytest.ini and rootdir)."""
    return [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "pytest_timeout",
        "-p",
        "tests.infra.mutation_stop",
        "-q",
        "-p",
        "no:cacheprovider",
        "-c",
        str(tree / "pytest.ini"),
        "--rootdir",
        str(tree),
    ]


def compile_template(tree: Path, tests: tuple[str, ...], timeout: float = 600) -> None:
    """Collects `tests` in the copy as a nested run would: its test modules (assertions rewritten)
    and what they import are compiled once, for shared_bytecode to give the other copies. The
    outcome is not a verdict: the copy's own run (the baseline) reports any error of its checks."""
    subprocess.run(
        [*nested_pytest(tree), "--collect-only", *tests],
        cwd=tree,
        env=nested_env(tree),
        capture_output=True,
        timeout=timeout,
        check=False,
    )


def run_checks(
    tree: Path,
    tests: tuple[str, ...],
    needles: tuple[str, ...],
    stop: bool,
    timeout: float = 900,
    popen: Callable[..., Any] | None = None,
) -> tuple[set[str], str]:
    """The tests the needles name, run in the copy: (the failed test ids, the output's tail).
    stop: end the run once every needle names a failed test (the verdict is then made). A run
    that crashes reports no failed test; one past `timeout` is interrupted (SIGINT: its session
    fixtures stop their servers), killed 30 s later if need be, and reported as timed out.
    popen: how the run starts, subprocess.Popen's way (the default) or a zygote's (ZygotePool.popen)."""
    env = nested_env(tree)
    env[NEEDLES] = json.dumps(sorted(needles) if stop else [])
    proc = (popen or subprocess.Popen)(
        [
            *nested_pytest(tree),
            "-rf",
            "--no-header",
            # Each test may take the whole run's bound, not pytest.ini's 300 s: the suite runs niced
            # beside the gate's workers, and a fresh-clone gate starved the baseline's real
            # `terraform test` (~50 CPU-s) past 300 s. A hang is cut by the run's bound below (its
            # clock starts first, so it always fires before this one and reports TIMED OUT).
            "-o",
            f"timeout={timeout + 60:.0f}",
            "-k",
            keyword(needles),
            *tests,
        ],
        cwd=tree,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate(timeout=30)
        return set(), f"TIMED OUT after {timeout} s (not caught):\n{out[-4000:]}{err[-2000:]}"
    return set(FAILED.findall(out)), out[-4000:] + err[-2000:]


def uncaught(mutation: Mutation, failed: set[str]) -> list[str]:
    """The mutation's needles that name no failed test: empty when the checks caught it."""
    return [needle for needle in mutation.fails if not any(needle in node for node in failed)]


@pytest.fixture(scope="module")
def baseline_ids(request) -> list[str] | None:
    """The gate's list of the baseline's tests (tests/mutation_baseline.py), which its main suite
    leaves to this run; None when run alone: the baseline selects them itself, with -k."""
    path = request.config.getoption(mutation_baseline.OPTION)
    return mutation_baseline.read_ids(path) if path else None


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory, baseline_ids) -> dict[str, tuple[set[str], str]]:
    base = tmp_path_factory.mktemp("mutations")
    template = make_copy(base / "baseline")
    every_test = tuple(sorted({t for m in MUTATIONS for t in m.tests}))
    compile_template(template, every_test)
    jobs = {
        # every check runs and must pass: the gate's listed ids exactly (no -k), or the needles' tests
        "baseline": (template, tuple(baseline_ids), (), False)
        if baseline_ids
        else (template, every_test, tuple(n for m in MUTATIONS for n in m.fails), False)
    }
    broken = {}
    for mutation in MUTATIONS:
        tree = make_copy(base / mutation.name)
        try:
            apply(mutation, tree)
        except AssertionError as exc:  # reported by that mutation's test alone
            broken[mutation.name] = (set(), f"NOT APPLIED: {exc}")
            continue
        share_bytecode(template, tree)  # after apply: the mutated file is compiled from its own bytes
        jobs[mutation.name] = (tree, mutation.tests, mutation.fails, True)
    workers = max(2, min(4, (os.cpu_count() or 2)))
    # The runs fork from zygotes that imported pytest once (tests/infra/mutation_zygote.py): a new
    # interpreter per run spent ~0.8 of its ~2.7 CPU-s before collecting a test.
    zygotes = ZygotePool(nested_env(template), base / "zygote-runs")
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            futures = {name: pool.submit(run_checks, *job, popen=zygotes.popen) for name, job in jobs.items()}
            return {**broken, **{name: future.result() for name, future in futures.items()}}
    finally:
        zygotes.close()


# The first test pays for the module fixture: ~92 pytest runs in scratch copies (91 mutations + the baseline), 4 at a time.
@pytest.mark.timeout(1800)
def test_the_unmutated_copy_passes_every_check_the_mutations_use(outcomes, baseline_ids):
    failed, output = outcomes["baseline"]
    assert not failed and " passed" in output, output
    if baseline_ids:  # the gate's main suite did not run these: each one must have passed here
        assert baseline_verdict(output) == f"{len(baseline_ids)} passed", output


def baseline_verdict(output: str) -> str:
    """The counts of pytest's last summary line, without its time ("300 passed", "1 failed, 2 passed")."""
    found = SUMMARY.findall(output)
    return found[-1] if found else ""


SUMMARY = re.compile(r"^=* ?(\d+ \w+(?:, \d+ \w+)*) in [\d.]+s", re.M)


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.name)
def test_mutation_is_caught(mutation, outcomes):
    failed, output = outcomes[mutation.name]
    missing = uncaught(mutation, failed)
    assert not missing, (
        f"{mutation.name} ({mutation.proves}) was not caught by {missing}; failed: {sorted(failed)}\n{output}"
    )


def test_the_issue_10_mutations_are_all_here():
    names = {m.name for m in MUTATIONS}
    assert {
        "all-users-on-review",
        "push-without-oidc",
        "webhook-secret-on-send",
        "dev-identity-in-env",
        "missing-dead-letter",
        "iap-agent-not-invoker",
        "no-accessor-grant",
        "iap-audience-as-url",
        "console-url-http",
        "csrf-not-mounted",
        "empty-allowlist-allowed",
        "notify-ingress-all",
        "notify-accepts-tasks",
    } <= names


def test_the_issue_14_mutations_are_all_here():
    names = {m.name for m in MUTATIONS}
    assert {
        "dsn-with-password",
        "dsn-uri-with-password",
        "sslmode-disable",
        "iam-auth-off",
        "dsn-names-another-user",
        "instance-without-iam-flag",
        "instance-without-deletion-protection",
        "postgres-on-by-default",
        "gcloud-without-direct-vpc",
        "deletion-protection-default-off",
        "prod-deletion-protection-unpinned",
        "no-cloudsql-client",
        "cloudsql-client-any-instance",
        "setup-sql-no-self-grant",
        "gcloud-setup-sql-misses-a-user",
        "readme-sql-misses-a-user",
        "readme-instance-without-iam-flag",
        "readme-without-client-role",
        "readme-built-in-user",
    } <= names


def test_the_issue_23_mutations_are_all_here():
    names = {m.name for m in MUTATIONS}
    assert {
        "invalid-escape",
        "missing-nested-attribute",
        "for-each-wrong-type",
        "count-on-unknown",
        "precondition-never-holds",
        "gcloud-flag-typo",
    } <= names


def test_the_issue_21_mutations_are_all_here():
    names = {m.name for m in MUTATIONS}
    assert {"env-setting-typo", "env-setting-wrong-value", "env-parity-drift", "variables-doc-drift"} <= names


def test_the_issue_11_mutations_are_all_here():
    names = {m.name for m in MUTATIONS}
    assert {
        "attribute-typo",
        "number-as-word",
        "repository-format-typo",
        "database-type-typo",
        "scheduler-method-typo",
        "gcloud-extra-env-flag",
    } <= names
