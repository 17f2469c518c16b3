# The prod environment as the README's deploy walk-through starts it: tests/infra runs
#   terraform test -var-file=terraform.tfvars.example
# so prod's module call and its example inputs are parsed, validated and planned by real Terraform
# against the pinned providers' real schemas (tools/tf_schema_provider; mock_provider for the
# values, the project number overridden). The module's own behaviour is tested beside it
# (modules/safesend/tests); which settings each environment may set, by
# tests/infra/test_env_settings.py.

mock_provider "google" {}
mock_provider "google-beta" {}
mock_provider "archive" {}
mock_provider "time" {}

override_data {
  target = module.safesend.data.google_project.this
  values = { number = "210987654321" }
}

run "the_example_plans_with_the_default_region" {
  command = plan

  assert {
    condition     = output.safesend.send_url == "https://safesend-send-210987654321.us-central1.run.app"
    error_message = "send_url is the deterministic run.app URL of the example's project, in us-central1."
  }
  assert {
    condition     = output.safesend.postgres_instance == null && output.safesend.review_url == null
    error_message = "The example starts with Firestore and without reviewers."
  }
}
