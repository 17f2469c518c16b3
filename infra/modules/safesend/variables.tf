# ----------------------------------------------------------------- placement

variable "project_id" {
  description = "Google Cloud project that hosts safesend (one project per environment: the Firestore \"(default)\" database and the API settings are per project)."
  type        = string
}

variable "region" {
  description = "Region of the functions, the Cloud Tasks queue, the Scheduler job, the image repository and the source bucket."
  type        = string
  default     = "us-central1"
}

variable "name_prefix" {
  description = "Prefix of every resource name (functions, service accounts, topics, queue, secrets). 3-12 characters: \"-scheduler-invoker\" (18) is the longest suffix of a service account ID, which may have 30."
  type        = string
  default     = "safesend"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,10}[a-z0-9]$", var.name_prefix))
    error_message = "name_prefix must be 3-12 characters of lowercase letters, digits and hyphens, starting with a letter."
  }
}

variable "runtime" {
  description = "Cloud Functions runtime of all functions."
  type        = string
  default     = "python312"
}

# ----------------------------------------------------------------- Firestore

variable "manage_firestore_database" {
  description = "Create the Firestore \"(default)\" database (native mode). false when the project already has one that Terraform should not own (or import it, see infra/README.md)."
  type        = bool
  default     = true
}

variable "firestore_location" {
  description = "Firestore location (multi-region nam5/eur3 or a region). Cannot change after creation; pick one near var.region."
  type        = string
  default     = "nam5"
}

variable "firestore_point_in_time_recovery" {
  description = "Enable Firestore point-in-time recovery (7 days of versions; billed as storage)."
  type        = bool
  default     = true
}

variable "firestore_delete_protection" {
  description = "Refuse deletion of the Firestore database (it holds the records that stop double sends)."
  type        = bool
  default     = true
}

variable "jobs_collection" {
  description = "Firestore collection of the send jobs (SAFESEND_JOBS_COLLECTION). The sweeper's composite index is created on it."
  type        = string
  default     = "ai_jobs"
}

# ----------------------------------------------------------------- job store
# Firestore unless job_store = "postgres": then Cloud SQL for PostgreSQL on a private IP
# (cloudsql.tf, network.tf), reached by every function through Direct VPC egress and IAM database
# authentication; no password anywhere. Off by default (infra/README.md, "PostgreSQL job
# store (Cloud SQL)").

variable "job_store" {
  description = "Where the functions keep their jobs (SAFESEND_STORE): \"firestore\" (default) or \"postgres\" (a Cloud SQL for PostgreSQL instance on a private IP, IAM database authentication, no password anywhere; creates the instance, its VPC network, the functions' database users and grants; one manual SQL step, see infra/README.md)."
  type        = string
  default     = "firestore"

  validation {
    condition     = contains(["firestore", "postgres"], var.job_store)
    error_message = "job_store must be \"firestore\" or \"postgres\"."
  }
}

variable "postgres_tier" {
  description = "With job_store = \"postgres\": the Cloud SQL machine type (Enterprise edition: db-custom-<vCPUs>-<MiB>, or the shared-core db-f1-micro / db-g1-small for dev). Changing it restarts the instance."
  type        = string
  default     = "db-custom-1-3840"

  validation {
    condition     = can(regex("^db-(custom-[0-9]+-[0-9]+|f1-micro|g1-small)$", var.postgres_tier))
    error_message = "postgres_tier must be an Enterprise-edition tier: db-custom-<vCPUs>-<MiB>, db-f1-micro or db-g1-small (db-perf-optimized-* needs Enterprise Plus)."
  }
}

variable "postgres_high_availability" {
  description = "With job_store = \"postgres\": a standby in a second zone with synchronous replication and automatic failover (REGIONAL; doubles the instance cost). false: one zone (ZONAL)."
  type        = bool
  default     = false
}

variable "postgres_disk_size_gb" {
  description = "With job_store = \"postgres\": initial SSD size (GB, at least 10); it grows automatically."
  type        = number
  default     = 10

  validation {
    condition     = var.postgres_disk_size_gb >= 10
    error_message = "postgres_disk_size_gb must be at least 10."
  }
}

