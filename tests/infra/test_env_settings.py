"""The environments are thin callers of infra/modules/safesend, and this keeps them, the module and
its documentation in step (issue 21): every argument an environment gives the module is a module
variable with a value of its type that passes its validations; every module variable without a
default is given by both; the environments' own inputs (variables.tf, terraform.tfvars) have the
module's types and defaults; dev and prod differ only in the settings listed in ENV_CHOICES; and
infra/README.md's "Variables" section names exactly the module's variables. A new module variable
needs nothing here: an environment that wants it adds one argument to its module block."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from . import hcl_eval as H  # noqa: N812 - H reads like the HCL it evaluates
from .support import ENVS, INFRA, MODULE, top_level

pytestmark = pytest.mark.functions_out_of_process  # tests/coverage_pause.py

# The settings dev and prod may choose differently (each also may leave it to the module's default).
ENV_CHOICES = {
    "firestore_point_in_time_recovery",
    "firestore_delete_protection",
    "postgres_high_availability",
    "postgres_retained_backups",
    "postgres_deletion_protection",
    "send_min_instances",
    "send_max_instances",
    "status_max_instances",
    "log_level",
    "source_bucket_force_destroy",
}
# What prod must keep whatever else changes: removing the job store is a reviewed change of main.tf.
PROD_PINS = {"postgres_deletion_protection": True}
VARIABLES_SECTION = "## Variables"
REF = re.compile(r"^\$\{var\.(\w+)\}$")


def env_config(env: str) -> dict[str, Any]:
    """{"call": the module block's arguments, "inputs": the root variables} of one environment."""
    path = INFRA / "envs" / env
    call = top_level("module", path)["safesend"]
    arguments = {k: v for k, v in call.items() if not k.startswith("__") and k != "source"}
    return {"source": call["source"], "call": arguments, "inputs": top_level("variable", path)}


def type_fits(value: Any, type_expr: str) -> bool:
    """Whether a literal is a value of a Terraform type constraint (outer type only for collections)."""
    kind = type_expr.removeprefix("${").removesuffix("}")
    if kind == "any":
        return True
    if kind == "string":
        return isinstance(value, str) and not value.startswith("${")
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "bool":
        return isinstance(value, bool)
    if kind.startswith(("list(", "set(", "tuple(")):
        return isinstance(value, list)
    if kind.startswith(("map(", "object(")):
        return isinstance(value, dict)
    return False


def validation_failures(name: str, value: Any, variable: dict) -> list[str]:
    """The module's validations of `name` that refuse `value` (evaluated with Terraform's semantics)."""
    failed = []
    for check in variable.get("validation", []):
        if H.evaluate_value(check["condition"], H.Scope(variables={name: value})) is not True:
            failed.append(check["error_message"])
    return failed


def argument_problems(env: str, config: dict, module: dict[str, dict]) -> list[str]:
    problems = []
    if config["source"] != "../../modules/safesend":
        problems.append(f"{env}: the module block calls {config['source']}")
    for name, value in config["call"].items():
        variable = module.get(name)
        if variable is None:
            problems.append(f"{env}: {name} is not a variable of the module")
            continue
        ref = REF.match(value) if isinstance(value, str) else None
        if ref:
            problems += input_problems(env, name, ref.group(1), config["inputs"], variable)
        elif not type_fits(value, variable["type"]):
            problems.append(f"{env}: {name} = {value!r} is not a {variable['type']}")
        else:
            problems += [f"{env}: {name} = {value!r}: {why}" for why in validation_failures(name, value, variable)]
    for name, variable in module.items():
        if "default" not in variable and name not in config["call"]:
            problems.append(f"{env}: the module's required {name} is not given")
    return problems


def input_problems(env: str, argument: str, name: str, inputs: dict[str, dict], variable: dict) -> list[str]:
    """An environment input passed on as a module argument: the same name, type and default."""
    own = inputs.get(name)
    if own is None:
        return [f"{env}: {argument} = var.{name}, which {env} does not declare"]
    problems = []
    if name != argument:
        problems.append(f"{env}: input {name} is passed as {argument}; keep the module's name")
    if own.get("type") != variable["type"]:
        problems.append(f"{env}: input {name} is a {own.get('type')}, the module's a {variable['type']}")
    if own.get("default") != variable.get("default"):
        problems.append(
            f"{env}: input {name} defaults to {own.get('default')!r}, the module to {variable.get('default')!r}"
        )
    return problems


def parity_problems(configs: dict[str, dict]) -> list[str]:
    """dev and prod give the same arguments and inputs except ENV_CHOICES; prod keeps PROD_PINS."""
    dev, prod = configs["dev"], configs["prod"]
    problems = []
    for name in sorted((set(dev["call"]) | set(prod["call"])) - ENV_CHOICES):
        if dev["call"].get(name, "(unset)") != prod["call"].get(name, "(unset)"):
            problems.append(
                f"dev and prod differ in {name} ({dev['call'].get(name, '(unset)')!r} / "
                f"{prod['call'].get(name, '(unset)')!r}): give it to both alike, or add it to ENV_CHOICES"
            )
    if undescribed(dev["inputs"]) != undescribed(prod["inputs"]):
        problems.append(f"dev and prod take different inputs: {sorted(dev['inputs'])} / {sorted(prod['inputs'])}")
    for name, value in PROD_PINS.items():
        if prod["call"].get(name) is not value:
            problems.append(f"prod must set {name} = {str(value).lower()} in its module block")
    for env, config in configs.items():
        passed = {m.group(1) for v in config["call"].values() if isinstance(v, str) and (m := REF.match(v))}
        if unused := sorted(set(config["inputs"]) - passed):
            problems.append(f"{env}: inputs {unused} reach no module argument")
    return problems


def undescribed(inputs: dict[str, dict]) -> dict[str, dict]:
    """Inputs without their descriptions (each environment words its own)."""
    return {name: {k: v for k, v in body.items() if k != "description"} for name, body in inputs.items()}


def documented_variables(readme: str) -> set[str]:
    """The names in backticks of infra/README.md's variables section (up to its outputs paragraph)."""
    start = readme.index(f"\n{VARIABLES_SECTION}\n")
    section = readme[start + 1 :]
    end = section.find("\n## ", 1)
    section = section[: end if end > 0 else None]
    section = section.split("\nOutputs:", 1)[0]
    return set(re.findall(r"`([a-z][a-z0-9_]+)`", section))


def doc_problems(readme: str, module: dict[str, dict]) -> list[str]:
    documented = documented_variables(readme)
    problems = [f"infra/README.md, {VARIABLES_SECTION}: {n} is not listed" for n in sorted(set(module) - documented)]
    problems += [
        f"infra/README.md, {VARIABLES_SECTION}: {n} is no module variable" for n in sorted(documented - set(module))
    ]
    return problems


def all_problems(module: dict[str, dict], configs: dict[str, dict], readme: str) -> list[str]:
    problems = [p for env, config in configs.items() for p in argument_problems(env, config, module)]
    return problems + parity_problems(configs) + doc_problems(readme, module)


@pytest.fixture(scope="module")
def current() -> tuple[dict, dict, str]:
    module = dict(top_level("variable", MODULE))
    configs = {env: env_config(env) for env in ENVS}
    return module, configs, (INFRA / "README.md").read_text(encoding="utf-8")


def test_the_environments_the_module_and_its_docs_are_in_step(current):
    module, configs, readme = current
    assert len(module) > 50 and all(configs[env]["call"] for env in ENVS)  # the parser found them
    assert all_problems(module, configs, readme) == []


def test_the_environments_are_thin():
    """No copied variable or output blocks: a few inputs, one module block, one output passing it on."""
    for env in ENVS:
        path = INFRA / "envs" / env
        assert len(top_level("variable", path)) <= 6, f"{env}: settings belong in the module block"
        assert list(top_level("output", path)) == ["safesend"], env
        assert top_level("output", path)["safesend"]["value"] == "${module.safesend}", env


@pytest.mark.parametrize(
    ("plant", "expected"),
    [
        (lambda m, c, r: c["dev"]["call"].update(send_max_instance=5), "dev: send_max_instance is not a variable"),
        (
            lambda m, c, r: c["prod"]["call"].update(send_max_instances="20"),
            "prod: send_max_instances = '20' is not a number",
        ),
        (lambda m, c, r: c["dev"]["call"].update(log_level="VERBOSE"), "log_level must be one of"),
        (
            lambda m, c, r: c["prod"]["call"].pop("default_from"),
            "prod: the module's required default_from is not given",
        ),
        (lambda m, c, r: m.update(new_required={"type": "string"}), "dev: the module's required new_required"),
        (lambda m, c, r: c["prod"]["call"].update(job_store="postgres"), "dev and prod differ in job_store"),
        (
            lambda m, c, r: c["prod"]["call"].update(postgres_deletion_protection=False),
            "prod must set postgres_deletion_protection",
        ),
        (lambda m, c, r: c["dev"]["inputs"]["region"].update(default="europe-west1"), "dev: input region defaults to"),
        (lambda m, c, r: c["dev"]["inputs"]["project_id"].update(type="number"), "dev: input project_id is a number"),
        (
            lambda m, c, r: c["dev"]["inputs"].update(extra={"type": "string"}),
            "dev: inputs ['extra'] reach no module argument",
        ),
        (lambda m, c, r: m.update(monitoring_new={"type": "bool", "default": False}), "monitoring_new is not listed"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_a_planted_drift_is_found(current, plant, expected):
    module, configs, readme = copy.deepcopy(current)
    plant(module, configs, readme)
    problems = all_problems(module, configs, readme)
    assert any(expected in p for p in problems), problems


def test_a_documented_name_the_module_lacks_is_found(current):
    module, _, readme = current
    drifted = readme.replace("`scheduler_time_zone`", "`scheduler_timezone`", 1)
    assert drifted != readme
    problems = doc_problems(drifted, module)
    assert "infra/README.md, ## Variables: scheduler_timezone is no module variable" in problems
    assert "infra/README.md, ## Variables: scheduler_time_zone is not listed" in problems
