# The dev environment as the README's deploy walk-through starts it: tests/infra runs
#   terraform test -var-file=terraform.tfvars.example
# so dev's module call and its example inputs are parsed, validated and planned by real Terraform
# against the pinned providers' real schemas (tools/tf_schema_provider; mock_provider for the
# values). The module's own behaviour is tested beside it (modules/safesend/tests); which settings
# each environment may set, by tests/infra/test_env_settings.py.

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
    condition     = output.safesend.send_url == "https://safesend-send-123456789012.${var.region}.run.app"
    error_message = "send_url is the deterministic run.app URL of the example's project and region."
  }
  assert {
    condition     = output.safesend.review_url == null && output.safesend.postgres_instance == null
    error_message = "The example starts without reviewers and with Firestore."
  }
}

run "the_region_input_reaches_the_module" {
  command = plan

  variables {
    region = "europe-west1"
  }

  assert {
    condition     = output.safesend.send_url == "https://safesend-send-123456789012.europe-west1.run.app"
    error_message = "The environment passes its region input to the module."
  }
}