variable "postgres_max_connections" {
  description = "With job_store = \"postgres\": the instance's max_connections flag. A plan is refused unless the functions' maximum instances x postgres_pool_max, plus 10 for administration, fit."
  type        = number
  default     = 100

  validation {
    condition     = var.postgres_max_connections >= 25
    error_message = "postgres_max_connections must be at least 25."
  }
}

variable "postgres_pool_max" {
  description = "With job_store = \"postgres\": connections each function instance keeps at most (SAFESEND_POSTGRES_POOL_MAX). Each instance serves one request at a time, so 2 is plenty."
  type        = number
  default     = 2

  validation {
    condition     = var.postgres_pool_max >= 1 && var.postgres_pool_max <= 10
    error_message = "postgres_pool_max must be between 1 and 10."
  }
}

variable "postgres_retained_backups" {
  description = "With job_store = \"postgres\": daily automated backups kept (point-in-time recovery covers the last 7 days)."
  type        = number
  default     = 7

  validation {
    condition     = var.postgres_retained_backups >= 1 && var.postgres_retained_backups <= 365
    error_message = "postgres_retained_backups must be between 1 and 365."
  }
}

variable "postgres_subnet_cidr" {
  description = "With job_store = \"postgres\": IPv4 range of the <prefix>-functions subnet the functions send their database traffic from (Direct VPC egress takes its addresses here; a /24 serves the default maximum instances)."
  type        = string
  default     = "10.8.0.0/24"

  validation {
    condition     = can(regex("^([0-9]{1,3}\\.){3}[0-9]{1,3}/(1[6-9]|2[0-6])$", var.postgres_subnet_cidr))
    error_message = "postgres_subnet_cidr must be an IPv4 range from /16 to /26, e.g. \"10.8.0.0/24\"."
  }
}

variable "postgres_psa_prefix_length" {
  description = "With job_store = \"postgres\": prefix length of the range reserved for Google's service producer network (private services access, where the instance's private IP comes from)."
  type        = number
  default     = 20

  validation {
    condition     = var.postgres_psa_prefix_length >= 16 && var.postgres_psa_prefix_length <= 24
    error_message = "postgres_psa_prefix_length must be between 16 and 24."
  }
}

variable "postgres_proxy_public_ip" {
  description = "With job_store = \"postgres\": also give the instance a public IP with no authorized networks, so operators can reach it through the Cloud SQL Auth Proxy (gcloud sql connect) for the one-time setup SQL; only IAM-authorized, TLS connector connections can use it. The functions always use the private IP."
  type        = bool
  default     = false
}

variable "postgres_deletion_protection" {
  description = "With job_store = \"postgres\": Terraform (deletion_protection) and Cloud SQL (deletion_protection_enabled) refuse to delete the instance, which holds every job. Set false, apply, and only then switch job_store back or destroy (infra/README.md). The prod root pins it to true."
  type        = bool
  default     = true
}

variable "postgres_server_ca_version" {
  description = "With job_store = \"postgres\": version of the <prefix>-cloudsql-server-ca secret (the instance's server CA, which Terraform writes) the functions verify the server with (sslmode=verify-ca). Pin a number while rotating the server CA."
  type        = string
  default     = "latest"
}

# --------------------------------------------------------------------- app

variable "message_id_domain" {
  description = "Right-hand side of generated Message-IDs (SAFESEND_MESSAGE_ID_DOMAIN), e.g. \"mail.example.com\"."
  type        = string

  validation {
    condition     = can(regex("^([a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?\\.)+[a-zA-Z]{2,}$", var.message_id_domain))
    error_message = "message_id_domain must be a DNS name such as \"mail.example.com\" (no scheme, no @)."
  }
}

variable "default_from" {
  description = "Default From header (SAFESEND_DEFAULT_FROM), e.g. \"Support <support@example.com>\". Must be the mailbox or one of its send-as aliases."
  type        = string

  validation {
    condition     = can(regex("@", var.default_from))
    error_message = "default_from must contain an e-mail address, e.g. \"Support <support@example.com>\"."
  }
}

variable "gmail_user" {
  description = "Gmail API userId (SAFESEND_GMAIL_USER); \"me\" is the authenticated or delegated mailbox."
  type        = string
  default     = "me"
}

