locals {
  functions_source_dir = var.functions_source_dir != "" ? var.functions_source_dir : "${path.module}/../../../functions"
  source_bucket_name   = var.source_bucket_name != "" ? var.source_bucket_name : "${var.project_id}-${var.name_prefix}-fn-src"
  # What ships of functions/ (infra/package_source.py INCLUDES, checked equal): code, policy, SQL,
  # the console's templates and static files, all text. No caches, tests or local venvs.
  functions_globs = [
    "main.py",
    "channels.toml",
    "safesend/**/*.py",
    "safesend/**/*.sql",
    "safesend/**/*.html",
    "safesend/**/*.css",
    "safesend/**/*.js",
    "safesend/**/*.svg",
  ]
  functions_files = toset(flatten([for glob in local.functions_globs : tolist(fileset(local.functions_source_dir, glob))]))
  # The job store's hashed lock ships as requirements.txt: only job_store = "postgres" installs psycopg.
  functions_requirements = var.job_store == "postgres" ? "requirements-postgres.txt" : "requirements.txt"
}

# The deploy artifact: those files plus the store's requirements.txt. tests/infra
# builds the same zip with infra/package_source.py (same globs, checked) and
# installs it into a fresh venv. Modification times are not stored (the archive
# provider writes a fixed time) and the file mode is fixed, so the hash
# depends on the content only, on a laptop and in Cloud Build alike.
data "archive_file" "functions_source" {
  type             = "zip"
  output_path      = "${path.root}/.terraform/safesend-functions-source.zip"
  output_file_mode = "0644"

  dynamic "source" {
    for_each = local.functions_files
    content {
      content  = file("${local.functions_source_dir}/${source.value}")
      filename = source.value
    }
  }
  source {
    content  = file("${local.functions_source_dir}/${local.functions_requirements}")
    filename = "requirements.txt"
  }
}

resource "google_storage_bucket" "functions_source" {
  #checkov:skip=CKV_GCP_62:Holds only build inputs (zips of this repository's functions/ code); admin access is in Cloud Audit Logs, and usage logs would need a second bucket to receive them.

  project  = var.project_id
  name     = local.source_bucket_name
  location = var.region

  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = var.source_bucket_force_destroy

  # Each source version is its own object (the name is its hash), so nothing
  # is overwritten; versioning only guards against a mistaken delete, and such
  # deleted (noncurrent) copies go after 30 days. Zips are ~100 kB and stay.
  versioning {
    enabled = true
  }

  lifecycle_rule {
    condition {
      days_since_noncurrent_time = 30
      with_state                 = "ARCHIVED"
    }
    action {
      type = "Delete"
    }
  }

  depends_on = [google_project_service.enabled]
}

# The object name carries the zip's SHA-256: any change to the source gives a
# new name, which changes build_config.source.storage_source.object on every
# function and so rebuilds and redeploys them; an unchanged source leaves them
# alone.
resource "google_storage_bucket_object" "functions_source" {
  name         = "functions-${data.archive_file.functions_source.output_sha256}.zip"
  bucket       = google_storage_bucket.functions_source.name
  source       = data.archive_file.functions_source.output_path
  content_type = "application/zip"
}
