# One runtime identity per function, each granted only what its entry point
# does (iam.tf), plus the identities whose OIDC tokens reach the functions.

resource "google_service_account" "send" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-fn-send"
  display_name = "safesend send function"
  description  = "Runtime of send: Firestore jobs, Gmail (secret), enqueue reconcile tasks, publish review items."

  depends_on = [google_project_service.enabled]
}

resource "google_service_account" "reconcile" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-fn-reconcile"
  display_name = "safesend reconcile function"
  description  = "Runtime of reconcile: Firestore jobs, Gmail (secret), re-enqueue follow-up checks, publish review items."

  depends_on = [google_project_service.enabled]
}

resource "google_service_account" "sweep" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-fn-sweep"
  display_name = "safesend sweep function"
  description  = "Runtime of sweep: Firestore jobs, Gmail (secret) for due retries, enqueue reconcile tasks, publish review items."

  depends_on = [google_project_service.enabled]
}

resource "google_service_account" "status" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-fn-status"
  display_name = "safesend status function"
  description  = "Runtime of status: reads Firestore jobs."

  depends_on = [google_project_service.enabled]
}

# The reviewer side (reviewers_enabled): notify posts review items to the
# reviewers' channels (and may email them through the send path); review is the
# console where a person decides (a resend goes through the send path too).
resource "google_service_account" "notify" {
  count = local.reviewers_enabled ? 1 : 0

  project      = var.project_id
  account_id   = "${var.name_prefix}-fn-notify"
  display_name = "safesend notify function"
  description  = "Runtime of notify: Firestore jobs, reviewer webhooks (secrets), reviewer emails through the send path."

  depends_on = [google_project_service.enabled]
}

resource "google_service_account" "review" {
  count = local.reviewers_enabled ? 1 : 0

  project      = var.project_id
  account_id   = "${var.name_prefix}-fn-review"
  display_name = "safesend review console"
  description  = "Runtime of the review console (behind IAP): Firestore jobs, decisions, resends through the send path."

  depends_on = [google_project_service.enabled]
}

# Whose OIDC token the Pub/Sub push subscription attaches to notify calls. It
# holds roles/run.invoker on notify and nothing else.
resource "google_service_account" "notify_push" {
  count = local.reviewers_enabled ? 1 : 0

  project      = var.project_id
  account_id   = "${var.name_prefix}-notify-push"
  display_name = "safesend notify push identity"
  description  = "OIDC identity of the Pub/Sub push subscription to the safesend notify function."

  depends_on = [google_project_service.enabled]
}

# Whose OIDC token Cloud Tasks attaches to reconcile calls. The functions that
# create tasks hold iam.serviceAccountUser on this account only.
resource "google_service_account" "tasks_invoker" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-tasks-invoker"
  display_name = "safesend Cloud Tasks invoker"
  description  = "OIDC identity of Cloud Tasks requests to the safesend reconcile function."

  depends_on = [google_project_service.enabled]
}

# Whose OIDC token Cloud Scheduler attaches to sweep calls.
resource "google_service_account" "scheduler_invoker" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-scheduler-invoker"
  display_name = "safesend Cloud Scheduler invoker"
  description  = "OIDC identity of Cloud Scheduler requests to the safesend sweep function."

  depends_on = [google_project_service.enabled]
}

# Identity n8n uses to obtain ID tokens for send and status.
resource "google_service_account" "n8n_invoker" {
  count = var.create_n8n_invoker_service_account ? 1 : 0

  project      = var.project_id
  account_id   = "${var.name_prefix}-n8n-invoker"
  display_name = "safesend n8n invoker"
  description  = "Used by n8n to call the safesend send and status functions with a Google ID token."

  depends_on = [google_project_service.enabled]
}

locals {
  reviewers_enabled = var.reviewers_enabled

  n8n_invoker_email = var.create_n8n_invoker_service_account ? google_service_account.n8n_invoker[0].email : null

  # Service accounts whose ID tokens send and status accept (run.invoker on
  # both, and SAFESEND_AUTH_CALLER_SERVICE_ACCOUNTS). Keys must be known at
  # plan time, so the generated account is keyed by a fixed label.
  caller_members = merge(
    var.create_n8n_invoker_service_account ? { "n8n-invoker" = "serviceAccount:${google_service_account.n8n_invoker[0].email}" } : {},
    { for email in var.extra_caller_service_accounts : email => "serviceAccount:${email}" },
  )
  caller_emails = compact(concat([local.n8n_invoker_email], var.extra_caller_service_accounts))

  internal_invoker_emails = [
    google_service_account.tasks_invoker.email,
    google_service_account.scheduler_invoker.email,
  ]
}
