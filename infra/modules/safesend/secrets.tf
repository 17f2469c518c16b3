# Terraform manages the secret containers and who may read each one, never the
# values: a value in Terraform would also sit in the state file. Add versions
# with `gcloud secrets versions add` (infra/README.md). The functions read the
# configured version when an instance starts, and Cloud Run refuses to deploy a
# revision whose secret has no version, so the first apply is in two steps.
# Which function mounts which secret, and when, is env_spec.json's "secrets".
#
# No secret ever holds a service-account key: Gmail domain-wide delegation is
# keyless (the functions' own accounts sign the delegation JWT through the IAM
# Credentials API, see iam.tf).

locals {
  gmail_keyless     = var.gmail_delegated_user != ""
  callbacks_enabled = length(var.callback_allowed_hosts) > 0
  # The functions sign delegation JWTs as themselves for today's delegated mailbox or for any
  # delegated mailbox of var.mailboxes (mailboxes.tf): one grant serves every delegated user.
  gmail_signs_jwt = local.gmail_keyless || local.mailbox_delegated

  # env_spec.json's secret_ids, resolved to the resources (null when not created).
  secret_ids = {
    gmail_credentials = one(google_secret_manager_secret.gmail_credentials[*].secret_id)
    webhook_hmac      = google_secret_manager_secret.webhook_hmac.secret_id
    api_keys          = one(google_secret_manager_secret.api_keys[*].secret_id)
    callback_hmac     = one(google_secret_manager_secret.callback_hmac[*].secret_id)

    notify_chat_webhook  = one(google_secret_manager_secret.notify_chat_webhook[*].secret_id)
    notify_slack_webhook = one(google_secret_manager_secret.notify_slack_webhook[*].secret_id)
    review_csrf          = one(google_secret_manager_secret.review_csrf[*].secret_id)

    cloudsql_server_ca = one(google_secret_manager_secret.cloudsql_server_ca[*].secret_id)
  }
}

# Gmail OAuth refresh token (an authorized-user JSON) of the sending mailbox:
# only without delegation (gmail_delegated_user = ""). Mounted as
# SAFESEND_GMAIL_CREDENTIALS_JSON on send, reconcile and sweep. Turning
# delegation on destroys this secret and its versions (state address [0]; an
# existing unindexed one is moved there by Terraform on its own).
resource "google_secret_manager_secret" "gmail_credentials" {
  count = local.gmail_keyless ? 0 : 1

  project   = var.project_id
  secret_id = "${var.name_prefix}-gmail-credentials"

  replication {
    auto {}
  }

  depends_on = [google_project_service.enabled]
}

# Shared secret for the X-Safesend-Signature HMAC header n8n may send (at
# least 32 bytes). Mounted as SAFESEND_AUTH_HMAC_SECRET on send and status.
resource "google_secret_manager_secret" "webhook_hmac" {
  project   = var.project_id
  secret_id = "${var.name_prefix}-webhook-hmac"

  replication {
    auto {}
  }

  depends_on = [google_project_service.enabled]
}

# API keys of the callers (`key_id:sha256hex` entries, never the keys), with
# public_callers only: the one credential an allUsers-invocable send/status
# checks besides the HMAC. Mounted as SAFESEND_AUTH_API_KEYS on send and status.
resource "google_secret_manager_secret" "api_keys" {
  count = var.public_callers ? 1 : 0

  project   = var.project_id
  secret_id = "${var.name_prefix}-api-keys"

  replication {
    auto {}
  }

  depends_on = [google_project_service.enabled]
}

# Signs callbacks to n8n (at least 32 bytes), only when callback_allowed_hosts
# is set. Mounted as SAFESEND_CALLBACK_HMAC_SECRET on send, reconcile, sweep.
resource "google_secret_manager_secret" "callback_hmac" {
  count = local.callbacks_enabled ? 1 : 0

  project   = var.project_id
  secret_id = "${var.name_prefix}-callback-hmac"

  replication {
    auto {}
  }

  depends_on = [google_project_service.enabled]
}

# ----------------------------------------------------------------- reviewers
# One secret per reviewer webhook target, each optional: the incoming-webhook
# URL is the credential (anyone holding it can post into the room), so it is a
# secret, mounted (SAFESEND_NOTIFY_CHAT_WEBHOOK_URL / SAFESEND_NOTIFY_SLACK_WEBHOOK_URL) on the
# functions that post notices, and readable by their accounts only: notify (the first post),
# reconcile and sweep (retries), review (a decision's answer in the thread). See env_spec.json.
resource "google_secret_manager_secret" "notify_chat_webhook" {
  count = local.reviewers_enabled && var.notify_chat_webhook ? 1 : 0

  project   = var.project_id
  secret_id = "${var.name_prefix}-notify-chat-webhook"

  replication {
    auto {}
  }

  depends_on = [google_project_service.enabled]
}

resource "google_secret_manager_secret" "notify_slack_webhook" {
  count = local.reviewers_enabled && var.notify_slack_webhook ? 1 : 0

  project   = var.project_id
  secret_id = "${var.name_prefix}-notify-slack-webhook"

  replication {
    auto {}
  }

  depends_on = [google_project_service.enabled]
}

# Signs the console's decision forms (CSRF tokens bound to the reviewer and the
# review entry; at least 32 bytes). Mounted as SAFESEND_REVIEW_CSRF_SECRET on
# review only; never a plain environment value.
resource "google_secret_manager_secret" "review_csrf" {
  count = local.reviewers_enabled ? 1 : 0

  project   = var.project_id
  secret_id = "${var.name_prefix}-review-csrf"

  replication {
    auto {}
  }

  depends_on = [google_project_service.enabled]
}

# ------------------------------------------------------------------ job store
# The Cloud SQL instance's server CA (job_store = "postgres"), which the functions verify the
# server with (sslmode=verify-ca, sslrootcert = this secret mounted as a file, env_spec.json's
# secret_files). Not a secret: a public certificate, and the one value Terraform writes into Secret
# Manager (so into the state), because a secret volume is the only way to hand a function a file.
# The instance's per-instance CA is valid for ten years; rotating it: infra/README.md.
resource "google_secret_manager_secret" "cloudsql_server_ca" {
  count = local.postgres ? 1 : 0

  project   = var.project_id
  secret_id = "${var.name_prefix}-cloudsql-server-ca"

  replication {
    auto {}
  }

  depends_on = [google_project_service.enabled]
}

resource "google_secret_manager_secret_version" "cloudsql_server_ca" {
  count = local.postgres ? 1 : 0

  secret      = google_secret_manager_secret.cloudsql_server_ca[0].id
  secret_data = google_sql_database_instance.jobs[0].server_ca_cert[0].cert
}
