# Sender mailboxes and pools (issue 24): the functions' SAFESEND_MAILBOXES_JSON, one Cloud Tasks
# queue per mailbox that paces its sends for every instance at once, and what each mailbox's
# credentials need. Nothing here exists without var.mailboxes: today's single mailbox is unchanged.
locals {
  mailboxes_enabled = length(var.mailboxes) > 0

  # Gmail API units per minute per user of each preset: functions/safesend/core/mailboxes.py's PRESETS
  # (tests/infra checks they agree). unlimited: no rate of safesend's own, the queue's maximum.
  mailbox_preset_units = {
    workspace             = 6000
    workspace_legacy_rate = 15000
    trial                 = 6000
    consumer              = 6000
    unlimited             = null
    exchange_online       = 3000 # Graph: 30 messages a minute, counted as 100 units each
  }
  # A mailbox's preset: its own, else its kind's default (mailboxes.py's KIND_DEFAULT_LIMITS).
  mailbox_presets = { for id, m in var.mailboxes : id => coalesce(m.limits, m.kind == "graph" ? "exchange_online" : "workspace") }

  # The document mailboxes.py parses, unset attributes left out (it refuses a null limit).
  mailboxes_document = {
    mailboxes = {
      for id, m in var.mailboxes : id => {
        for key, value in {
          address            = m.address
          kind               = m.kind == "gmail" ? null : m.kind
          delegated_user     = m.delegated_user
          token_secret       = m.token_secret
          tenant_id          = m.tenant_id
          client_id          = m.client_id
          federated          = m.kind == "graph" ? coalesce(m.federated, false) : null
          certificate_secret = m.certificate_secret
          send_as            = m.send_as
          safety_share       = m.safety_share
          limits = {
            for key, value in {
              preset             = local.mailbox_presets[id]
              units_per_minute   = m.units_per_minute
              messages_per_day   = m.messages_per_day
              recipients_per_day = m.recipients_per_day
            } : key => value if value != null
          }
        } : key => value if value != null
      }
    }
    pools = { for key, value in var.mailbox_pools : key => value if value != null }
  }
  mailboxes_json = local.mailboxes_enabled ? jsonencode(local.mailboxes_document) : ""

  # Per mailbox queue: messages.send costs 100 units, so units_per_minute / 100 / 60 sends per
  # second, times the safety share (the rest is left to our reads: list 5, get 5, history 2 units);
  # Cloud Tasks allows at most 500 dispatches per second.
  mailbox_queues = {
    for id, m in var.mailboxes : id => {
      name = "${var.name_prefix}-mbx-${id}"
      units_per_minute = (m.units_per_minute != null ? m.units_per_minute
      : local.mailbox_preset_units[local.mailbox_presets[id]])
      safety_share              = m.safety_share
      max_concurrent_dispatches = m.max_concurrent_dispatches
    }
  }

  # The functions that send through Gmail (and so enqueue a mailbox's sends and read its token).
  gmail_accounts = merge({
    send      = google_service_account.send.email
    reconcile = google_service_account.reconcile.email
    sweep     = google_service_account.sweep.email
    }, local.reviewers_enabled ? {
    notify = google_service_account.notify[0].email
    review = google_service_account.review[0].email
  } : {})
  mailbox_token_secrets = { for id, m in var.mailboxes : id => m.token_secret if m.token_secret != null }
  mailbox_delegated     = length([for m in values(var.mailboxes) : m if m.delegated_user != null]) > 0
  # Every (function, mailbox) pair, for the per-queue and per-secret grants.
  mailbox_grants = { for pair in flatten([
    for fn, email in local.gmail_accounts : [for id in keys(var.mailboxes) : { key = "${fn}/${id}", fn = fn, id = id, email = email }]
  ]) : pair.key => pair }
  mailbox_token_grants = { for key, pair in local.mailbox_grants : key => pair if contains(keys(local.mailbox_token_secrets), pair.id) }
  # Graph mailboxes with a certificate (not federated): its secret, read by the same functions.
  graph_certificate_secrets = { for id, m in var.mailboxes : id => m.certificate_secret if m.certificate_secret != null }
  graph_certificate_grants  = { for key, pair in local.mailbox_grants : key => pair if contains(keys(local.graph_certificate_secrets), pair.id) }
  graph_federated           = length([for m in values(var.mailboxes) : m if m.kind == "graph" && coalesce(m.federated, false)]) > 0
}

# One queue per mailbox: its dispatch rate is the mailbox's send budget, shared by every instance of
# every function (a queued job's turn is a task on its mailbox's queue; Cloud Tasks hands them out at
# this rate). A turn the ledger cannot admit yet books a later turn (a new task) and is answered 200;
# a reconcile that fails (503) is retried here.
# A deleted queue name cannot be reused for about 7 days.
resource "google_cloud_tasks_queue" "mailbox" {
  for_each = local.mailbox_queues

  project  = var.project_id
  name     = each.value.name
  location = var.region

  rate_limits {
    max_dispatches_per_second = (each.value.units_per_minute == null ? 500
    : min(500, each.value.units_per_minute * each.value.safety_share / 6000))
    max_concurrent_dispatches = each.value.max_concurrent_dispatches
  }

  # Backs off from 5 s to 10 min; 150 attempts span about the 24 h of a rolling daily window.
  retry_config {
    max_attempts  = 150
    min_backoff   = "5s"
    max_backoff   = "600s"
    max_doublings = 7
  }

  depends_on = [google_project_service.enabled]
}

resource "google_cloud_tasks_queue_iam_member" "mailbox_enqueuer" {
  for_each = local.mailbox_grants

  project  = var.project_id
  location = var.region
  name     = google_cloud_tasks_queue.mailbox[each.value.id].name
  role     = "roles/cloudtasks.enqueuer"
  member   = "serviceAccount:${each.value.email}"
}

# A mailbox with its own OAuth token: the secret that must hold it (authorized-user JSON, added
# with `gcloud secrets versions add`), read by every function that sends.
resource "google_secret_manager_secret" "mailbox_token" {
  for_each = local.mailbox_token_secrets

  project   = var.project_id
  secret_id = each.value

  replication {
    auto {}
  }

  depends_on = [google_project_service.enabled]
}

resource "google_secret_manager_secret_iam_member" "mailbox_token" {
  for_each = local.mailbox_token_grants

  project   = var.project_id
  secret_id = google_secret_manager_secret.mailbox_token[each.value.id].secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${each.value.email}"
}

# A Graph mailbox with a certificate (docs/graph-provider.md): the secret that must hold
# {"private_key": PEM, "thumbprint": hex} (added with `gcloud secrets versions add`), readable by the
# functions that send and on that secret only. A federated mailbox needs nothing here: the functions'
# own Google ID token is the credential (output graph_federation_subjects).
resource "google_secret_manager_secret" "graph_certificate" {
  for_each = local.graph_certificate_secrets

  project   = var.project_id
  secret_id = each.value

  replication {
    auto {}
  }

  depends_on = [google_project_service.enabled]
}

resource "google_secret_manager_secret_iam_member" "graph_certificate" {
  for_each = local.graph_certificate_grants

  project   = var.project_id
  secret_id = google_secret_manager_secret.graph_certificate[each.value.id].secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${each.value.email}"
}
