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

# The composite indexes the code's queries need (FirestoreJobStore):
#   find_due:          state == X, next_check_at <= now, order by next_check_at
#                      -> (state ASC, next_check_at ASC)
#   find_open_reviews: state in [...], order by updated_at -> (state ASC, updated_at ASC)
# (find_notices_due filters and orders on one field: Firestore's automatic
# single-field index serves it.) Firestore appends __name__ itself.
#
# infra/firestore.indexes.json is the one list of them (Firebase format, written
# for the default collection ai_jobs): this module and cloudbuild-gcloud.yaml
# (infra/env_spec.py index-plan) both read it and put every index on the
# collection the functions are configured with (var.jobs_collection, the same
# value as SAFESEND_JOBS_COLLECTION). tests/infra/test_firestore_indexes.py
# derives the indexes from the code and checks the file, this resource and the
# gcloud step. The provider waits until each index is built; sweep is deployed
# after them (functions.tf).
#
# No TTL policy: the code sets no expiry field on job documents, and a job's
# record is what makes a retried webhook a replay instead of a second email.
locals {
  jobs_indexes = {
    for index in jsondecode(file("${path.module}/../../firestore.indexes.json")).indexes :
    join(",", [for field in index.fields : field.fieldPath]) => index
  }
}

resource "google_firestore_index" "jobs" {
  for_each = local.jobs_indexes

  project     = var.project_id
  database    = "(default)"
  collection  = var.jobs_collection
  query_scope = each.value.queryScope

  dynamic "fields" {
    for_each = each.value.fields
    content {
      field_path = fields.value.fieldPath
      order      = fields.value.order
    }
  }

  depends_on = [google_firestore_database.default, google_project_service.enabled]
}
