# Terraform manages the secret containers and who may read each one, never the
# values: a value in Terraform would also sit in the state file. Add versions
# with `gcloud secrets versions add` (infra/README.md). The functions read the
# configured version when an instance starts, and Cloud Run refuses to deploy a
# revision whose secret has no version, so the first apply is in two steps.

# Gmail credentials: an authorized-user token JSON or a service-account key
# JSON (domain-wide delegation). Mounted as SAFESEND_GMAIL_CREDENTIALS_JSON on
# send, reconcile and sweep (the functions that call Gmail).
resource "google_secret_manager_secret" "gmail_credentials" {
  project   = var.project_id
  secret_id = "${var.name_prefix}-gmail-credentials"

  replication {
    auto {}
  }

  depends_on = [google_project_service.enabled]
}

# Shared secret for the X-Safesend-Signature HMAC header n8n may send instead
# of an ID token (at least 32 bytes). Mounted as SAFESEND_AUTH_HMAC_SECRET on
# send and status (the functions n8n calls).
resource "google_secret_manager_secret" "webhook_hmac" {
  project   = var.project_id
  secret_id = "${var.name_prefix}-webhook-hmac"

  replication {
    auto {}
  }

  depends_on = [google_project_service.enabled]
}
