# Resources that became conditional (count) keep their state: an existing
# object at the unindexed address is now instance [0] ("Create multiple
# instances", developer.hashicorp.com/terraform/language/modules/develop/refactoring).
# With gmail_delegated_user set, instance [0] is no longer declared and is
# destroyed: the OAuth token secret and its readers go, delegation is keyless.

moved {
  from = google_secret_manager_secret.gmail_credentials
  to   = google_secret_manager_secret.gmail_credentials[0]
}

moved {
  from = google_secret_manager_secret_iam_member.send_gmail_credentials
  to   = google_secret_manager_secret_iam_member.send_gmail_credentials[0]
}

moved {
  from = google_secret_manager_secret_iam_member.reconcile_gmail_credentials
  to   = google_secret_manager_secret_iam_member.reconcile_gmail_credentials[0]
}

moved {
  from = google_secret_manager_secret_iam_member.sweep_gmail_credentials
  to   = google_secret_manager_secret_iam_member.sweep_gmail_credentials[0]
}

# The sweeper's index, now one of the indexes listed in infra/firestore.indexes.json.
moved {
  from = google_firestore_index.jobs_due
  to   = google_firestore_index.jobs["state,next_check_at"]
}

# roles/datastore.user became conditional (none with job_store = "postgres"): the existing
# grants of the four functions are instance [0].
moved {
  from = google_project_iam_member.send_datastore_user
  to   = google_project_iam_member.send_datastore_user[0]
}

moved {
  from = google_project_iam_member.reconcile_datastore_user
  to   = google_project_iam_member.reconcile_datastore_user[0]
}

moved {
  from = google_project_iam_member.sweep_datastore_user
  to   = google_project_iam_member.sweep_datastore_user[0]
}

moved {
  from = google_project_iam_member.status_datastore_user
  to   = google_project_iam_member.status_datastore_user[0]
}
