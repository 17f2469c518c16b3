# job_store = "postgres": Cloud SQL on a private IP with IAM login, and its outputs.

mock_provider "google" {
  mock_data "google_project" {
    defaults = {
      number = "123456789012"
    }
  }
  # Cloud SQL reports its server CA and private IP; the module stores the CA in a secret.
  mock_resource "google_sql_database_instance" {
    defaults = {
      private_ip_address = "10.20.0.3"
      connection_name    = "p-test:europe-west1:safesend-jobs"
      server_ca_cert = [{
        cert             = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
        common_name      = "C=US,O=Google\\, Inc,CN=Google Cloud SQL Server CA"
        create_time      = "2026-01-01T00:00:00Z"
        expiration_time  = "2036-01-01T00:00:00Z"
        sha1_fingerprint = "00"
      }]
    }
  }
}
mock_provider "google-beta" {}
mock_provider "archive" {}
mock_provider "time" {}

variables {
  project_id                     = "p-test"
  region                         = "europe-west1"
  message_id_domain              = "mail.example.com"
  default_from                   = "Support <support@example.com>"
  monitoring_notification_emails = ["ops@example.com"] # the alerts' channel (monitoring.tf)
}

run "firestore_by_default" {
  command = plan

  assert {
    condition     = length(google_sql_database_instance.jobs) == 0 && lookup(google_cloudfunctions2_function.send.service_config[0].environment_variables, "SAFESEND_STORE", "firestore") == "firestore"
    error_message = "Firestore is the default job store, without Cloud SQL."
  }
}

run "postgres_adds_cloud_sql_and_iam_login" {
  variables {
    job_store = "postgres"
  }

  assert {
    condition     = length(google_sql_database_instance.jobs) == 1 && google_sql_database_instance.jobs[0].deletion_protection
    error_message = "job_store = postgres creates one protected instance."
  }
  assert {
    condition = alltrue([for fn in [google_cloudfunctions2_function.send, google_cloudfunctions2_function.reconcile, google_cloudfunctions2_function.sweep, google_cloudfunctions2_function.status] :
      fn.service_config[0].environment_variables["SAFESEND_STORE"] == "postgres"
      && fn.service_config[0].environment_variables["SAFESEND_POSTGRES_IAM_AUTH"] == "true"
    ])
    error_message = "Every function uses the PostgreSQL store with IAM login."
  }
  assert {
    condition     = output.postgres_instance != null && output.postgres_connection_name != null && strcontains(output.postgres_setup_sql, "safesend")
    error_message = "The outputs the setup step runs (postgres_instance, postgres_connection_name, postgres_setup_sql) are there."
  }
}

run "too_few_connections_are_refused" {
  command = plan

  variables {
    job_store                = "postgres"
    postgres_max_connections = 25
    postgres_pool_max        = 5
  }

  expect_failures = [google_sql_database_instance.jobs]
}

run "an_unknown_job_store_is_refused" {
  command = plan

  variables {
    job_store = "mysql"
  }

  expect_failures = [var.job_store]
}
