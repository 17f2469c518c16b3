# Firestore "(default)" database in native mode. A project has exactly one
# "(default)" database and it may already exist (created in the console or by
# another stack); set manage_firestore_database = false in that case, or import
# it (see README).
resource "google_firestore_database" "default" {
  count = var.manage_firestore_database ? 1 : 0

  project     = var.project_id
  name        = "(default)"
  location_id = var.firestore_location
  type        = "FIRESTORE_NATIVE"

  # The database holds the idempotency records that stop double sends:
  # losing it would be worse than a failed destroy.
  delete_protection_state = "DELETE_PROTECTION_ENABLED"
  deletion_policy         = "ABANDON"

  depends_on = [google_project_service.enabled]
}

# The sweeper runs
#   where state == X and next_check_at <= now order by next_check_at
# on the jobs collection. Equality + range/order on different fields needs a
# composite index (state ASC, next_check_at ASC). query_scope COLLECTION is the
# scope for ordinary (non collection-group) queries; Firestore appends
# __name__ itself.
resource "google_firestore_index" "jobs_by_state_next_check" {
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
