# Issue 20: the metrics, alerts (each with its runbook), channels and dashboard, on by default and off.

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

run "on_by_default_every_alert_has_a_runbook" {
  command = plan

  variables {
    monitoring_notification_emails = ["ops@example.com"]
    monitoring_reviewer_emails     = ["reviewers@example.com"]
    monitoring_chat_space          = "spaces/AAAAops"
  }

  assert {
    condition     = length(google_logging_metric.signal) == 15 && length(google_monitoring_alert_policy.alert) == 19
    error_message = "One log-based metric per signal and every alert of monitoring.json."
  }
  assert {
    condition     = alltrue([for a in google_monitoring_alert_policy.alert : a.documentation[0].mime_type == "text/markdown" && length(a.documentation[0].content) > 200])
    error_message = "Every alert carries its runbook as markdown."
  }
  assert {
    condition     = google_monitoring_alert_policy.alert["sweep_missing"].conditions[0].condition_absent[0].duration == "900s"
    error_message = "The dead man's switch waits 3 sweep intervals (3 x 5 min)."
  }
  assert {
    condition     = google_monitoring_alert_policy.alert["jobs_overdue"].conditions[0].condition_threshold[0].threshold_value == 1800
    error_message = "Jobs overdue: 30 minutes by default."
  }
  assert {
    condition     = length(google_monitoring_notification_channel.chat) == 1 && google_monitoring_notification_channel.chat[0].type == "google_chat"
    error_message = "A Google Chat space gets a Cloud Monitoring google_chat channel."
  }
  assert {
    condition     = length(google_monitoring_dashboard.safesend) == 1
    error_message = "A dashboard."
  }
  assert {
    condition     = google_monitoring_alert_policy.alert["index_lag_high"].conditions[0].condition_threshold[0].threshold_value == 150
    error_message = "The index-lag alert fires past half the unknown window (300 s by default)."
  }
}

run "thresholds_and_sweep_interval_follow_the_environment" {
  command = plan

  variables {
    sweep_schedule         = "*/2 * * * *"
    monitoring_thresholds  = { overdue_minutes = 10 }
    unknown_window_seconds = 60
  }

  assert {
    condition     = google_monitoring_alert_policy.alert["sweep_missing"].conditions[0].condition_absent[0].duration == "360s"
    error_message = "3 intervals of a 2-minute schedule."
  }
  assert {
    condition     = google_monitoring_alert_policy.alert["jobs_overdue"].conditions[0].condition_threshold[0].threshold_value == 600
    error_message = "A per-environment threshold overrides the default."
  }
  assert {
    condition     = google_monitoring_alert_policy.alert["oldest_review"].conditions[0].condition_threshold[0].threshold_value == 86400
    error_message = "Thresholds not overridden keep monitoring.json's defaults."
  }
  assert {
    condition     = google_monitoring_alert_policy.alert["index_lag_high"].conditions[0].condition_threshold[0].threshold_value == 30
    error_message = "The index-lag alert follows the environment's unknown window (half of it)."
  }
}

run "alerts_without_a_channel_are_refused" {
  command = plan

  variables {
    monitoring_notification_emails = []
    monitoring_reviewer_emails     = ["reviewers@example.com"] # duplicates only: not an operations channel
  }

  expect_failures = [google_project_service.monitoring]
}

run "slack_without_its_token_is_refused" {
  command = plan

  variables {
    monitoring_notification_emails = []
    monitoring_slack_channel       = "#ops"
  }

  expect_failures = [google_project_service.monitoring]
}

run "a_chat_space_alone_is_a_channel" {
  command = plan

  variables {
    monitoring_notification_emails = []
    monitoring_chat_space          = "spaces/AAAAops"
  }

  assert {
    condition     = alltrue([for a in google_monitoring_alert_policy.alert : length(a.notification_channels) == 1])
    error_message = "Every alert goes to the one channel there is."
  }
}

run "off" {
  command = plan

  variables {
    monitoring_enabled             = false
    monitoring_notification_emails = []
  }

  assert {
    condition     = length(google_logging_metric.signal) == 0 && length(google_monitoring_alert_policy.alert) == 0 && length(google_monitoring_dashboard.safesend) == 0 && length(google_monitoring_notification_channel.email) == 0
    error_message = "monitoring_enabled = false creates no monitoring resource (and needs no channel)."
  }
}

# SAFESEND_SWEEP_INTERVAL_S follows sweep_schedule on every function, as the dead man's switch: /health
# and the console's Health page call the sweep late after 3 intervals, so a fixed 300 s would cry wolf
# before every */15 sweep and keep quiet for 15 minutes on a * * * * * schedule.

run "every_minute_is_60_seconds_everywhere" {
  command = plan

  variables {
    sweep_schedule         = "* * * * *"
    reviewers_enabled      = true
    review_iap_members     = ["group:mail-reviewers@example.com"]
    review_allowed_domains = ["example.com"]
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
    sweep_schedule         = "*/15 * * * *"
    reviewers_enabled      = true
    review_iap_members     = ["group:mail-reviewers@example.com"]
    review_allowed_domains = ["example.com"]
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
