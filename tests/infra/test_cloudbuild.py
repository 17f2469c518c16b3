"""(c) cloudbuild.yaml and cloudbuild-gcloud.yaml: valid Cloud Build configs (check-jsonschema's vendored
schema), every ${_VAR} defined in `substitutions`, every substitution used, only `_` user substitutions,
and the Terraform pipeline does what the README says."""

from __future__ import annotations

import re

import pytest

from .support import CLOUDBUILD_FILES, ROOT, infra_bin, parsed_yaml, run_tool

# Cloud Build's built-in substitutions (cloud.google.com/build/docs/configuring-builds/substitute-variable-values).
BUILT_INS = {"PROJECT_ID", "PROJECT_NUMBER", "BUILD_ID", "LOCATION", "TRIGGER_NAME", "COMMIT_SHA", "SHORT_SHA",
             "REVISION_ID", "REPO_NAME", "REPO_FULL_NAME", "BRANCH_NAME", "TAG_NAME", "REF_NAME",
             "TRIGGER_BUILD_CONFIG_PATH", "SERVICE_ACCOUNT_EMAIL", "SERVICE_ACCOUNT"}
# $$ is a literal $ (for bash); $NAME / ${NAME} is a substitution.
SUBSTITUTION = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def used_substitutions(text: str) -> set[str]:
    return {m.group(1) or m.group(2) for m in SUBSTITUTION.finditer(text) if m.group(0) != "$$"}


def test_configs_validate_against_the_cloud_build_schema():
    proc = run_tool([str(infra_bin("check-jsonschema")), "--builtin-schema", "vendor.cloudbuild",
                     *[str(p.relative_to(ROOT)) for p in CLOUDBUILD_FILES]], timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_schema_check_would_catch_a_broken_config(tmp_path):
    broken = tmp_path / "cloudbuild.yaml"
    broken.write_text("steps:\n  - nam: python\n    args: 3\n")
    proc = run_tool([str(infra_bin("check-jsonschema")), "--builtin-schema", "vendor.cloudbuild", str(broken)],
                    timeout=60)
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


def test_terraform_pipeline_tests_then_inits_plans_and_applies_the_environment():
    config = parsed_yaml(*CLOUDBUILD_FILES)["cloudbuild.yaml"]
    steps = {s["id"]: s for s in config["steps"]}
    assert list(steps)[0] == "unit-tests" and "pytest tests/unit" in steps["unit-tests"]["args"][-1]
    for name in ("terraform-init", "terraform-validate", "terraform-plan", "terraform-apply"):
        assert steps[name]["dir"] == "infra/envs/${_ENV}", name
    assert "-backend-config=bucket=${_TF_STATE_BUCKET}" in steps["terraform-init"]["args"]
    assert "terraform apply -input=false tfplan" in steps["terraform-apply"]["args"][-1]
    assert config["substitutions"]["_ENV"] in ("dev", "prod")
    order = list(steps)
    assert order.index("unit-tests") < order.index("terraform-init") < order.index("terraform-plan") \
        < order.index("terraform-apply")


def test_gcloud_pipeline_deploys_every_entry_point_with_the_terraform_settings():
    from .support import entry_points
    text = (ROOT / "cloudbuild-gcloud.yaml").read_text()
    deployed = set(re.findall(r"^\s*deploy (\w+) (all|internal-only) ", text, re.M))
    assert deployed == {("send", "all"), ("status", "all"), ("reconcile", "internal-only"), ("sweep", "internal-only")}
    assert {name for name, _ in deployed} == entry_points()
    assert "infra/package_source.py" in text and "infra/firestore.indexes.json" in text
    assert "--no-allow-unauthenticated" in text and "--allow-unauthenticated" not in text
