# The module planned by real Terraform against the real provider schemas (served offline by
# tools/tf_schema_provider; mock_provider makes up the computed values): decisions by API
# (POST /decide, SAFESEND_API_DECIDERS) are off by default, reach send alone when set, and a
# malformed entry is refused at plan time.

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

run "off_by_default" {
  command = plan

  assert {
    condition = alltrue([for fn in [google_cloudfunctions2_function.send, google_cloudfunctions2_function.status, google_cloudfunctions2_function.reconcile, google_cloudfunctions2_function.sweep] :
      !contains(keys(fn.service_config[0].environment_variables), "SAFESEND_API_DECIDERS")
    ])
    error_message = "Without api_deciders no function has SAFESEND_API_DECIDERS (decisions by API off)."
  }
}

run "deciders_reach_send_only" {
  command = plan

  variables {
    public_callers = true
    api_deciders   = ["key:n8n-prod", "hmac", "n8n@other-proj.iam.gserviceaccount.com"]
  }

  assert {
    condition     = google_cloudfunctions2_function.send.service_config[0].environment_variables["SAFESEND_API_DECIDERS"] == "key:n8n-prod,hmac,n8n@other-proj.iam.gserviceaccount.com"
    error_message = "send (which serves POST /decide) gets api_deciders as SAFESEND_API_DECIDERS."
  }
  assert {
    condition = alltrue([for fn in [google_cloudfunctions2_function.status, google_cloudfunctions2_function.reconcile, google_cloudfunctions2_function.sweep] :
      !contains(keys(fn.service_config[0].environment_variables), "SAFESEND_API_DECIDERS")
    ])
    error_message = "Only send serves POST /decide: no other function gets SAFESEND_API_DECIDERS."
  }
}

run "a_malformed_decider_is_refused" {
  command = plan

  variables {
    api_deciders = ["hmac", "key:N8N Prod"]
  }

  expect_failures = [var.api_deciders]
}

run "a_user_email_is_refused" {
  command = plan

  variables {
    api_deciders = ["ann@example.com"]
  }

  expect_failures = [var.api_deciders]
}
