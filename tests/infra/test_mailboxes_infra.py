"""Sender mailboxes and pools in infra/ (issue 24): what Terraform renders into
SAFESEND_MAILBOXES_JSON is a document functions/safesend/core/mailboxes.py accepts, with the limits and
aliases the tfvars declare, and both deploy paths use mailboxes.py's presets for the queues' rates."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from . import hcl_eval as H  # noqa: N812 - H reads like the HCL it evaluates
from .support import FUNCTIONS, HCL2_LIB, MODULE, TOOL, infra_bin, locals_of, run_tool
from .test_env_parity import env_spec
from .tfmodel import ModuleModel


def safesend_mailboxes():
    if str(FUNCTIONS) not in sys.path:
        sys.path.insert(0, str(FUNCTIONS))
    from safesend.core import mailboxes

    return mailboxes


def example_tfvars() -> dict:
    path = Path(__file__).with_name("fixtures") / "mailboxes.tfvars"
    proc = run_tool([str(infra_bin("python")), "-I", str(TOOL), "hcl", str(HCL2_LIB), str(path)])
    assert proc.returncode == 0, proc.stderr
    parsed = json.loads(proc.stdout)[str(path)]
    assert "__error__" not in parsed, parsed
    return parsed


def test_the_dev_example_renders_a_document_mailboxes_py_accepts():
    tfvars = example_tfvars()
    model = ModuleModel({"mailboxes": tfvars["mailboxes"], "mailbox_pools": tfvars["mailbox_pools"]})
    rendered = model.local("function_env")["send"]["SAFESEND_MAILBOXES_JSON"]
    directory = safesend_mailboxes().MailboxDirectory.from_mapping(json.loads(rendered))
    assert directory.ids() == ["shop", "trial"]
    shop, trial = directory.get("shop"), directory.get("trial")
    assert shop.delegated_user == "shop@example.com" and shop.may_send_as("orders@example.com")
    assert trial.token_secret == "safesend-gmail-token-trial" and trial.delegated_user is None
    assert trial.limits.messages_per_day == 500 and trial.day_allowance(trial.limits.messages_per_day) == 450
    assert shop.limits.units_per_minute == 6000 and shop.limits.recipients_per_day == 10_000
    assert [m.id for m in directory.candidates("receipts", "orders@example.com")] == ["shop"]
    # the gcloud path renders the very same bytes from the same values
    module = env_spec()
    document, queues = module.render_mailboxes(
        {"mailboxes": tfvars["mailboxes"], "mailbox_pools": tfvars["mailbox_pools"]}, "safesend"
    )
    assert document == rendered
    assert [(q.name, q.max_dispatches_per_second) for q in queues] == [
        ("safesend-mbx-shop", 0.95),
        ("safesend-mbx-trial", 0.9),
    ]


def test_explicit_limits_override_the_preset_in_the_parsed_mailbox():
    model = ModuleModel(
        {
            "mailboxes": {
                "news": {
                    "address": "news@example.com",
                    "token_secret": "tok",
                    "limits": "consumer",
                    "messages_per_day": 300,
                    "units_per_minute": 3000,
                }
            }
        }
    )
    directory = safesend_mailboxes().MailboxDirectory.from_mapping(json.loads(model.local("mailboxes_json")))
    limits = directory.get("news").limits
    assert (limits.units_per_minute, limits.messages_per_day, limits.recipients_per_day) == (3000, 300, 500)
    (queue,) = model.instances("google_cloud_tasks_queue", "mailbox")
    assert queue["rate_limits"][0]["max_dispatches_per_second"] == pytest.approx(3000 * 0.95 / 6000)


def test_presets_are_mailboxes_py_presets_in_terraform_and_in_env_spec_py():
    presets = safesend_mailboxes().PRESETS
    terraform = H.evaluate_value(locals_of(MODULE)["mailbox_preset_units"], H.Scope())
    assert terraform == {name: limits.units_per_minute for name, limits in presets.items()}
    assert terraform == env_spec().MAILBOX_PRESET_UNITS


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"mailboxes": {"Shop": {"address": "s@example.com", "delegated_user": "s@example.com"}}}, "an id is"),
        ({"mailboxes": {"s": {"address": "s@example.com", "token_secret": "t", "limits": "pro"}}}, "preset"),
        ({"mailboxes": {"s": {"address": "s@example.com"}}}, "exactly one"),
        (
            {
                "mailboxes": {"s": {"address": "s@example.com", "token_secret": "t"}},
                "mailbox_pools": {"channels": {"x": ["s", "t"]}},
            },
            "unknown mailbox",
        ),
    ],
)
def test_the_gcloud_path_refuses_what_terraform_refuses(change, problem):
    module = env_spec()
    with pytest.raises(module.SpecError, match=problem):
        module.render_mailboxes(change, "safesend")


def test_without_mailboxes_nothing_is_rendered():
    assert env_spec().render_mailboxes({}, "safesend") == ("", [])
    model = ModuleModel()
    assert model.local("mailboxes_json") == "" and model.instances("google_cloud_tasks_queue", "mailbox") == []


GRAPH_POOL = {
    "mailboxes": {
        "shop": {"address": "shop@example.com", "delegated_user": "shop@example.com"},
        "m365": {
            "address": "m365@contoso.com",
            "kind": "graph",
            "tenant_id": "00000000-0000-0000-0000-000000000000",
            "client_id": "11111111-1111-1111-1111-111111111111",
            "federated": True,
        },
        "certs": {
            "address": "certs@contoso.com",
            "kind": "graph",
            "tenant_id": "contoso.onmicrosoft.com",
            "client_id": "11111111-1111-1111-1111-111111111111",
            "certificate_secret": "graph-cert-certs",
        },
    },
    "mailbox_pools": {"default": ["shop", "m365", "certs"]},
}


def test_a_pool_of_gmail_and_graph_mailboxes_renders_what_mailboxes_py_accepts_on_both_paths():
    model = ModuleModel(GRAPH_POOL)
    rendered = model.local("mailboxes_json")
    directory = safesend_mailboxes().MailboxDirectory.from_mapping(json.loads(rendered))
    m365, certs, shop = directory.get("m365"), directory.get("certs"), directory.get("shop")
    assert (m365.kind, certs.kind, shop.kind) == ("graph", "graph", "gmail")
    assert m365.graph is not None and m365.graph.federated and m365.graph.certificate_secret is None
    assert certs.graph is not None and certs.graph.certificate_secret == "graph-cert-certs"
    assert m365.user_id == "m365@contoso.com" and m365.graph.api_endpoint is None  # no simulator switch
    assert m365.limits == safesend_mailboxes().PRESETS["exchange_online"]
    rates = {
        q.key: q["rate_limits"][0]["max_dispatches_per_second"]
        for q in model.instances("google_cloud_tasks_queue", "mailbox")
    }
    assert rates["m365"] == pytest.approx(0.475) and rates["shop"] == pytest.approx(0.95)
    # the certificate's secret is readable by the sending functions, on that secret only
    assert [s.key for s in model.instances("google_secret_manager_secret", "graph_certificate")] == ["certs"]
    grants = model.instances("google_secret_manager_secret_iam_member", "graph_certificate")
    assert sorted(g.key for g in grants) == ["reconcile/certs", "send/certs", "sweep/certs"]
    assert model.instances("google_secret_manager_secret", "mailbox_token") == []
    # the gcloud path renders the very same bytes and rates
    document, queues = env_spec().render_mailboxes(GRAPH_POOL, "safesend")
    assert document == rendered
    assert {q.name: q.max_dispatches_per_second for q in queues}["safesend-mbx-m365"] == pytest.approx(0.475)


@pytest.mark.parametrize(
    ("mailbox", "problem"),
    [
        (
            {"kind": "graph", "tenant_id": "t", "client_id": "c", "federated": True, "certificate_secret": "x"},
            "exactly one",
        ),
        ({"kind": "graph", "federated": True}, "tenant_id and client_id"),
        (
            {"kind": "graph", "tenant_id": "t", "client_id": "c", "federated": True, "token_secret": "x"},
            "Gmail settings",
        ),
        ({"kind": "exchange", "tenant_id": "t", "client_id": "c", "federated": True}, "kind must be"),
        ({"delegated_user": "s@example.com", "tenant_id": "t"}, "Graph settings"),
    ],
)
def test_the_gcloud_path_refuses_a_graph_mailbox_terraform_refuses(mailbox, problem):
    with pytest.raises(env_spec().SpecError, match=problem):
        env_spec().render_mailboxes({"mailboxes": {"m": {"address": "m@contoso.com", **mailbox}}}, "safesend")
