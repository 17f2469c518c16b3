# Firestore "(default)" database in native mode. A project has one "(default)"
# database and it may already exist: set manage_firestore_database = false then
# (or import it, see infra/README.md).
resource "google_firestore_database" "default" {
  count = var.manage_firestore_database ? 1 : 0

  project     = var.project_id
  name        = "(default)"
  location_id = var.firestore_location
  type        = "FIRESTORE_NATIVE"

  # The job documents are the idempotency records that stop double sends.
  point_in_time_recovery_enablement = var.firestore_point_in_time_recovery ? "POINT_IN_TIME_RECOVERY_ENABLED" : "POINT_IN_TIME_RECOVERY_DISABLED"
  delete_protection_state           = var.firestore_delete_protection ? "DELETE_PROTECTION_ENABLED" : "DELETE_PROTECTION_DISABLED"
  # `terraform destroy` removes the database from the state but never deletes
  # it (see "Tearing down" in infra/README.md).
  deletion_policy = "ABANDON"

  depends_on = [google_project_service.enabled]
}

# The only query the code runs (FirestoreJobStore.find_due):
#   collection(jobs).where(state == X).where(next_check_at <= now)
#                   .order_by(next_check_at).limit(N)
# An equality filter plus a range/order on another field needs the composite
# index (state ASC, next_check_at ASC); Firestore appends __name__ itself.
# The same index is declared for gcloud/firebase in infra/firestore.indexes.json;
# tests/infra/test_firestore_indexes.py derives it from the code and checks both.
#
# No TTL policy: the code sets no expiry field on job documents, and a job's
# record is what makes a retried webhook a replay instead of a second email.
resource "google_firestore_index" "jobs_due" {
  project     = var.project_id
  database    = "(default)"
  collection  = var.jobs_collection
  query_scope = "COLLECTION"

  fields {
    field_path = "state"
    order      = "ASCENDING"
  }

  fields {
    field_path = "next_check_at"
    order      = "ASCENDING"
  }

  depends_on = [google_firestore_database.default, google_project_service.enabled]
}
