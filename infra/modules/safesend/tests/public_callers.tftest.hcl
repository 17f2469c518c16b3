# The module planned and applied by real Terraform against the real provider schemas (served
# offline by tools/tf_schema_provider; mock_provider makes up the computed values): who may call
# send and status, and the URLs callers are given.

mock_provider "google" {
  mock_data "google_project" {
    defaults = {
      number = "123456789012"
    }
  }
}
mock_provider "google-beta" {}
mock_provider "archive" {}
mock_provider "time" {}

variables {
  project_id                     = "p-test"
  region                         = "europe-west1"
  message_id_domain              = "mail.example.com"
  default_from                   = "Support <support@example.com>"
  monitoring_notification_emails = ["ops@example.com"] # the alerts' channel (monitoring.tf)
}

run "iam_callers_only_by_default" {
  command = plan

  assert {
    condition     = length(google_cloud_run_v2_service_iam_member.send_public) == 0 && length(google_cloud_run_v2_service_iam_member.status_public) == 0
    error_message = "allUsers must not invoke send or status without public_callers."
  }
  assert {
    condition     = google_cloudfunctions2_function.send.service_config[0].environment_variables["SAFESEND_AUTH_TRUST_CLOUD_RUN_IAM"] == "true"
    error_message = "Behind IAM, send trusts Cloud Run's check of the ID token."
  }
  assert {
    condition     = length(google_secret_manager_secret.api_keys) == 0
    error_message = "No API keys secret without public_callers."
  }
  assert {
    condition     = output.send_url == "https://safesend-send-123456789012.europe-west1.run.app" && output.status_url == "https://safesend-status-123456789012.europe-west1.run.app"
    error_message = "send_url / status_url are the deterministic run.app URLs."
  }
}

run "public_callers_let_all_users_in_and_never_trust_iam" {
  command = plan

  variables {
    public_callers = true
  }

  assert {
    condition     = one(google_cloud_run_v2_service_iam_member.send_public[*].member) == "allUsers" && one(google_cloud_run_v2_service_iam_member.status_public[*].member) == "allUsers"
    error_message = "public_callers: allUsers invokes send and status."
  }
  assert {
    condition = alltrue([for fn in [google_cloudfunctions2_function.send, google_cloudfunctions2_function.status] :
      fn.service_config[0].environment_variables["SAFESEND_AUTH_TRUST_CLOUD_RUN_IAM"] == "false"
      && fn.service_config[0].environment_variables["SAFESEND_PUBLIC_INVOKER"] == "true"
    ])
    error_message = "A public function must never trust a stripped ID token."
  }
  assert {
    condition     = length(google_secret_manager_secret.api_keys) == 1
    error_message = "public_callers needs the API keys secret."
  }
  assert {
    condition     = google_cloud_run_v2_service_iam_member.reconcile_tasks_invoker.member != "allUsers"
    error_message = "reconcile stays internal."
  }
}

run "nobody_could_call_send" {
  command = plan

  variables {
    create_n8n_invoker_service_account = false
    extra_caller_service_accounts      = []
    public_callers                     = false
  }

  expect_failures = [google_cloudfunctions2_function.send]
}

run "reconcile_slower_than_the_queue_is_refused" {
  command = plan

  variables {
    reconcile_max_instances         = 2
    tasks_max_concurrent_dispatches = 4
  }

  expect_failures = [google_cloud_tasks_queue.reconcile]
}

run "outputs_after_apply" {
  assert {
    condition     = output.tasks_queue != null && output.webhook_hmac_secret != null && output.functions_source_object != null
    error_message = "The outputs infra/README.md names exist after apply."
  }
  assert {
    condition     = output.review_service == null && output.postgres_setup_sql == null
    error_message = "Reviewer and PostgreSQL outputs are null when those are off."
  }
}
