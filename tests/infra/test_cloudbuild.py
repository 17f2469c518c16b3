"""(c) cloudbuild.yaml and cloudbuild-gcloud.yaml: valid Cloud Build configs (check-jsonschema's vendored
schema), every ${_VAR} defined in `substitutions`, every substitution used, only `_` user substitutions;
and the Terraform pipeline's gates, checked by running its steps against stub terraform/gcloud:
plan-only by default, a prod apply only with a committed lock file and an approved build."""

from __future__ import annotations

import re

import pytest

from .cloudbuild_sim import Sim
from .support import CLOUDBUILD_FILES, ROOT, infra_bin, parsed_yaml, run_tool

pytestmark = pytest.mark.functions_out_of_process  # tests/coverage_pause.py

# Cloud Build's built-in substitutions (cloud.google.com/build/docs/configuring-builds/substitute-variable-values).
BUILT_INS = {
    "PROJECT_ID",
    "PROJECT_NUMBER",
    "BUILD_ID",
    "LOCATION",
    "TRIGGER_NAME",
    "COMMIT_SHA",
    "SHORT_SHA",
    "REVISION_ID",
    "REPO_NAME",
    "REPO_FULL_NAME",
    "BRANCH_NAME",
    "TAG_NAME",
    "REF_NAME",
    "TRIGGER_BUILD_CONFIG_PATH",
    "SERVICE_ACCOUNT_EMAIL",
    "SERVICE_ACCOUNT",
}
# $$ is a literal $ (for bash); $NAME / ${NAME} is a substitution.
SUBSTITUTION = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")
LOCK = """provider "registry.terraform.io/hashicorp/google" {
  version     = "8.7.0"
  constraints = "8.7.0"
  hashes      = ["h1:abc="]
}
"""


def used_substitutions(text: str) -> set[str]:
    return {m.group(1) or m.group(2) for m in SUBSTITUTION.finditer(text) if m.group(0) != "$$"}


