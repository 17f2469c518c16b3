# Images built from the source zip go to a repository of our own, so the build
# service account can be granted artifactregistry.writer on this repository
# only (instead of project-wide on gcf-artifacts).
resource "google_artifact_registry_repository" "functions" {
  #checkov:skip=CKV_GCP_84:Images hold only the function code from this repository, no data or secrets; Google-managed encryption at rest is enough and a CMEK key would add a key lifecycle that can lock out deployments.

  project       = var.project_id
  location      = var.region
  repository_id = "${var.name_prefix}-functions"
  format        = "DOCKER"
  description   = "safesend Cloud Functions images (built by Cloud Build from the source zip)."

  # Keep the images of the last few deployments for rollbacks, drop the rest.
  cleanup_policies {
    id     = "keep-recent"
    action = "KEEP"
    most_recent_versions {
      keep_count = var.artifact_keep_count
    }
  }

  cleanup_policies {
    id     = "delete-old"
    action = "DELETE"
    condition {
      older_than = "2592000s" # 30 days
    }
  }

  depends_on = [google_project_service.enabled]
}

# Identity Cloud Build uses to turn the zip into images. A dedicated account
# avoids depending on the default compute / Cloud Build accounts, whose grants
# vary between projects (iam.automaticIamGrantsForDefaultServiceAccounts).
resource "google_service_account" "build" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-build"
  display_name = "safesend function builder"
  description  = "Builds the safesend Cloud Functions images."

  depends_on = [google_project_service.enabled]
}

# Roles documented for a user-specified build service account
# (cloud.google.com/run/docs/configuring/services/build-service-account:
# "Logs Writer ... for storing build logs", "Artifact Registry Writer ... for
# storing build images", "Storage Object Admin ... for retrieving the function
# source from the Cloud Storage bucket"), each on the narrowest scope:
#
# * logs: project level (logging.logWriter has no narrower resource);
# * images: our repository only (build_writer below);
# * source: the function's storage_source is our own bucket, and Cloud
#   Functions keeps deployed code in its source bucket
#   gcf-v2-sources-<project number>-<region> (-<CMEK key hash> with CMEK;
#   cloud.google.com/functions/docs/building). Which of the two the build
#   reads is not documented for a source in a user bucket, so both are
#   granted, each on that bucket alone: read on ours (bucket IAM, exists
#   before any build), objectAdmin on Cloud Functions' (created by the service
#   on first deploy, so a project-level grant with a condition naming it).
#   Neither reaches the Terraform state or any other bucket.
resource "google_project_iam_member" "build_log_writer" {
  project = var.project_id
  role    = "roles/logging.logWriter"
  member  = "serviceAccount:${google_service_account.build.email}"
}

resource "google_storage_bucket_iam_member" "build_reads_source" {
  bucket = google_storage_bucket.functions_source.name
  role   = "roles/storage.objectViewer"
  member = "serviceAccount:${google_service_account.build.email}"
}

resource "google_project_iam_member" "build_source_access" {
  project = var.project_id
  role    = "roles/storage.objectAdmin"
  member  = "serviceAccount:${google_service_account.build.email}"

  condition {
    title       = "gcf-v2-sources bucket only"
    description = "Cloud Functions' source bucket for this project and region (any CMEK suffix)."
    expression  = "resource.name.startsWith(\"projects/_/buckets/gcf-v2-sources-${data.google_project.this.number}-${var.region}\")"
  }
}

resource "google_artifact_registry_repository_iam_member" "build_writer" {
  project    = var.project_id
  location   = google_artifact_registry_repository.functions.location
  repository = google_artifact_registry_repository.functions.name
  role       = "roles/artifactregistry.writer"
  member     = "serviceAccount:${google_service_account.build.email}"
}