variable "gmail_delegated_user" {
  description = "Workspace mailbox to send as with keyless domain-wide delegation (SAFESEND_GMAIL_DELEGATED_USER): send, reconcile and sweep sign the delegation JWT with their own accounts through the IAM Credentials API, no key anywhere. Empty: an OAuth refresh token of one mailbox in the gmail-credentials secret."
  type        = string
  default     = ""

  validation {
    condition     = var.gmail_delegated_user == "" || can(regex("^[^@\\s]+@[^@\\s]+\\.[^@\\s]+$", var.gmail_delegated_user))
    error_message = "gmail_delegated_user must be empty or one mailbox address, e.g. \"support@example.com\"."
  }
}

variable "gmail_credentials_version" {
  description = "Version of the Gmail credentials secret the functions load at start-up. \"latest\" picks up a new version as instances start; pin a number and bump it to move every instance at once."
  type        = string
  default     = "latest"
}

variable "webhook_hmac_version" {
  description = "Version of the webhook HMAC secret (SAFESEND_AUTH_HMAC_SECRET) send and status load at start-up."
  type        = string
  default     = "latest"
}

variable "api_keys_version" {
  description = "Version of the API keys secret (SAFESEND_AUTH_API_KEYS, public_callers only) send and status load at start-up."
  type        = string
  default     = "latest"
}

variable "callback_hmac_version" {
  description = "Version of the callback signing secret (SAFESEND_CALLBACK_HMAC_SECRET, only with callback_allowed_hosts)."
  type        = string
  default     = "latest"
}

variable "index_lag_seconds" {
  description = "How long Gmail search may lag behind a send before a missing message is trusted (SAFESEND_INDEX_LAG_S)."
  type        = number
  default     = 90
}

variable "unknown_window_seconds" {
  description = "How long an outcome may stay unknown before the channel policy decides (SAFESEND_UNKNOWN_WINDOW_S)."
  type        = number
  default     = 300
}

variable "verify_horizon_seconds" {
  description = "Last verification search of a sent job that may have two copies (SAFESEND_VERIFY_HORIZON_S); must be >= unknown_window_seconds."
  type        = number
  default     = 1800
}

variable "retry_horizon_seconds" {
  description = "How long refusals (429, rate limits) are retried after the first one (SAFESEND_RETRY_HORIZON_S)."
  type        = number
  default     = 3600
}

variable "callback_allowed_hosts" {
  description = "Host names (or \"*.suffix\") a job's callback_url may target, e.g. the n8n host (SAFESEND_CALLBACK_ALLOWED_HOSTS). Non-empty also creates the callback signing secret. Empty: no callbacks."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for h in var.callback_allowed_hosts : can(regex("^(\\*\\.)?[a-z0-9]([a-z0-9-]*[a-z0-9])?(\\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$", h))])
    error_message = "callback_allowed_hosts must be lowercase host names or \"*.suffix\" patterns (no scheme, port or path)."
  }
}

variable "log_level" {
  description = "Log level of all functions (SAFESEND_LOG_LEVEL); the alerts' signal lines are written at any level."
  type        = string
  default     = "INFO"

  validation {
    condition     = contains(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], var.log_level)
    error_message = "log_level must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL."
  }
}

# ------------------------------------------------------------------ callers

variable "create_n8n_invoker_service_account" {
  description = "Create \"<prefix>-n8n-invoker\", the service account n8n uses for ID tokens to send/status (its email is an output)."
  type        = bool
  default     = true
}

variable "extra_caller_service_accounts" {
  description = "Further service account emails allowed to call send and status with an ID token (run.invoker + SAFESEND_AUTH_CALLER_SERVICE_ACCOUNTS), e.g. an existing n8n account in another project."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for e in var.extra_caller_service_accounts : can(regex("^[a-z0-9-]+@[a-z0-9.-]+\\.gserviceaccount\\.com$", e))])
    error_message = "extra_caller_service_accounts must be service account emails (...@....gserviceaccount.com); users, groups and public members are not accepted."
  }
}

variable "public_callers" {
  description = "n8n outside Google Cloud without a Google identity: send and status become invocable by allUsers (Cloud Run) and the app's API keys / HMAC are the only gate (SAFESEND_PUBLIC_INVOKER=true, Cloud Run IAM trust off there; reconcile and sweep stay IAM-only). Refused where the org policy iam.allowedPolicyMemberDomains applies; see infra/README.md."
  type        = bool
  default     = false
}