def test_configs_validate_against_the_cloud_build_schema():
    proc = run_tool(
        [
            str(infra_bin("check-jsonschema")),
            "--builtin-schema",
            "vendor.cloudbuild",
            *[str(p.relative_to(ROOT)) for p in CLOUDBUILD_FILES],
        ],
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_schema_check_would_catch_a_broken_config(tmp_path):
    broken = tmp_path / "cloudbuild.yaml"
    broken.write_text("steps:\n  - nam: python\n    args: 3\n")
    proc = run_tool(
        [str(infra_bin("check-jsonschema")), "--builtin-schema", "vendor.cloudbuild", str(broken)], timeout=60
    )
    assert proc.returncode != 0


@pytest.mark.parametrize("path", CLOUDBUILD_FILES, ids=lambda p: p.name)
def test_every_substitution_is_defined_used_and_user_defined_ones_start_with_underscore(path):
    config = parsed_yaml(*CLOUDBUILD_FILES)[path.name]
    defined = set(config.get("substitutions", {}))
    assert all(name.startswith("_") for name in defined), f"{path.name}: user substitutions must start with _"
    text = path.read_text()
    body = text.split("\nsteps:", 1)[1]  # uses outside the substitutions block itself
    used = used_substitutions("\n".join(line.split(" #", 1)[0] for line in body.splitlines()))
    undefined = {u for u in used if u.startswith("_")} - defined
    assert not undefined, f"{path.name}: used but not defined: {sorted(undefined)}"
    unknown = {u for u in used if not u.startswith("_")} - BUILT_INS
    assert not unknown, f"{path.name}: not Cloud Build substitutions (write $$ for a shell variable): {sorted(unknown)}"
    unused = defined - used
    assert not unused, f"{path.name}: defined but never used: {sorted(unused)}"


def test_substitution_scanner():
    assert used_substitutions("a ${_X} $PROJECT_ID $$HOME $${_NOT} ${_Y}") == {"_X", "PROJECT_ID", "_Y"}


def test_terraform_pipeline_defaults_to_a_plan_and_orders_its_steps():
    config = parsed_yaml(*CLOUDBUILD_FILES)["cloudbuild.yaml"]
    assert config["substitutions"]["_AUTO_APPLY"] == "false", "plan-only must be the default"
    assert config["substitutions"]["_ENV"] == "dev", "an unqualified build must not target prod"
    steps = {s["id"]: s for s in config["steps"]}
    order = list(steps)
    assert order[0] == "unit-tests" and "pytest tests/unit" in steps["unit-tests"]["args"][-1]
    assert (
        order.index("lock-providers")
        < order.index("terraform-init")
        < order.index("terraform-plan")
        < order.index("apply-gate")
        < order.index("terraform-apply")
    )
    init = steps["terraform-init"]["args"]
    assert "-lockfile=readonly" in init and "-chdir=infra/envs/${_ENV}" in init
    assert "-backend-config=bucket=${_TF_STATE_BUCKET}" in init
    assert "apply -input=false tfplan" in steps["terraform-apply"]["args"][-1]
    assert "terraform apply" not in " ".join(
        str(a) for s in config["steps"] if s["id"] != "terraform-apply" for a in s.get("args", [])
    )


def run_pipeline(tmp_path, subs: dict, lock: bool, approval: str = "") -> tuple[Sim, dict]:
    sim = Sim.create("cloudbuild.yaml", tmp_path, {"_TF_STATE_BUCKET": "state-bucket", **subs})
    env_dir = sim.workdir / "infra" / "envs" / sim.subs["_ENV"]
    lock_path = env_dir / ".terraform.lock.hcl"
    if lock:
        lock_path.write_text(LOCK)
    elif lock_path.exists():
        lock_path.unlink()
    sim.answers = [
        (r"^terraform -chdir=\S+ providers lock", LOCK, 0, str(lock_path)),
        (r"^gcloud builds describe build-123 --region=global", approval + "\n", 0),
    ]
    results = {}
    for step in ("lock-providers", "terraform-init", "terraform-plan", "publish-lock", "apply-gate", "terraform-apply"):
        proc = sim.run(step)
        results[step] = proc
        if proc.returncode != 0:
            break
    return sim, results


def applied(sim: Sim) -> bool:
    return any(c[0] == "terraform" and "apply" in c for c in sim.calls())


def test_default_build_plans_and_never_applies(tmp_path):
    sim, results = run_pipeline(tmp_path, {}, lock=False)
    assert all(p.returncode == 0 for p in results.values())
    assert not applied(sim) and "plan only" in results["apply-gate"].stdout
    lock_calls = [c for c in sim.calls() if c[:3] == ["terraform", "-chdir=infra/envs/dev", "providers"]]
    assert lock_calls and {"-platform=linux_amd64", "-platform=darwin_arm64"} <= set(lock_calls[0])
    assert any(c[:3] == ["gcloud", "storage", "cp"] and c[-1].endswith("/dev/.terraform.lock.hcl") for c in sim.calls())


def test_dev_applies_when_asked_even_with_a_generated_lock(tmp_path):
    sim, results = run_pipeline(tmp_path, {"_AUTO_APPLY": "true"}, lock=False)
    assert all(p.returncode == 0 for p in results.values()) and applied(sim)


def test_prod_apply_without_a_committed_lock_is_refused_before_anything_runs(tmp_path):
    sim, results = run_pipeline(tmp_path, {"_ENV": "prod", "_AUTO_APPLY": "true"}, lock=False)
    assert results["lock-providers"].returncode != 0 and "committed" in results["lock-providers"].stderr
    assert not applied(sim) and "terraform-init" not in results


@pytest.mark.parametrize("approval", ["", "PENDING", "REJECTED"])
def test_prod_apply_without_approval_is_refused(tmp_path, approval):
    sim, results = run_pipeline(tmp_path, {"_ENV": "prod", "_AUTO_APPLY": "true"}, lock=True, approval=approval)
    assert results["apply-gate"].returncode != 0 and "APPROVED" in results["apply-gate"].stderr
    assert not applied(sim)


def test_approved_prod_build_with_a_committed_lock_applies_the_saved_plan(tmp_path):
    sim, results = run_pipeline(tmp_path, {"_ENV": "prod", "_AUTO_APPLY": "true"}, lock=True, approval="APPROVED")
    assert all(p.returncode == 0 for p in results.values())
    assert ["terraform", "-chdir=infra/envs/prod", "apply", "-input=false", "tfplan"] in sim.calls()
    init = next(c for c in sim.calls() if "init" in c)
    assert "-lockfile=readonly" in init
    assert not any("providers" in c for c in sim.calls()), "a committed lock is used as is"


@pytest.mark.parametrize(
    "output, enabled", [('{"review_service": "safesend-review"}', True), ('{"review_service": null}', False)]
)
def test_an_applied_review_console_is_put_behind_iap(tmp_path, output, enabled):
    """reviewers_enabled: after the apply, IAP is switched on for the console's service (the provider
    cannot); without a console, or without an apply, nothing is touched."""
    sim, results = run_pipeline(tmp_path, {"_AUTO_APPLY": "true"}, lock=True)
    (sim.workdir / ".cloudbuild" / "outputs.json").write_text(output + "\n")  # the environment's one output
    assert all(p.returncode == 0 for p in results.values()) and applied(sim)
    assert ["terraform", "-chdir=infra/envs/dev", "output", "-json", "safesend"] in sim.calls()
    proc = sim.run("review-iap")
    assert proc.returncode == 0, proc.stderr
    updates = [c for c in sim.calls() if c[:5] == ["gcloud", "beta", "run", "services", "update"]]
    assert updates == (
        [["gcloud", "beta", "run", "services", "update", "safesend-review", "--region=us-central1", "--iap", "--quiet"]]
        if enabled
        else []
    )


def test_a_plan_only_build_puts_nothing_behind_iap(tmp_path):
    sim, _results = run_pipeline(tmp_path, {}, lock=True)
    assert sim.run("review-iap").returncode == 0
    assert not [c for c in sim.calls() if "--iap" in c]


def test_prod_plan_only_build_creates_the_lock_to_commit(tmp_path):
    sim, results = run_pipeline(tmp_path, {"_ENV": "prod"}, lock=False)
    assert all(p.returncode == 0 for p in results.values()) and not applied(sim)
    assert "commit it" in results["lock-providers"].stdout


def test_gcloud_pipeline_never_opens_a_function_by_flag():
    text = (ROOT / "cloudbuild-gcloud.yaml").read_text()
    assert "--no-allow-unauthenticated" in text and "--allow-unauthenticated" not in text
    assert "|| true" not in text, "errors must fail the build"
