# SAFESEND_SWEEP_INTERVAL_S follows sweep_schedule on every function: /health and the console's
# Health page call the sweep late after 3 intervals, so a fixed 300 s would cry wolf before every
# */15 sweep and keep quiet for 15 minutes on a * * * * * schedule.

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
  reviewers_enabled              = true
  monitoring_notification_emails = ["ops@example.com"] # the alerts' channel (monitoring.tf)
}

run "every_minute_is_60_seconds_everywhere" {
  command = plan

  variables {
    sweep_schedule = "* * * * *"
  }

  assert {
    condition = alltrue([for env in [
      google_cloudfunctions2_function.send.service_config[0].environment_variables,
      google_cloudfunctions2_function.reconcile.service_config[0].environment_variables,
      google_cloudfunctions2_function.sweep.service_config[0].environment_variables,
      google_cloudfunctions2_function.status.service_config[0].environment_variables,
      google_cloudfunctions2_function.notify[0].service_config[0].environment_variables,
      google_cloudfunctions2_function.review[0].service_config[0].environment_variables,
    ] : lookup(env, "SAFESEND_SWEEP_INTERVAL_S", "") == "60"])
    error_message = "Every function (the console's Health page too) counts a sweep late after 3 minutes."
  }
}

run "every_fifteen_minutes_is_900_seconds" {
  command = plan

  variables {
    sweep_schedule = "*/15 * * * *"
  }

  assert {
    condition     = lookup(google_cloudfunctions2_function.review[0].service_config[0].environment_variables, "SAFESEND_SWEEP_INTERVAL_S", "") == "900" && lookup(google_cloudfunctions2_function.status.service_config[0].environment_variables, "SAFESEND_SWEEP_INTERVAL_S", "") == "900"
    error_message = "A healthy */15 schedule is not late before its next sweep."
  }
}

run "the_default_schedule_is_300_seconds" {
  command = plan

  assert {
    condition     = lookup(google_cloudfunctions2_function.send.service_config[0].environment_variables, "SAFESEND_SWEEP_INTERVAL_S", "") == "300"
    error_message = "*/5 * * * * is 300 s."
  }
}

run "a_schedule_without_a_fixed_interval_is_refused" {
  command = plan

  variables {
    sweep_schedule = "0 * * * *"
  }

  expect_failures = [var.sweep_schedule]
}

run "a_zero_step_is_refused" {
  command = plan

  variables {
    sweep_schedule = "*/0 * * * *"
  }

  expect_failures = [var.sweep_schedule]
}
