# Identity-Aware Proxy in front of the review console (reviewers_enabled), enabled
# directly on the console's Cloud Run service (no load balancer):
# cloud.google.com/run/docs/securing/identity-aware-proxy-cloud-run. IAP signs
# each request it lets through with an assertion whose audience is
# /projects/<number>/locations/<region>/services/<service>
# (SAFESEND_REVIEW_IAP_AUDIENCE; the app verifies it and its own allowlist).
#
# What Terraform manages here: the IAP API (apis.tf), the IAP service agent
# (created explicitly, like the Pub/Sub agent), its roles/run.invoker on the
# console (iam.tf), and who IAP lets through (roles/iap.httpsResourceAccessor on
# that service, below). What it cannot: switching IAP on for the service. The
# console is a Cloud Functions (gen2) function, whose Cloud Run service belongs
# to Cloud Functions; google 8.7.0 has `iap_enabled` only on
# google_cloud_run_v2_service (a service Terraform would own and deploy itself)
# and nothing on google_cloudfunctions2_function. So IAP is switched on with
# `gcloud beta run services update <prefix>-review --region=R --iap` once after
# the first apply (infra/README.md; cloudbuild-gcloud.yaml does it on every
# deploy). Until then nobody reaches the console: only the IAP agent may invoke
# it, and the app refuses every request without a valid IAP assertion.

# The IAP service agent (service-<number>@gcp-sa-iap.iam.gserviceaccount.com)
# may not exist right after the API is enabled: created explicitly (Service
# Usage generateServiceIdentity; google-beta only), its email read from the
# answer, and the grant waits until IAM knows it.
resource "google_project_service_identity" "iap" {
  provider = google-beta
  count    = local.reviewers_enabled ? 1 : 0

  project = var.project_id
  service = "iap.googleapis.com"

  depends_on = [google_project_service.enabled]
}

resource "time_sleep" "iap_agent" {
  count = local.reviewers_enabled ? 1 : 0

  create_duration = "30s"

  triggers = {
    member = google_project_service_identity.iap[0].member
  }
}

locals {
  # Read through the sleep, so the invoker grant waits for it.
  iap_service_agent = local.reviewers_enabled ? time_sleep.iap_agent[0].triggers["member"] : null
}

# The reviewers: IAP admits exactly these principals to the console (a Google
# group is easiest to maintain). Never allUsers or allAuthenticatedUsers
# (var.review_iap_members accepts user:, group:, domain: only).
resource "google_iap_web_cloud_run_service_iam_member" "review_accessors" {
  for_each = local.reviewers_enabled ? toset(var.review_iap_members) : toset([])

  project                = var.project_id
  location               = var.region
  cloud_run_service_name = google_cloudfunctions2_function.review[0].service_config[0].service
  role                   = "roles/iap.httpsResourceAccessor"
  member                 = each.value
}
