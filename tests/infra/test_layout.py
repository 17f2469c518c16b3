"""infra/ is a module for the whole service plus one thin root module per environment: every input is
a described variable with a sane default (except the three a user must give), the examples set only
declared variables, and the outputs users need exist."""

from __future__ import annotations

import re

import pytest

from .support import ENVS, INFRA, MODULE, parsed_hcl, top_level

pytestmark = pytest.mark.functions_out_of_process  # tests/coverage_pause.py

REQUIRED_INPUTS = {"project_id", "message_id_domain", "default_from"}
NEEDED_OUTPUTS = {
    "send_url",
    "status_url",
    "review_topic",
    "review_subscription",
    "review_dead_letter_topic",
    "tasks_queue",
    "n8n_invoker_service_account_email",
    # the reviewer side: where notify is, where reviewers go, the service IAP is switched on for
    "notify_url",
    "review_url",
    "review_service",
    "review_iap_audience",
    "notify_push_subscription",
    "review_csrf_secret",
    "notify_chat_webhook_secret",
    "notify_slack_webhook_secret",
    # the PostgreSQL job store: where it is, who logs in, the one manual step
    "postgres_instance",
    "postgres_connection_name",
    "postgres_private_ip",
    "postgres_users",
    "postgres_setup_sql",
}


@pytest.mark.parametrize("path", [MODULE] + [INFRA / "envs" / e for e in ENVS], ids=lambda p: p.name)
def test_every_variable_has_a_description_type_and_default(path):
    variables = top_level("variable", path)
    assert variables
    for name, body in variables.items():
        assert len(body.get("description", "")) > 20, f"{path.name}: variable {name} needs a real description"
        assert "type" in body, f"{path.name}: variable {name} needs a type"
        if name in REQUIRED_INPUTS:
            assert "default" not in body, f"{path.name}: {name} has no sane default and must stay required"
        else:
            assert "default" in body, f"{path.name}: variable {name} needs a default"


@pytest.mark.parametrize("path", [MODULE] + [INFRA / "envs" / e for e in ENVS], ids=lambda p: p.name)
def test_outputs_users_need_exist_with_descriptions(path):
    """The module has them; an environment passes its outputs on as one, `safesend`
    (test_env_settings.py)."""
    outputs = top_level("output", path)
    if path != MODULE:
        assert set(outputs) == {"safesend"}, f"{path.name}: one output passing the module's on"
        outputs = top_level("output", MODULE)
    assert set(outputs) >= NEEDED_OUTPUTS, f"{path.name}: missing outputs {NEEDED_OUTPUTS - set(outputs)}"
    for name, body in outputs.items():
        assert body.get("description"), f"{path.name}: output {name} needs a description"


@pytest.mark.parametrize("env", ENVS)
def test_tfvars_example_sets_only_declared_variables_and_all_required_ones(env):
    path = INFRA / "envs" / env
    text = (path / "terraform.tfvars.example").read_text()
    keys = set(re.findall(r"(?m)^([a-z_][a-z0-9_]*)\s*=", text))
    variables = set(top_level("variable", path))
    assert keys <= variables, f"{env}: example sets undeclared {keys - variables}"
    assert keys >= REQUIRED_INPUTS


@pytest.mark.parametrize("env", ENVS)
def test_environment_has_a_gcs_backend_left_for_backend_config(env):
    text = (INFRA / "envs" / env / "providers.tf").read_text()
    assert re.search(r'backend\s+"gcs"\s*\{\s*\}', text)
    assert "google" in parsed_hcl()[f"infra/envs/{env}/providers.tf"]["provider"][0]
