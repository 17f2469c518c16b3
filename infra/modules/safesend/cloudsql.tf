# The PostgreSQL job store (job_store = "postgres"; Firestore otherwise, see firestore.tf).
#
# One Cloud SQL for PostgreSQL instance on a private IP (network.tf), database "safesend", and one
# database user per function that touches the store: its own runtime service account, logging in
# with IAM database authentication (an OAuth access token of the account as the password; the
# app's iam_login(), cloud.google.com/sql/docs/postgres/iam-logins). No password exists anywhere:
# not in Terraform, not in the state, not in any environment variable (tests/infra checks every
# DSN). The connection is TLS with the server verified against the instance's own CA
# (sslmode=verify-ca, the CA mounted from the <prefix>-cloudsql-server-ca secret, secrets.tf).
#
# The functions connect directly (private IP, Direct VPC egress), not through a Cloud SQL
# connector: the Cloud Run built-in connection (/cloudsql/<connection name> socket) cannot be
# declared on google_cloudfunctions2_function nor in the Cloud Functions v2 API, only added to the
# function's Cloud Run service by hand after every deploy (infra/README.md). Each account holds, on
# this instance only (an IAM condition), roles/cloudsql.instanceUser (cloudsql.instances.login: the
# IAM database login itself) and roles/cloudsql.client (cloudsql.instances.connect / get: what Cloud
# SQL's documentation asks of every account that connects, and what the Cloud SQL Auth Proxy or a
# language connector needs, e.g. an operator running the migration command as a function's account
# with --impersonate-service-account).
#
# Schema: the store migrates on first use (SAFESEND_POSTGRES_MIGRATE, default on), in schema
# "safesend" owned by the NOLOGIN role safesend_owner, which every function's user is granted and
# becomes for its session (`-c role=safesend_owner` in its DSN), so every table belongs to
# safesend_owner whichever function migrated first, and any function can apply a later migration.
# Creating that role and schema is the one manual step: output postgres_setup_sql, run once as the
# "postgres" user (and again after adding functions; it is idempotent). infra/README.md.

locals {
  postgres = var.job_store == "postgres"

  # Every function that touches the store, by function: its runtime account.
  postgres_accounts = local.postgres ? merge({
    send      = google_service_account.send.email
    reconcile = google_service_account.reconcile.email
    sweep     = google_service_account.sweep.email
    status    = google_service_account.status.email
    }, local.reviewers_enabled ? {
    notify = google_service_account.notify[0].email
    review = google_service_account.review[0].email
  } : {}) : {}

  # Their database users: the account's email without ".gserviceaccount.com" (Cloud SQL's name for
  # a CLOUD_IAM_SERVICE_ACCOUNT user; the same name the DSN's user= carries, env_spec.json).
  postgres_users = { for fn, email in local.postgres_accounts : fn => trimsuffix(email, ".gserviceaccount.com") }

  # Connections: every function instance keeps up to postgres_pool_max (SAFESEND_POSTGRES_POOL_MAX);
  # the maxima below are the functions' max_instance_count (functions.tf; tests/infra checks they
  # agree). 10 more stay free for the superuser-reserved connections and an operator's session.
  postgres_max_instances = merge({
    send      = var.send_max_instances
    reconcile = var.reconcile_max_instances
    sweep     = 1
    status    = var.status_max_instances
    }, local.reviewers_enabled ? {
    notify = var.notify_max_instances
    review = var.review_max_instances
  } : {})
  postgres_connections_needed = sum(values(local.postgres_max_instances)) * var.postgres_pool_max + 10

  # The IAM condition of both Cloud SQL roles: this instance, no other in the project.
  postgres_instance_condition = local.postgres ? "resource.name == 'projects/${var.project_id}/instances/${google_sql_database_instance.jobs[0].name}' && resource.type == 'sqladmin.googleapis.com/Instance'" : ""

  # The one manual step (output postgres_setup_sql): run as "postgres" in database "safesend".
  postgres_setup_sql = join("\n", concat([
    "DO $$ BEGIN CREATE ROLE safesend_owner NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$;",
    "GRANT safesend_owner TO CURRENT_USER;",
    "CREATE SCHEMA IF NOT EXISTS safesend AUTHORIZATION safesend_owner;",
    ], [
    for fn, user in local.postgres_users : "GRANT safesend_owner TO \"${user}\";"
  ]))
}