variable "api_deciders" {
  description = "Verified callers that may decide review items by API (POST /decide on send, SAFESEND_API_DECIDERS): \"key:<key id>\" (an API key), \"hmac\" (a signed request) or a caller service account email. Such a caller can make safesend send a message a reviewer held back. Empty: off."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for d in var.api_deciders : can(regex("^(hmac|key:[a-z0-9][a-z0-9-]{0,31}|[a-z0-9-]+@[a-z0-9.-]+\\.gserviceaccount\\.com)$", d))])
    error_message = "api_deciders entries must be \"key:<key id>\" (1-32 of a-z, 0-9, '-'), \"hmac\" or a lowercase service account email (...@....gserviceaccount.com)."
  }
}

variable "review_subscriber_members" {
  description = "IAM members that may pull review items and dead letters (roles/pubsub.subscriber on those two subscriptions), e.g. [\"serviceAccount:n8n@p.iam.gserviceaccount.com\", \"group:ops@example.com\"]."
  type        = list(string)
  default     = []

  validation {
    condition = alltrue([
      for m in var.review_subscriber_members :
      can(regex("^(serviceAccount|user|group|principal|principalSet):", m))
    ])
    error_message = "review_subscriber_members must be IAM members such as \"serviceAccount:...\" or \"group:...\"; public members are not accepted."
  }
}

variable "review_max_delivery_attempts" {
  description = "Deliveries of a review item (on the reviewers' pull subscription, and on notify's push subscription) before Pub/Sub moves it to the dead-letter topic (5-100)."
  type        = number
  default     = 10

  validation {
    condition     = var.review_max_delivery_attempts >= 5 && var.review_max_delivery_attempts <= 100
    error_message = "review_max_delivery_attempts must be between 5 and 100."
  }
}

# ---------------------------------------------------------------- reviewers
# The reviewer side (issue 10): notify (Pub/Sub push of each review item ->
# Chat / Slack / email) and review (the console, behind Identity-Aware Proxy).

variable "reviewers_enabled" {
  description = "Deploy the reviewer side: the notify function and its OIDC push subscription on the review topic, the review console behind IAP, their service accounts, grants and secrets. Off by default: turning it on needs a reviewer allowlist and IAP principals (checked at plan time), a CSRF secret value before the first deploy, and one manual IAP step (infra/README.md)."
  type        = bool
  default     = false
}

variable "review_allowed_emails" {
  description = "Reviewer addresses the console admits after IAP (SAFESEND_REVIEW_ALLOWED_EMAILS), e.g. [\"ann@example.com\"]. With reviewers_enabled, this and/or review_allowed_domains must be non-empty."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for e in var.review_allowed_emails : can(regex("^[^@\\s,<>\"']+@[a-z0-9.-]+\\.[a-z]{2,}$", e))])
    error_message = "review_allowed_emails must be lowercase e-mail addresses such as \"ann@example.com\"."
  }
}

variable "review_allowed_domains" {
  description = "Google Workspace domains whose users the console admits after IAP (SAFESEND_REVIEW_ALLOWED_DOMAINS, matched against the signed hd claim), e.g. [\"example.com\"]."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for d in var.review_allowed_domains : can(regex("^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$", d))])
    error_message = "review_allowed_domains must be lowercase domain names such as \"example.com\" (no @, no scheme)."
  }
}

variable "review_iap_members" {
  description = "Who IAP lets through to the console: roles/iap.httpsResourceAccessor on the review service, e.g. [\"group:mail-reviewers@example.com\"]. People only (user:, group:, domain:); never allUsers. The app's allowlist is the second gate."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for m in var.review_iap_members : can(regex("^(user|group|domain):[^\\s]+$", m))])
    error_message = "review_iap_members must be \"user:...\", \"group:...\" or \"domain:...\" members; public and service-account members are not accepted."
  }
}

variable "notify_chat_webhook" {
  description = "Post review items to Google Chat: creates the <prefix>-notify-chat-webhook secret (its value is the incoming-webhook URL, added with gcloud) and mounts it on notify, reconcile, sweep and review, the functions that post notices (SAFESEND_NOTIFY_CHAT_WEBHOOK_URL)."
  type        = bool
  default     = false
}

variable "notify_slack_webhook" {
  description = "Post review items to Slack: creates the <prefix>-notify-slack-webhook secret (the incoming-webhook URL) and mounts it on notify, reconcile, sweep and review, the functions that post notices (SAFESEND_NOTIFY_SLACK_WEBHOOK_URL)."
  type        = bool
  default     = false
}

