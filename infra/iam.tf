# -----------------------------------------------------------------------------
# Service accounts
# -----------------------------------------------------------------------------

# Identity all four functions run as. Gets only what the code touches.
resource "google_service_account" "runtime" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-runtime"
  display_name = "safesend functions runtime"
  description  = "Runs the safesend Cloud Functions (Firestore, Pub/Sub publish, Cloud Tasks enqueue, Gmail secret)."

  depends_on = [google_project_service.enabled]
}

# Identity whose OIDC token Cloud Tasks attaches when calling reconcile.
# Separate from the runtime SA so that "may call reconcile" is not implied by
# "is the runtime".
resource "google_service_account" "tasks_invoker" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-tasks-invoker"
  display_name = "safesend Cloud Tasks invoker"
  description  = "OIDC identity of Cloud Tasks requests to the safesend reconcile function."

  depends_on = [google_project_service.enabled]
}

# Identity whose OIDC token Cloud Scheduler attaches when calling sweep
# (optional: the tasks invoker can be reused, see scheduler_uses_tasks_invoker).
resource "google_service_account" "scheduler_invoker" {
  count = var.scheduler_uses_tasks_invoker ? 0 : 1

  project      = var.project_id
  account_id   = "${var.name_prefix}-scheduler-invoker"
  display_name = "safesend Cloud Scheduler invoker"
  description  = "OIDC identity of Cloud Scheduler requests to the safesend sweep function."

  depends_on = [google_project_service.enabled]
}

# Identity n8n uses to obtain ID tokens for send/status.
resource "google_service_account" "n8n_invoker" {
  count = var.create_n8n_invoker_service_account ? 1 : 0

  project      = var.project_id
  account_id   = "${var.name_prefix}-n8n-invoker"
  display_name = "safesend n8n invoker"
  description  = "Used by n8n to call the safesend send and status functions with an ID token."

  depends_on = [google_project_service.enabled]
}

# Identity Cloud Build uses to turn the source zip into the function images.
# A dedicated account avoids depending on the default compute/Cloud Build
# service accounts, whose permissions vary between projects (and are often
# stripped by the iam.automaticIamGrantsForDefaultServiceAccounts policy).
resource "google_service_account" "build" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-build"
  display_name = "safesend function builder"
  description  = "Builds the safesend Cloud Functions images."

  depends_on = [google_project_service.enabled]
}

locals {
  scheduler_invoker_email = var.scheduler_uses_tasks_invoker ? google_service_account.tasks_invoker.email : google_service_account.scheduler_invoker[0].email
  n8n_invoker_email       = var.create_n8n_invoker_service_account ? google_service_account.n8n_invoker[0].email : null
}

# -----------------------------------------------------------------------------
# Runtime service account permissions
# -----------------------------------------------------------------------------

# Firestore read/write of job documents. There is no narrower-than-project
# grant for Firestore data access.
resource "google_project_iam_member" "runtime_datastore_user" {
  project = var.project_id
  role    = "roles/datastore.user"
  member  = "serviceAccount:${google_service_account.runtime.email}"
}

# Publish review requests - on the one topic only.
resource "google_pubsub_topic_iam_member" "runtime_review_publisher" {
  project = var.project_id
  topic   = google_pubsub_topic.review.name
  role    = "roles/pubsub.publisher"
  member  = "serviceAccount:${google_service_account.runtime.email}"
}

# Create reconcile tasks - on the one queue only.
resource "google_cloud_tasks_queue_iam_member" "runtime_enqueuer" {
  project  = var.project_id
  location = google_cloud_tasks_queue.reconcile.location
  name     = google_cloud_tasks_queue.reconcile.name
  role     = "roles/cloudtasks.enqueuer"
  member   = "serviceAccount:${google_service_account.runtime.email}"
}

# Creating a task whose oidc_token names the tasks invoker requires
# iam.serviceAccounts.actAs on that account.
resource "google_service_account_iam_member" "runtime_acts_as_tasks_invoker" {
  service_account_id = google_service_account.tasks_invoker.name
  role               = "roles/iam.serviceAccountUser"
  member             = "serviceAccount:${google_service_account.runtime.email}"
}

