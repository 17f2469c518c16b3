# -----------------------------------------------------------------------------
# Project / placement
# -----------------------------------------------------------------------------

variable "project_id" {
  description = "Google Cloud project ID that hosts safesend."
  type        = string
}

variable "region" {
  description = "Region for the functions, the Cloud Tasks queue, the Scheduler job and the source bucket."
  type        = string
  default     = "us-central1"
}

variable "name_prefix" {
  description = "Prefix for resource names (functions, service accounts, topic, queue, secret). Keep it short: service account IDs are limited to 30 characters."
  type        = string
  default     = "safesend"

  validation {
    # "-scheduler-invoker" (18 chars) is the longest suffix we append to a service account ID.
    condition     = can(regex("^[a-z][a-z0-9-]{1,10}[a-z0-9]$", var.name_prefix))
    error_message = "name_prefix must be 3-12 characters of lowercase letters, digits and hyphens, starting with a letter."
  }
}

variable "labels" {
  description = "Labels added to every resource that supports them (provider default_labels)."
  type        = map(string)
  default = {
    app        = "safesend"
    managed-by = "terraform"
  }
}

# -----------------------------------------------------------------------------
# Firestore
# -----------------------------------------------------------------------------

variable "manage_firestore_database" {
  description = "Create the Firestore \"(default)\" database (native mode). Set to false when the project already has one that Terraform should not own (or import it, see README)."
  type        = bool
  default     = true
}

variable "firestore_location" {
  description = "Firestore location (multi-region such as nam5/eur3 or a region). Cannot be changed after creation; pick one close to var.region."
  type        = string
  default     = "nam5"
}

variable "jobs_collection" {
  description = "Firestore collection that holds send jobs (SAFESEND_JOBS_COLLECTION). The sweeper's composite index is created on it."
  type        = string
  default     = "ai_jobs"
}

# -----------------------------------------------------------------------------
# Application settings (become function environment variables)
# -----------------------------------------------------------------------------

variable "message_id_domain" {
  description = "Domain used on the right-hand side of generated Message-IDs (SAFESEND_MESSAGE_ID_DOMAIN), e.g. \"mail.example.com\"."
  type        = string

  validation {
    condition     = can(regex("^([a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?\\.)+[a-zA-Z]{2,}$", var.message_id_domain))
    error_message = "message_id_domain must be a DNS name such as \"mail.example.com\" (no scheme, no @)."
  }
}

variable "default_from" {
  description = "Default From header (SAFESEND_DEFAULT_FROM), e.g. \"Support <support@example.com>\". Must be an address the Gmail mailbox may send as."
  type        = string

  validation {
    condition     = can(regex("@", var.default_from))
    error_message = "default_from must contain an e-mail address, e.g. \"Support <support@example.com>\"."
  }
}

variable "gmail_user" {
  description = "Gmail API userId used for calls (SAFESEND_GMAIL_USER). \"me\" means the authenticated (or delegated) mailbox."
  type        = string
  default     = "me"
}

variable "gmail_delegated_user" {
  description = "Mailbox to impersonate with domain-wide delegation when the secret holds a service-account key (SAFESEND_GMAIL_DELEGATED_USER). Empty = no delegation; the variable is then not set on the functions at all."
  type        = string
  default     = ""
}

variable "gmail_credentials_version" {
  description = "Secret Manager version of the Gmail credentials the functions load. \"latest\" picks up a new version whenever an instance starts; pin a number (and bump it) to roll every instance onto a rotated credential at once."
  type        = string
  default     = "latest"
}

variable "index_lag_seconds" {
  description = "How long Gmail search may lag behind a send before a missing message is trusted (SAFESEND_INDEX_LAG_S)."
  type        = number
  default     = 90
}

variable "unknown_window_seconds" {
  description = "How long an outcome may stay unknown before reconciliation decides (SAFESEND_UNKNOWN_WINDOW_S)."
  type        = number
  default     = 300
}

