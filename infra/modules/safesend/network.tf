# The network between the functions and the Cloud SQL instance (job_store = "postgres" only).
#
# The instance has a private IP only (cloudsql.tf): it is allocated from a range reserved in this
# network for Google's service producer network and reached over the peering that private
# services access creates (cloud.google.com/sql/docs/postgres/configure-private-services-access).
# The functions reach it with Direct VPC egress (functions.tf: direct_vpc_network_interface on
# the <prefix>-functions subnet, private ranges only), which google_cloudfunctions2_function
# declares itself: every deploy, by Terraform or gcloud, carries it
# (cloud.google.com/functions/docs/running/direct-vpc). Everything else the functions call
# (Gmail, Google APIs, webhooks) does not go through this network.
#
# Enabling compute.googleapis.com in a project that never had it creates the "default" network
# with its permissive firewall rules unless the organisation policy
# compute.skipDefaultNetworkCreation is set: safesend does not use it (infra/README.md).

resource "google_compute_network" "jobs" {
  count = local.postgres ? 1 : 0

  project                 = var.project_id
  name                    = "${var.name_prefix}-vpc"
  description             = "safesend: the functions' path to the Cloud SQL job store (private IP only)."
  auto_create_subnetworks = false
  routing_mode            = "REGIONAL"

  depends_on = [google_project_service.enabled]
}

# Nothing enters this network: Direct VPC egress only sends, and the instance's replies are
# return traffic of those connections. The rule is what the implied deny-ingress rule already
# does, made explicit so it is visible and its hits are logged.
resource "google_compute_firewall" "deny_ingress" {
  count = local.postgres ? 1 : 0

  project     = var.project_id
  name        = "${var.name_prefix}-deny-ingress"
  description = "safesend: nothing connects into the job store's network."
  network     = google_compute_network.jobs[0].name
  direction   = "INGRESS"
  priority    = 65534

  source_ranges = ["0.0.0.0/0"]

  deny {
    protocol = "all"
  }

  log_config {
    metadata = "INCLUDE_ALL_METADATA"
  }
}

# Direct VPC egress takes the functions' addresses from this subnet (in blocks of 16 as they
# scale; cloud.google.com/run/docs/configuring/vpc-direct-vpc). Private Google Access lets
# traffic to Google APIs stay internal if egress ever covers all traffic.
resource "google_compute_subnetwork" "functions" {
  count = local.postgres ? 1 : 0

  project                  = var.project_id
  name                     = "${var.name_prefix}-functions"
  region                   = var.region
  network                  = google_compute_network.jobs[0].id
  ip_cidr_range            = var.postgres_subnet_cidr
  private_ip_google_access = true

  # Flow logs of the database connections (sampled; a few MB a day at safesend's rates).
  log_config {
    aggregation_interval = "INTERVAL_10_MIN"
    flow_sampling        = 0.5
    metadata             = "INCLUDE_ALL_METADATA"
  }
}

# Private services access: a range for Google's service producer network, peered with ours.
resource "google_compute_global_address" "cloudsql_psa" {
  count = local.postgres ? 1 : 0

  project       = var.project_id
  name          = "${var.name_prefix}-cloudsql-psa"
  description   = "safesend: private services access range (the Cloud SQL instance's private IP)."
  purpose       = "VPC_PEERING"
  address_type  = "INTERNAL"
  prefix_length = var.postgres_psa_prefix_length
  network       = google_compute_network.jobs[0].id
}

resource "google_service_networking_connection" "cloudsql" {
  count = local.postgres ? 1 : 0

  network                 = google_compute_network.jobs[0].id
  service                 = "servicenetworking.googleapis.com"
  reserved_peering_ranges = [google_compute_global_address.cloudsql_psa[0].name]

  # Removing the peering fails while the service producer still holds the instance's address
  # (deleted instances keep it for a while): Terraform forgets the connection instead.
  deletion_policy = "ABANDON"
}
