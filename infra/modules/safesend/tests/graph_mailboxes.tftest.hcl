# Microsoft 365 mailboxes (issue 22): a graph mailbox beside a Gmail one in one pool, federated (no
# secret) or with a certificate in Secret Manager, paced at Exchange Online's 30 messages a minute.

mock_provider "google" {
  mock_data "google_project" {
    defaults = {
      number = "123456789012"
    }
  }
  mock_resource "google_service_account" {
    defaults = {
      unique_id = "104857600000000000000"
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

run "a_pool_mixes_gmail_and_graph" {
  command = apply

  variables {
    mailboxes = {
      shop = { address = "shop@example.com", delegated_user = "shop@example.com" }
      m365 = {
        address   = "m365@contoso.com"
        kind      = "graph"
        tenant_id = "00000000-0000-0000-0000-000000000000"
        client_id = "11111111-1111-1111-1111-111111111111"
        federated = true
      }
      certs = {
        address            = "certs@contoso.com"
        kind               = "graph"
        tenant_id          = "contoso.onmicrosoft.com"
        client_id          = "11111111-1111-1111-1111-111111111111"
        certificate_secret = "graph-cert-certs"
      }
    }
    mailbox_pools = { default = ["shop", "m365", "certs"] }
  }

  assert {
    condition = jsondecode(google_cloudfunctions2_function.send.service_config[0].environment_variables["SAFESEND_MAILBOXES_JSON"]).mailboxes == {
      shop  = { address = "shop@example.com", delegated_user = "shop@example.com", send_as = [], safety_share = 0.95, limits = { preset = "workspace" } }
      m365  = { address = "m365@contoso.com", kind = "graph", tenant_id = "00000000-0000-0000-0000-000000000000", client_id = "11111111-1111-1111-1111-111111111111", federated = true, send_as = [], safety_share = 0.95, limits = { preset = "exchange_online" } }
      certs = { address = "certs@contoso.com", kind = "graph", tenant_id = "contoso.onmicrosoft.com", client_id = "11111111-1111-1111-1111-111111111111", federated = false, certificate_secret = "graph-cert-certs", send_as = [], safety_share = 0.95, limits = { preset = "exchange_online" } }
    }
    error_message = "A graph mailbox renders its kind, Entra app and credential; its default limits are Exchange Online's."
  }
  assert {
    condition     = abs(google_cloud_tasks_queue.mailbox["m365"].rate_limits[0].max_dispatches_per_second - 0.475) < 0.000001
    error_message = "exchange_online: 30 messages a minute x 0.95 = 0.475 sends per second."
  }
  assert {
    condition     = toset(keys(google_secret_manager_secret.graph_certificate)) == toset(["certs"]) && google_secret_manager_secret.graph_certificate["certs"].secret_id == "graph-cert-certs" && length(google_secret_manager_secret.mailbox_token) == 0
    error_message = "Only the certificate mailbox has a secret; the federated one has none."
  }
  assert {
    condition     = toset(keys(google_secret_manager_secret_iam_member.graph_certificate)) == toset(["send/certs", "reconcile/certs", "sweep/certs"]) && alltrue([for g in values(google_secret_manager_secret_iam_member.graph_certificate) : g.role == "roles/secretmanager.secretAccessor" && g.secret_id == "graph-cert-certs"])
    error_message = "The functions that send may read that certificate secret, and only that one."
  }
  assert {
    condition     = toset(keys(output.graph_federation_subjects)) == toset(["send", "reconcile", "sweep"]) && alltrue([for id in values(output.graph_federation_subjects) : id == "104857600000000000000"])
    error_message = "The federated credential subjects: the unique ID of each function that sends."
  }
}

run "without_a_federated_graph_mailbox_there_is_no_subject" {
  command = plan

  variables {
    mailboxes = { shop = { address = "shop@example.com", delegated_user = "shop@example.com" } }
  }

  assert {
    condition     = length(output.graph_federation_subjects) == 0 && length(google_secret_manager_secret.graph_certificate) == 0
    error_message = "Gmail only: no federation subject, no certificate secret."
  }
}

run "a_graph_mailbox_with_both_credentials_is_refused" {
  command = plan

  variables {
    mailboxes = { m365 = { address = "m365@contoso.com", kind = "graph", tenant_id = "t", client_id = "c", federated = true, certificate_secret = "graph-cert" } }
  }

  expect_failures = [var.mailboxes]
}

run "a_graph_mailbox_without_its_app_is_refused" {
  command = plan

  variables {
    mailboxes = { m365 = { address = "m365@contoso.com", kind = "graph", federated = true } }
  }

  expect_failures = [var.mailboxes]
}

run "a_graph_mailbox_with_a_gmail_credential_is_refused" {
  command = plan

  variables {
    mailboxes = { m365 = { address = "m365@contoso.com", kind = "graph", tenant_id = "t", client_id = "c", federated = true, token_secret = "gmail-token" } }
  }

  expect_failures = [var.mailboxes]
}

run "an_unknown_kind_is_refused" {
  command = plan

  variables {
    mailboxes = { m365 = { address = "m365@contoso.com", kind = "exchange", tenant_id = "t", client_id = "c", federated = true } }
  }

  expect_failures = [var.mailboxes]
}