variable "log_level" {
  description = "Python log level for all functions (SAFESEND_LOG_LEVEL)."
  type        = string
  default     = "INFO"

  validation {
    condition     = contains(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], var.log_level)
    error_message = "log_level must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL."
  }
}

# -----------------------------------------------------------------------------
# Callers
# -----------------------------------------------------------------------------

variable "create_n8n_invoker_service_account" {
  description = "Create a \"<prefix>-n8n-invoker\" service account that n8n uses to mint ID tokens for send/status. Its email is an output."
  type        = bool
  default     = true
}

variable "n8n_invoker_members" {
  description = "Additional IAM members allowed to call send and status, e.g. [\"serviceAccount:n8n@other-project.iam.gserviceaccount.com\"]. Public members are rejected."
  type        = list(string)
  default     = []

  validation {
    condition = alltrue([
      for m in var.n8n_invoker_members :
      !contains(["allUsers", "allAuthenticatedUsers"], m) && can(regex("^(serviceAccount|user|group|principal|principalSet):", m))
    ])
    error_message = "n8n_invoker_members entries must be IAM members like \"serviceAccount:...\"; allUsers/allAuthenticatedUsers are not allowed (send must never be public)."
  }
}

variable "scheduler_uses_tasks_invoker" {
  description = "Let Cloud Scheduler sign its OIDC token with the tasks-invoker service account instead of creating a separate \"<prefix>-scheduler-invoker\"."
  type        = bool
  default     = false
}

variable "review_subscriber_members" {
  description = "IAM members that may pull from the review inbox subscription (roles/pubsub.subscriber), e.g. the n8n service account."
  type        = list(string)
  default     = []
}

# -----------------------------------------------------------------------------
# Scaling / scheduling
# -----------------------------------------------------------------------------

variable "send_min_instances" {
  description = "Minimum warm instances of send. 0 saves money; 1 removes cold starts for n8n."
  type        = number
  default     = 0
}

variable "send_max_instances" {
  description = "Maximum instances of send (each handles one request at a time)."
  type        = number
  default     = 20
}

variable "status_max_instances" {
  description = "Maximum instances of status."
  type        = number
  default     = 10
}

variable "reconcile_max_instances" {
  description = "Maximum instances of reconcile. Keep >= tasks_max_concurrent_dispatches or Cloud Tasks sees 429s and backs off."
  type        = number
  default     = 10
}

variable "tasks_max_dispatches_per_second" {
  description = "Cloud Tasks queue dispatch rate. Modest on purpose: each reconcile call hits the Gmail API."
  type        = number
  default     = 5
}

variable "tasks_max_concurrent_dispatches" {
  description = "Cloud Tasks queue concurrency."
  type        = number
  default     = 10
}

variable "sweep_schedule" {
  description = "Cron schedule for the sweep job."
  type        = string
  default     = "*/5 * * * *"
}

variable "scheduler_time_zone" {
  description = "Time zone the sweep schedule is interpreted in."
  type        = string
  default     = "Etc/UTC"
}

variable "background_ingress_settings" {
  description = "Ingress for reconcile and sweep. ALLOW_INTERNAL_ONLY still admits Cloud Tasks and Cloud Scheduler of the same project (on the run.app URL) and blocks the internet; use ALLOW_ALL to curl them from outside while debugging."
  type        = string
  default     = "ALLOW_INTERNAL_ONLY"

  validation {
    condition     = contains(["ALLOW_ALL", "ALLOW_INTERNAL_ONLY", "ALLOW_INTERNAL_AND_GCLB"], var.background_ingress_settings)
    error_message = "background_ingress_settings must be ALLOW_ALL, ALLOW_INTERNAL_ONLY or ALLOW_INTERNAL_AND_GCLB."
  }
}

# -----------------------------------------------------------------------------
# Source packaging
# -----------------------------------------------------------------------------

variable "functions_source_dir" {
  description = "Directory with main.py and requirements.txt, relative to this module."
  type        = string
  default     = "../functions"
}

variable "source_bucket_name" {
  description = "Name of the bucket holding function source zips. Empty = \"<project_id>-<prefix>-fn-src\"."
  type        = string
  default     = ""
}