resource "google_sql_database_instance" "jobs" {
  #checkov:skip=CKV_GCP_6:Every connection must use TLS (ssl_mode ENCRYPTED_ONLY) and the functions verify the server's certificate (sslmode=verify-ca); checkov accepts only TRUSTED_CLIENT_CERTIFICATE_REQUIRED, which would demand client certificates the functions do not hold (only Cloud SQL connectors present them). Logins are IAM database authentication, never passwords.
  #checkov:skip=CKV_GCP_79:PostgreSQL 16 is the version the job store is built and tested for (issue 14: 15 or 16); a major upgrade is a deliberate in-place operation (gcloud sql instances patch --database-version), not a configuration drift.
  #checkov:skip=CKV_GCP_110:pgAudit would need an extension and Data Access audit logs; only the functions' IAM users reach this database, and log_statement=ddl, log_connections and log_disconnections already record every schema change and every session.
  #checkov:skip=CKV2_GCP_13:log_duration would log a line for every statement (two per job); Query Insights (insights_config) records statement latencies instead.

  count = local.postgres ? 1 : 0

  project          = var.project_id
  name             = "${var.name_prefix}-jobs"
  region           = var.region
  database_version = "POSTGRES_16"

  # The jobs are the records that stop double sends: Terraform refuses to destroy the instance
  # (switching job_store back, terraform destroy), and so does Cloud SQL (deletion_protection_enabled).
  # Only postgres_deletion_protection = false (dev; prod pins true) lets either go, in an apply of
  # its own before the destroy (infra/README.md, "Turning it off").
  deletion_protection = var.postgres_deletion_protection

  settings {
    tier = var.postgres_tier
    # Explicit: for PostgreSQL 16 the API's default edition is Enterprise Plus, which refuses
    # db-custom-* and shared-core tiers.
    edition                     = "ENTERPRISE"
    availability_type           = var.postgres_high_availability ? "REGIONAL" : "ZONAL"
    disk_type                   = "PD_SSD"
    disk_size                   = var.postgres_disk_size_gb
    disk_autoresize             = true
    deletion_protection_enabled = var.postgres_deletion_protection

    ip_configuration {
      # Private IP on our network; a public IP only for operators' Cloud SQL Auth Proxy, with no
      # authorized network (no direct connection from the internet).
      ipv4_enabled    = var.postgres_proxy_public_ip
      private_network = google_compute_network.jobs[0].id
      # TLS for every connection (the IAM token is the password). The functions verify the server
      # against this per-instance CA (server_ca_cert, written to the cloudsql-server-ca secret).
      ssl_mode       = "ENCRYPTED_ONLY"
      server_ca_mode = "GOOGLE_MANAGED_INTERNAL_CA"
    }

    backup_configuration {
      enabled                        = true
      point_in_time_recovery_enabled = true
      start_time                     = "02:00"
      transaction_log_retention_days = 7 # Enterprise edition's maximum

      backup_retention_settings {
        retained_backups = var.postgres_retained_backups
        retention_unit   = "COUNT"
      }
    }

    # Statement latencies and plans without logging every statement.
    insights_config {
      query_insights_enabled = true
    }

    maintenance_window {
      day          = 7 # Sunday
      hour         = 3
      update_track = "stable"
    }

    # IAM database authentication: without it CLOUD_IAM_SERVICE_ACCOUNT users cannot log in.
    database_flags {
      name  = "cloudsql.iam_authentication"
      value = "on"
    }

    database_flags {
      name  = "max_connections"
      value = tostring(var.postgres_max_connections)
    }

    # What a reviewer of an incident wants in Cloud Logging (checkov CKV_GCP_51..57, 108, 109).
    database_flags {
      name  = "log_checkpoints"
      value = "on"
    }

    database_flags {
      name  = "log_connections"
      value = "on"
    }

    database_flags {
      name  = "log_disconnections"
      value = "on"
    }

    database_flags {
      name  = "log_lock_waits"
      value = "on"
    }

    database_flags {
      name  = "log_min_messages"
      value = "error"
    }

    database_flags {
      name  = "log_temp_files"
      value = "0"
    }

    database_flags {
      name  = "log_min_duration_statement"
      value = "-1"
    }

    database_flags {
      name  = "log_min_error_statement"
      value = "error"
    }

    database_flags {
      name  = "log_hostname"
      value = "on"
    }

    database_flags {
      name  = "log_statement"
      value = "ddl"
    }
  }

  lifecycle {
    # Every function instance's pool must fit, with room to administer the database.
    precondition {
      condition     = local.postgres_connections_needed <= var.postgres_max_connections
      error_message = "job_store = postgres: the functions' maximum instances x postgres_pool_max + 10 exceeds postgres_max_connections; raise postgres_max_connections (and the tier) or lower the maxima."
    }
  }

  depends_on = [google_service_networking_connection.cloudsql, google_project_service.enabled]
}

resource "google_sql_database" "safesend" {
  count = local.postgres ? 1 : 0

  project  = var.project_id
  instance = google_sql_database_instance.jobs[0].name
  name     = "safesend"

  # Dropping it would drop every job: removing it from the configuration only forgets it.
  deletion_policy = "ABANDON"
}

# One IAM database user per function that touches the store (no BUILT_IN user, no password).
resource "google_sql_user" "functions" {
  for_each = local.postgres_users

  project  = var.project_id
  instance = google_sql_database_instance.jobs[0].name
  name     = each.value
  type     = "CLOUD_IAM_SERVICE_ACCOUNT"
}

# The two Cloud SQL roles of each function's account (header), on this instance only: an IAM
# condition on the instance's resource name (github.com/terraform-google-modules/terraform-docs-samples,
# cloud_sql/instance_iam_condition).
resource "google_project_iam_member" "cloudsql_instance_user" {
  for_each = local.postgres_accounts

  project = var.project_id
  role    = "roles/cloudsql.instanceUser"
  member  = "serviceAccount:${each.value}"

  condition {
    title       = "safesend job store only"
    description = "IAM database login to the safesend Cloud SQL instance, no other."
    expression  = local.postgres_instance_condition
  }
}

resource "google_project_iam_member" "cloudsql_client" {
  for_each = local.postgres_accounts

  project = var.project_id
  role    = "roles/cloudsql.client"
  member  = "serviceAccount:${each.value}"

  condition {
    title       = "safesend job store only"
    description = "Connections to the safesend Cloud SQL instance, no other."
    expression  = local.postgres_instance_condition
  }
}