# Read the Gmail credentials - that secret only. Must exist before the
# functions deploy: Cloud Run checks secret access when creating a revision.
resource "google_secret_manager_secret_iam_member" "runtime_gmail_credentials" {
  project   = var.project_id
  secret_id = google_secret_manager_secret.gmail_credentials.secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.runtime.email}"
}

# -----------------------------------------------------------------------------
# Build service account permissions (as documented for a custom build SA of
# Cloud Functions: write logs, push images, read the staged source).
# -----------------------------------------------------------------------------

resource "google_project_iam_member" "build" {
  for_each = toset([
    "roles/logging.logWriter",
    "roles/artifactregistry.writer",
    "roles/storage.objectAdmin",
  ])

  project = var.project_id
  role    = each.value
  member  = "serviceAccount:${google_service_account.build.email}"
}

# -----------------------------------------------------------------------------
# n8n invoker
# -----------------------------------------------------------------------------

# Lets the n8n invoker mint ID tokens for itself through the IAM Credentials
# API (generateIdToken) when n8n holds only an OAuth access token for it - see
# README "How n8n gets an ID token". Scoped to the account itself.
resource "google_service_account_iam_member" "n8n_self_id_token" {
  count = var.create_n8n_invoker_service_account ? 1 : 0

  service_account_id = google_service_account.n8n_invoker[0].name
  role               = "roles/iam.serviceAccountOpenIdTokenCreator"
  member             = "serviceAccount:${google_service_account.n8n_invoker[0].email}"
}

# -----------------------------------------------------------------------------
# Who may invoke which function. Requests to gen2 functions are authorised by
# Cloud Run, so the grant is roles/run.invoker on the service behind each
# function. Nothing is public.
# -----------------------------------------------------------------------------

locals {
  # Keys must be known at plan time, so members of accounts created in this
  # run are keyed by a fixed label rather than by their (computed) email.
  n8n_members = merge(
    { for m in toset(var.n8n_invoker_members) : m => m },
    { for k, m in { "created:n8n-invoker" = local.n8n_invoker_email } : k => "serviceAccount:${m}" if var.create_n8n_invoker_service_account },
  )

  invoker_bindings = merge(
    { for k, m in local.n8n_members : "send/${k}" => { function = "send", member = m } },
    { for k, m in local.n8n_members : "status/${k}" => { function = "status", member = m } },
    {
      "reconcile/tasks-invoker" = {
        function = "reconcile"
        member   = "serviceAccount:${google_service_account.tasks_invoker.email}"
      }
      "sweep/scheduler-invoker" = {
        function = "sweep"
        member   = "serviceAccount:${local.scheduler_invoker_email}"
      }
    },
  )

  # Full Cloud Run service names ("projects/P/locations/L/services/S").
  function_services = {
    send      = google_cloudfunctions2_function.send.service_config[0].service
    reconcile = google_cloudfunctions2_function.reconcile.service_config[0].service
    sweep     = google_cloudfunctions2_function.sweep.service_config[0].service
    status    = google_cloudfunctions2_function.status.service_config[0].service
  }
}

resource "google_cloud_run_v2_service_iam_member" "invoker" {
  for_each = local.invoker_bindings

  project  = var.project_id
  location = var.region
  name     = local.function_services[each.value.function]
  role     = "roles/run.invoker"
  member   = each.value.member
}

# -----------------------------------------------------------------------------
# IAM is eventually consistent: a function build started right after the
# grants above can fail with "permission denied" on the build or runtime SA.
# Wait once, on first creation only.
# -----------------------------------------------------------------------------

resource "time_sleep" "iam_propagation" {
  create_duration = "60s"

  depends_on = [
    google_project_iam_member.build,
    google_secret_manager_secret_iam_member.runtime_gmail_credentials,
    google_project_iam_member.runtime_datastore_user,
  ]
}
