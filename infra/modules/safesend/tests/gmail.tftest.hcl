# Keyless domain-wide delegation vs one mailbox's OAuth token (README, deploy step 2).

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

run "token_needs_the_credentials_secret" {
  assert {
    condition     = length(google_secret_manager_secret.gmail_credentials) == 1 && output.gmail_credentials_secret != null
    error_message = "Without delegation the OAuth token lives in the gmail-credentials secret."
  }
  assert {
    condition     = length(output.gmail_delegation_client_ids) == 0
    error_message = "No client IDs to authorise without delegation."
  }
}

run "keyless_delegation_has_no_secret_and_three_client_ids" {
  variables {
    gmail_delegated_user = "support@example.com"
  }

  assert {
    condition     = length(google_secret_manager_secret.gmail_credentials) == 0 && output.gmail_credentials_secret == null
    error_message = "Keyless delegation: no credentials secret at all."
  }
  assert {
    condition     = toset(keys(output.gmail_delegation_client_ids)) == toset(["send", "reconcile", "sweep"])
    error_message = "terraform output gmail_delegation_client_ids lists send, reconcile and sweep."
  }
  assert {
    condition     = google_service_account_iam_member.send_signs_own_jwt[0].member == "serviceAccount:${google_service_account.send.email}"
    error_message = "send signs its delegation JWT as itself."
  }
}

run "delegated_user_with_a_space_is_refused" {
  command = plan

  variables {
    gmail_delegated_user = "support team@example.com"
  }

  expect_failures = [var.gmail_delegated_user]
}