variable "notify_email_to" {
  description = "Address review items are emailed to by notify, through safesend's own send path (SAFESEND_NOTIFY_EMAIL_TO), e.g. \"mail-reviewers@example.com\". Empty: no email."
  type        = string
  default     = ""

  validation {
    condition     = var.notify_email_to == "" || can(regex("^[^@\\s,<>]+@[^@\\s,<>]+\\.[^@\\s,<>]+$", var.notify_email_to))
    error_message = "notify_email_to must be empty or one e-mail address."
  }
}

variable "notify_email_channel" {
  description = "safesend channel of the reviewer emails (SAFESEND_NOTIFY_EMAIL_CHANNEL); it must exist in channels.toml with on_unknown = \"retry\" (the app checks at start-up)."
  type        = string
  default     = "review-notifications"
}

variable "review_notify_timeout_seconds" {
  description = "With the reviewer side: seconds notify has to take up a published review item before the sweeper publishes it again (SAFESEND_REVIEW_NOTIFY_TIMEOUT_S on every function that publishes)."
  type        = number
  default     = 600

  validation {
    condition     = var.review_notify_timeout_seconds >= 60
    error_message = "review_notify_timeout_seconds must be at least 60 (Pub/Sub retries with backoff before that)."
  }
}

variable "notify_chat_webhook_version" {
  description = "Version of the notify-chat-webhook secret notify loads at start-up."
  type        = string
  default     = "latest"
}

variable "notify_slack_webhook_version" {
  description = "Version of the notify-slack-webhook secret notify loads at start-up."
  type        = string
  default     = "latest"
}

variable "review_csrf_version" {
  description = "Version of the review-csrf secret (SAFESEND_REVIEW_CSRF_SECRET) the console loads at start-up."
  type        = string
  default     = "latest"
}

variable "notify_max_instances" {
  description = "Maximum instances of notify (one push each); Pub/Sub backs off when they are all busy."
  type        = number
  default     = 5
}

variable "review_max_instances" {
  description = "Maximum instances of the review console."
  type        = number
  default     = 3
}

# ---------------------------------------------------------- scaling, timing

variable "send_min_instances" {
  description = "Warm instances of send: 0 costs nothing when idle, 1 removes cold starts for n8n."
  type        = number
  default     = 0
}

variable "send_max_instances" {
  description = "Maximum instances of send (one request each)."
  type        = number
  default     = 20
}

variable "status_max_instances" {
  description = "Maximum instances of status."
  type        = number
  default     = 10
}

variable "reconcile_max_instances" {
  description = "Maximum instances of reconcile; must be >= tasks_max_concurrent_dispatches."
  type        = number
  default     = 5
}

variable "tasks_max_dispatches_per_second" {
  description = "Reconcile queue dispatch rate. 1/s keeps reconcile below half of Gmail's per-user quota even when every call resends (see tasks.tf)."
  type        = number
  default     = 1
}

variable "tasks_max_concurrent_dispatches" {
  description = "Reconcile calls in flight at once (see tasks.tf)."
  type        = number
  default     = 4
}

variable "sweep_schedule" {
  description = "Cron schedule of the sweep (finds expired leases, lost checks, due retries, unpublished review items): \"* * * * *\" or \"*/N * * * *\" (N 1-60). Its interval is every function's SAFESEND_SWEEP_INTERVAL_S (/health and the console: late after 3) and the dead man's switch's."
  type        = string
  default     = "*/5 * * * *"

  validation {
    condition     = var.sweep_schedule == "* * * * *" || can(regex("^\\*/([1-9]|[1-5][0-9]|60) \\* \\* \\* \\*$", var.sweep_schedule))
    error_message = "sweep_schedule must be \"* * * * *\" or \"*/N * * * *\" with N from 1 to 60: the late checks and the dead man's switch count in its interval."
  }
}

variable "scheduler_time_zone" {
  description = "Time zone of sweep_schedule."
  type        = string
  default     = "Etc/UTC"
}

# ------------------------------------------------------------- packaging

variable "functions_source_dir" {
  description = "Directory with main.py and requirements.txt. Empty: the repository's functions/ (three levels above this module)."
  type        = string
  default     = ""
}

