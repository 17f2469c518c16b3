# The reviewer side (notify + review console behind IAP) off and on, and each refusal.

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
  review_iap_members             = ["group:mail-reviewers@example.com"]
  review_allowed_domains         = ["example.com"]
  monitoring_notification_emails = ["ops@example.com"] # the alerts' channel (monitoring.tf)
}

run "off_by_default" {
  command = plan

  assert {
    condition     = length(google_cloudfunctions2_function.notify) == 0 && length(google_cloudfunctions2_function.review) == 0
    error_message = "notify and review exist only with reviewers_enabled."
  }
  assert {
    condition     = output.review_service == null && output.review_url == null
    error_message = "No console outputs without reviewers."
  }
}

run "on_deploys_notify_and_the_console_behind_iap" {
  variables {
    reviewers_enabled = true
  }

  # The account Google would create for the push subscription (the mock's email is random).
  override_resource {
    target = google_service_account.notify_push
    values = {
      email = "safesend-notify-push@p-test.iam.gserviceaccount.com"
    }
  }

  assert {
    condition     = length(google_cloudfunctions2_function.notify) == 1 && length(google_cloudfunctions2_function.review) == 1
    error_message = "reviewers_enabled deploys notify and review."
  }
  assert {
    condition     = output.review_service == google_cloudfunctions2_function.review[0].service_config[0].service
    error_message = "terraform output -raw review_service names the console's Cloud Run service (for --iap)."
  }
  assert {
    condition     = output.review_iap_audience == "/projects/123456789012/locations/europe-west1/services/safesend-review"
    error_message = "IAP's audience is the Cloud Run form with the project number."
  }
  assert {
    condition     = !strcontains(google_cloud_run_v2_service_iam_member.review_iap_invoker[0].member, "allUsers")
    error_message = "The console is never public."
  }
  assert {
    condition     = google_pubsub_subscription.notify_push[0].push_config[0].oidc_token[0].audience == output.notify_url
    error_message = "notify's push carries an OIDC token for notify's own URL."
  }
}

run "no_allowlist_is_refused" {
  command = plan

  variables {
    reviewers_enabled      = true
    review_allowed_domains = []
    review_allowed_emails  = []
  }

  expect_failures = [google_cloudfunctions2_function.review]
}

run "nobody_through_iap_is_refused" {
  command = plan

  variables {
    reviewers_enabled  = true
    review_iap_members = []
  }

  expect_failures = [google_cloudfunctions2_function.review]
}

run "a_malformed_iap_member_is_refused" {
  command = plan

  variables {
    reviewers_enabled  = true
    review_iap_members = ["mail-reviewers@example.com"]
  }

  expect_failures = [var.review_iap_members]
}

run "an_iap_audience_without_a_project_number_is_refused" {
  command = plan

  override_data {
    target = data.google_project.this
    values = {
      number = "not-a-number"
    }
  }

  variables {
    reviewers_enabled = true
  }

  expect_failures = [google_cloudfunctions2_function.review]
}
