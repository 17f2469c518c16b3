# Periodic sweep: Cloud Scheduler POSTs {} to sweep with an OIDC token of the
# scheduler-invoker service account. Target and audience are sweep's
# deterministic run.app URL: internal-only ingress admits Cloud Scheduler only
# on the run.app URL (see functions.tf), and the app checks the audience
# against SAFESEND_AUTH_AUDIENCES.
resource "google_cloud_scheduler_job" "sweep" {
  project     = var.project_id
  region      = var.region
  name        = "${var.name_prefix}-sweep"
  description = "Triggers the safesend sweep function."
  schedule    = var.sweep_schedule
  time_zone   = var.scheduler_time_zone

  # Longer than sweep's 120 s timeout, so a slow sweep is reported as the
  # function's error rather than a Scheduler deadline.
  attempt_deadline = "180s"

  # A failed sweep is not retried: the next run comes within minutes.
  retry_config {
    retry_count = 0
  }

  http_target {
    http_method = "POST"
    uri         = local.function_urls.sweep
    body        = base64encode("{}")
    headers = {
      "Content-Type" = "application/json"
    }

    oidc_token {
      service_account_email = google_service_account.scheduler_invoker.email
      audience              = local.function_urls.sweep
    }
  }

  # The job is useless (and noisy) until sweep exists and may be invoked.
  depends_on = [google_cloud_run_v2_service_iam_member.sweep_scheduler_invoker]
}
