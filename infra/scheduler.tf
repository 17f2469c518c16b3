# Periodic sweep: Cloud Scheduler POSTs {} to the sweep function with an OIDC
# token of the scheduler invoker. The audience is the function URL, which is
# what Cloud Run checks the token against.
resource "google_cloud_scheduler_job" "sweep" {
  project     = var.project_id
  region      = var.region
  name        = "${var.name_prefix}-sweep"
  description = "Triggers the safesend sweep function."
  schedule    = var.sweep_schedule
  time_zone   = var.scheduler_time_zone

  # Longer than the function's 120 s timeout so that a slow sweep is reported
  # as the function's own error rather than a Scheduler deadline.
  attempt_deadline = "180s"

  # No retry_config: a failed sweep is simply picked up by the next run in a
  # few minutes (the API default is 0 retries).

  http_target {
    http_method = "POST"
    uri         = google_cloudfunctions2_function.sweep.service_config[0].uri
    body        = base64encode("{}")
    headers = {
      "Content-Type" = "application/json"
    }

    oidc_token {
      service_account_email = local.scheduler_invoker_email
      audience              = google_cloudfunctions2_function.sweep.service_config[0].uri
    }
  }

  depends_on = [google_project_service.enabled]
}
