# Sender mailboxes and pools (issue 24): one paced queue per mailbox, the JSON the functions parse,
# and nothing new when mailboxes is unset.

mock_provider "google" {
  mock_data "google_project" {
    defaults = {
      number = "123456789012"
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

run "unset_mailboxes_change_nothing" {
  command = plan

  assert {
    condition     = length(google_cloud_tasks_queue.mailbox) == 0 && length(google_cloud_tasks_queue_iam_member.mailbox_enqueuer) == 0
    error_message = "Without mailboxes there is no mailbox queue and no grant on one."
  }
  assert {
    condition     = length(google_secret_manager_secret.mailbox_token) == 0 && length(google_service_account_iam_member.send_signs_own_jwt) == 0
    error_message = "Without mailboxes: no token secret, and (no delegation) no JWT signing."
  }
  assert {
    condition = alltrue([
      for name in ["SAFESEND_MAILBOXES_JSON", "SAFESEND_MAILBOX_QUEUE_PREFIX"] :
      !contains(keys(google_cloudfunctions2_function.send.service_config[0].environment_variables), name)
    ])
    error_message = "Without mailboxes the functions get no mailbox settings (today's single mailbox)."
  }
}

run "two_mailboxes_and_a_pool" {
  command = plan

  variables {
    reviewers_enabled     = true
    review_iap_members    = ["group:mail-reviewers@example.com"]
    review_allowed_emails = ["ann@example.com"]
    mailboxes = {
      shop = {
        address        = "shop@example.com"
        delegated_user = "shop@example.com"
        send_as        = ["orders@example.com"]
      }
      news = {
        address          = "news@example.com"
        token_secret     = "gmail-token-news"
        limits           = "workspace_legacy_rate"
        messages_per_day = 1500
        safety_share     = 0.9
      }
    }
    mailbox_pools = {
      default  = ["shop", "news"]
      channels = { receipts = ["shop"] }
      from     = { "example.com" = ["shop", "news"] }
    }
  }

  assert {
    condition     = toset(keys(google_cloud_tasks_queue.mailbox)) == toset(["shop", "news"])
    error_message = "One queue per mailbox."
  }
  assert {
    condition     = google_cloud_tasks_queue.mailbox["shop"].name == "safesend-mbx-shop" && google_cloud_tasks_queue.mailbox["news"].location == "europe-west1"
    error_message = "Queues are named <prefix>-mbx-<id>, in the functions' region."
  }
  assert {
    condition     = abs(google_cloud_tasks_queue.mailbox["shop"].rate_limits[0].max_dispatches_per_second - 0.95) < 0.000001
    error_message = "workspace: 6,000 units/min / 100 per send / 60 s x 0.95 = 0.95 sends per second."
  }
  assert {
    condition     = abs(google_cloud_tasks_queue.mailbox["news"].rate_limits[0].max_dispatches_per_second - 2.25) < 0.000001
    error_message = "workspace_legacy_rate: 15,000 units/min / 6,000 x 0.9 = 2.25 sends per second."
  }
  assert {
    condition     = google_cloud_tasks_queue.mailbox["shop"].rate_limits[0].max_concurrent_dispatches == 4 && google_cloud_tasks_queue.mailbox["shop"].retry_config[0].max_backoff == "600s"
    error_message = "4 sends in flight per mailbox; retries back off to 10 minutes."
  }
  assert {
    condition = jsondecode(google_cloudfunctions2_function.send.service_config[0].environment_variables["SAFESEND_MAILBOXES_JSON"]) == {
      mailboxes = {
        news = { address = "news@example.com", token_secret = "gmail-token-news", send_as = [], safety_share = 0.9, limits = { preset = "workspace_legacy_rate", messages_per_day = 1500 } }
        shop = { address = "shop@example.com", delegated_user = "shop@example.com", send_as = ["orders@example.com"], safety_share = 0.95, limits = { preset = "workspace" } }
      }
      pools = { default = ["shop", "news"], channels = { receipts = ["shop"] }, from = { "example.com" = ["shop", "news"] } }
    }
    error_message = "SAFESEND_MAILBOXES_JSON is the mailboxes.py document, unset attributes left out."
  }
  assert {
    condition = alltrue([
      for fn in [google_cloudfunctions2_function.send, google_cloudfunctions2_function.reconcile, google_cloudfunctions2_function.sweep, google_cloudfunctions2_function.notify[0], google_cloudfunctions2_function.review[0]] :
      fn.service_config[0].environment_variables["SAFESEND_MAILBOX_QUEUE_PREFIX"] == "projects/p-test/locations/europe-west1/queues/safesend-mbx-"
    ])
    error_message = "Every function that sends knows the queue prefix (queue = prefix + mailbox id)."
  }
  assert {
    condition     = length(google_cloud_tasks_queue_iam_member.mailbox_enqueuer) == 10 && google_cloud_tasks_queue_iam_member.mailbox_enqueuer["review/news"].role == "roles/cloudtasks.enqueuer"
    error_message = "send, reconcile, sweep, notify and review may enqueue on both queues."
  }
  assert {
    condition     = toset(keys(google_secret_manager_secret.mailbox_token)) == toset(["news"]) && google_secret_manager_secret.mailbox_token["news"].secret_id == "gmail-token-news"
    error_message = "Only the token mailbox has a secret, under the id it names."
  }
  assert {
    condition     = toset(keys(google_secret_manager_secret_iam_member.mailbox_token)) == toset(["send/news", "reconcile/news", "sweep/news", "notify/news", "review/news"])
    error_message = "Every function that sends may read the token of news, and only that one."
  }
  assert {
    condition     = length(google_service_account_iam_member.send_signs_own_jwt) == 1 && length(google_service_account_iam_member.review_signs_own_jwt) == 1
    error_message = "A delegated mailbox: the functions sign their delegation JWT as themselves (the one client ID per function serves every delegated mailbox)."
  }
}

run "an_invalid_mailbox_id_is_refused" {
  command = plan

  variables {
    mailboxes = { Shop_1 = { address = "shop@example.com", delegated_user = "shop@example.com" } }
  }

  expect_failures = [var.mailboxes]
}

run "an_unknown_preset_is_refused" {
  command = plan

  variables {
    mailboxes = { shop = { address = "shop@example.com", delegated_user = "shop@example.com", limits = "enterprise" } }
  }

  expect_failures = [var.mailboxes]
}

run "two_auths_for_one_mailbox_are_refused" {
  command = plan

  variables {
    mailboxes = { shop = { address = "shop@example.com", delegated_user = "shop@example.com", token_secret = "gmail-token-shop" } }
  }

  expect_failures = [var.mailboxes]
}

run "a_pool_of_unknown_mailboxes_is_refused" {
  command = plan

  variables {
    mailboxes     = { shop = { address = "shop@example.com", delegated_user = "shop@example.com" } }
    mailbox_pools = { channels = { receipts = ["shop", "news"] } }
  }

  expect_failures = [google_cloud_tasks_queue.reconcile]
}