variable "source_bucket_name" {
  description = "Bucket for the source zips. Empty: \"<project_id>-<name_prefix>-fn-src\"."
  type        = string
  default     = ""
}

variable "source_bucket_force_destroy" {
  description = "Let `terraform destroy` delete the source bucket with its zips (true in dev, false in prod)."
  type        = bool
  default     = false
}

variable "artifact_keep_count" {
  description = "Function images per package kept in the image repository (older ones are deleted after 30 days)."
  type        = number
  default     = 10
}

# ------------------------------------------------------ mailboxes and pools

variable "mailboxes" {
  description = "Sender mailboxes (issue 24), keyed by id (1-40 of a-z, 0-9, '-', starting with a letter; the id names its Cloud Tasks queue <name_prefix>-mbx-<id>). Each: address; kind gmail (default) or graph (Microsoft 365 through Microsoft Graph, docs/graph-provider.md); a gmail mailbox: exactly one of delegated_user (keyless domain-wide delegation, the same client IDs for every delegated mailbox) and token_secret (Secret Manager secret id of its own OAuth token, created here, value never in Terraform); a graph mailbox: tenant_id and client_id of its Entra app registration and exactly one of federated = true (the functions' Google identity, no secret) and certificate_secret (Secret Manager secret id of {\"private_key\": PEM, \"thumbprint\": hex}, created here, value never in Terraform); send_as aliases; limits = a preset (workspace, workspace_legacy_rate, trial, consumer, unlimited, exchange_online; default workspace for gmail, exchange_online for graph) with optional explicit units_per_minute / messages_per_day / recipients_per_day over it; safety_share of the daily limits safesend uses (0.95); max_concurrent_dispatches of its queue (4). Rendered as SAFESEND_MAILBOXES_JSON (functions/safesend/core/mailboxes.py). Empty: today's single mailbox (gmail_user / gmail_delegated_user), no mailbox queues."
  type = map(object({
    address                   = string
    kind                      = optional(string, "gmail")
    delegated_user            = optional(string)
    token_secret              = optional(string)
    tenant_id                 = optional(string)
    client_id                 = optional(string)
    federated                 = optional(bool)
    certificate_secret        = optional(string)
    send_as                   = optional(list(string), [])
    limits                    = optional(string)
    units_per_minute          = optional(number)
    messages_per_day          = optional(number)
    recipients_per_day        = optional(number)
    safety_share              = optional(number, 0.95)
    max_concurrent_dispatches = optional(number, 4)
  }))
  default = {}

  validation {
    condition     = alltrue([for id in keys(var.mailboxes) : can(regex("^[a-z][a-z0-9-]{0,39}$", id))])
    error_message = "A mailbox id is 1-40 of a-z, 0-9 and '-', starting with a letter (a Firestore document id and part of its queue name)."
  }

  validation {
    condition     = alltrue([for m in values(var.mailboxes) : m.limits == null || contains(["workspace", "workspace_legacy_rate", "trial", "consumer", "unlimited", "exchange_online"], coalesce(m.limits, "workspace"))])
    error_message = "limits must be a preset: workspace, workspace_legacy_rate, trial, consumer, unlimited or exchange_online (explicit limits go in units_per_minute, messages_per_day, recipients_per_day)."
  }

  validation {
    condition     = alltrue([for m in values(var.mailboxes) : contains(["gmail", "graph"], m.kind)])
    error_message = "kind must be gmail or graph."
  }

  validation {
    condition     = alltrue([for m in values(var.mailboxes) : m.kind != "gmail" || ((m.delegated_user == null) != (m.token_secret == null) && m.tenant_id == null && m.client_id == null && m.federated == null && m.certificate_secret == null)])
    error_message = "Each gmail mailbox sets exactly one of delegated_user (keyless delegation) and token_secret (its own OAuth token), and no Graph setting (tenant_id, client_id, federated, certificate_secret)."
  }

  validation {
    condition     = alltrue([for m in values(var.mailboxes) : m.kind != "graph" || (m.delegated_user == null && m.token_secret == null && (coalesce(m.federated, false) != (m.certificate_secret != null)))])
    error_message = "Each graph mailbox sets exactly one of federated = true (the functions' Google identity, no secret) and certificate_secret, and no Gmail setting (delegated_user, token_secret)."
  }

  validation {
    condition = alltrue([for m in values(var.mailboxes) : m.kind != "graph" || alltrue([
      for value in [m.tenant_id, m.client_id] : can(regex("^[A-Za-z0-9][A-Za-z0-9.-]{0,99}$", value))
    ])])
    error_message = "A graph mailbox needs tenant_id and client_id, its Entra app registration's (GUIDs; a tenant may be its domain name)."
  }

  validation {
    condition = alltrue([for m in values(var.mailboxes) : alltrue([
      for address in concat([m.address], m.delegated_user == null ? [] : [m.delegated_user], m.send_as) :
      can(regex("^[^@\\s<>]+@[^@\\s<>]+\\.[^@\\s<>]+$", address))
    ])])
    error_message = "address, delegated_user and every send_as entry must be a bare email address, e.g. \"shop@example.com\"."
  }

  validation {
    condition = alltrue([for m in values(var.mailboxes) : alltrue([
      for secret in [m.token_secret, m.certificate_secret] : secret == null || can(regex("^[A-Za-z0-9_-]{1,255}$", secret))
    ])])
    error_message = "token_secret and certificate_secret must be Secret Manager secret ids (letters, digits, '_' and '-')."
  }

  validation {
    condition = alltrue([for m in values(var.mailboxes) : alltrue([
      for limit in [m.units_per_minute, m.messages_per_day, m.recipients_per_day] : limit == null || (try(limit >= 1, false) && try(floor(limit) == limit, false))
    ])])
    error_message = "Explicit limits (units_per_minute, messages_per_day, recipients_per_day) are whole numbers >= 1."
  }

  validation {
    condition     = alltrue([for m in values(var.mailboxes) : m.safety_share > 0 && m.safety_share <= 1 && m.max_concurrent_dispatches >= 1 && m.max_concurrent_dispatches <= 1000])
    error_message = "safety_share must be in (0, 1] and max_concurrent_dispatches in 1..1000."
  }
}

