# Gmail credentials (authorized-user token JSON or service-account key JSON).
# Terraform manages the secret container and who may read it, never the value:
# keeping the value out of Terraform keeps it out of the state file. Add it with
#   gcloud secrets versions add <prefix>-gmail-credentials --data-file=creds.json
# (see README). The functions load var.gmail_credentials_version (default
# "latest") at instance start-up, so a version must exist before the functions
# are first deployed.
resource "google_secret_manager_secret" "gmail_credentials" {
  project   = var.project_id
  secret_id = "${var.name_prefix}-gmail-credentials"

  replication {
    auto {}
  }

  depends_on = [google_project_service.enabled]
}
