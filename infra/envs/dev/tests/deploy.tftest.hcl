# The dev environment as the README's deploy walk-through starts it: tests/infra runs
#   terraform test -var-file=terraform.tfvars.example
# so the example configuration is parsed, validated and planned by real Terraform against the
# pinned providers' real schemas (tools/tf_schema_provider; mock_provider for the values).

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

run "the_example_plans" {
  command = plan

  assert {
    condition     = output.send_url == "https://safesend-send-123456789012.${var.region}.run.app"
    error_message = "send_url is the deterministic run.app URL of the example's project and region."
  }
  assert {
    condition     = output.review_url == null && output.postgres_instance == null
    error_message = "The example starts without reviewers and with Firestore."
  }
}

run "keyless_delegation_plans" {
  command = plan

  variables {
    gmail_delegated_user = "support@example.com"
  }

  assert {
    condition     = output.gmail_credentials_secret == null
    error_message = "Keyless delegation needs no credentials secret."
  }
}

run "a_delegated_user_with_a_space_is_refused" {
  command = plan

  variables {
    gmail_delegated_user = "support team@example.com"
  }

  expect_failures = [var.gmail_delegated_user]
}

run "reviewers_and_postgres_plan" {
  command = plan

  variables {
    reviewers_enabled      = true
    review_iap_members     = ["group:mail-reviewers@example.com"]
    review_allowed_domains = ["example.com"]
    job_store              = "postgres"
  }

  assert {
    condition     = output.review_url == "https://safesend-review-123456789012.${var.region}.run.app"
    error_message = "reviewers_enabled: review_url is the console's run.app URL."
  }
}
