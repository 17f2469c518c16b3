locals {
  source_bucket_name = var.source_bucket_name != "" ? var.source_bucket_name : "${var.project_id}-${var.name_prefix}-fn-src"
}

# Zip of the functions directory. Test files and bytecode caches are left out
# so that they neither bloat the upload nor change the hash. A fixed file mode
# keeps the zip (and so its md5) identical between a laptop and Cloud Build.
data "archive_file" "functions_source" {
  type             = "zip"
  source_dir       = "${path.module}/${var.functions_source_dir}"
  output_path      = "${path.module}/.build/functions-source.zip"
  output_file_mode = "0644"

  excludes = [
    "**/__pycache__",
    "**/*.pyc",
    "**/.pytest_cache",
    "**/tests",
    "**/.venv",
  ]
}

resource "google_storage_bucket" "functions_source" {
  project  = var.project_id
  name     = local.source_bucket_name
  location = var.region

  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"

  # Only disposable build inputs live here, but keep a mistaken destroy from
  # wiping the bucket while functions still reference it.
  force_destroy = false

  depends_on = [google_project_service.enabled]
}

# The object name carries the zip's md5: any source change gives a new name,
# which changes build_config.source on every function and so redeploys them.
# An unchanged source leaves the functions untouched.
resource "google_storage_bucket_object" "functions_source" {
  name         = "functions-${data.archive_file.functions_source.output_md5}.zip"
  bucket       = google_storage_bucket.functions_source.name
  source       = data.archive_file.functions_source.output_path
  content_type = "application/zip"
}