variable "mailbox_pools" {
  description = "Which mailboxes may carry a job (ids of var.mailboxes, in preference order): by its From address or domain (from), else its channel (channels), else default (unset: every mailbox). Only with mailboxes."
  type = object({
    default  = optional(list(string))
    channels = optional(map(list(string)), {})
    from     = optional(map(list(string)), {})
  })
  default = {}

  validation {
    condition = alltrue([
      for pool in concat(var.mailbox_pools.default == null ? [] : [var.mailbox_pools.default], values(var.mailbox_pools.channels), values(var.mailbox_pools.from)) :
      length(pool) > 0 && length(distinct(pool)) == length(pool)
    ])
    error_message = "A pool is a non-empty list of mailbox ids, each at most once."
  }
}

# ------------------------------------------------------------- monitoring (issue 20, monitoring.tf)

variable "monitoring_enabled" {
  description = "Create the log-based metrics, alert policies (each with its runbook), notification channels and dashboard of monitoring.tf. On by default."
  type        = bool
  default     = true
}

variable "monitoring_thresholds" {
  description = "Alert thresholds by name, over monitoring.json's defaults (overdue_minutes, oldest_review_hours, review_unacked_minutes, dead_letter_messages, function_5xx_per_second, tasks_queue_depth, tasks_delay_minutes, gmail_rate_limited_per_5min, gmail_daily_limited, store_unavailable_per_5min)."
  type        = map(number)
  default     = {}
}

variable "monitoring_notification_emails" {
  description = "Email addresses told of every alert (Cloud Monitoring email channels)."
  type        = list(string)
  default     = []
}

variable "monitoring_slack_channel" {
  description = "Slack channel (\"#ops\") told of every alert; empty: none. Needs monitoring_slack_auth_token (Cloud Monitoring's Slack app token)."
  type        = string
  default     = ""
}

variable "monitoring_slack_auth_token" {
  description = "Cloud Monitoring Slack app's OAuth token for monitoring_slack_channel."
  type        = string
  default     = ""
  sensitive   = true
}

variable "monitoring_chat_space" {
  description = "Google Chat space (\"spaces/AAAA...\") told of every alert, through Cloud Monitoring's Google Chat channel; empty: none."
  type        = string
  default     = ""
}

variable "monitoring_reviewer_emails" {
  description = "Reviewers' addresses, told of every duplicate at once (besides the operations channels)."
  type        = list(string)
  default     = []
}
