"""(g) infra/README.md's "PostgreSQL job store (Cloud SQL)" says what the module does: its SQL is the
module's one-time SQL for the documented defaults, its gcloud commands create the users, roles,
network, secret and instance the module creates (by the same names), and that instance is one the
gcloud pipeline accepts (env_spec.py's own check, run on a description built from the documented
flags). Every variable of the option is in its table, and the outputs its commands read exist."""

from __future__ import annotations

import re
import shlex

import pytest

from .support import ENVS, INFRA, MODULE, top_level
from .tfmodel import ModuleModel

pytestmark = pytest.mark.functions_out_of_process  # tests/coverage_pause.py

SECTION = "## PostgreSQL job store (Cloud SQL)"
PREFIX = "safesend"  # the module's default name_prefix, what the README's commands use ($pfx)
PROJECT = "P"  # the README's placeholder project


def section() -> str:
    text = (INFRA / "README.md").read_text()
    assert SECTION in text, f"infra/README.md has no section {SECTION!r}"
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return text[start:] if end < 0 else text[start:end]


def blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", section(), re.S)


def gcloud_block() -> str:
    (block,) = [b for b in blocks("sh") if "gcloud sql instances create" in b]
    return block


def commands(block: str) -> list[list[str]]:
    """The block's shell commands (continuations joined, comments dropped), split like a shell."""
    joined = re.sub(r"\\\n\s*", " ", block)
    lines = [line.split(" #", 1)[0].strip() for line in joined.splitlines()]
    return [shlex.split(line) for line in lines if line and not line.startswith("#")]


def expand(text: str, **names: str) -> str:
    for name, value in {"pfx": PREFIX, **names}.items():
        text = text.replace(f"${name}", value)
    return text


def flag_values(command: list[str]) -> dict[str, str]:
    out = {}
    for arg in command:
        if arg.startswith("--"):
            key, _, value = arg[2:].partition("=")
            out[key] = value
    return out


def one(cmds: list[list[str]], *prefix: str) -> list[str]:
    (found,) = [c for c in cmds if c[: len(prefix)] == list(prefix)]
    return found


@pytest.fixture(scope="module")
def model() -> ModuleModel:
    return ModuleModel({"job_store": "postgres", "project_id": PROJECT})


def test_the_documented_sql_is_the_modules_for_the_defaults(model):
    """The SQL the section shows is exactly the module's output postgres_setup_sql for the defaults
    and project P: the owner role, the schema, and a grant to every database user Terraform creates."""
    (sql,) = blocks("sql")
    assert sql.strip() == model.local("postgres_setup_sql")
    for user in model.instances("google_sql_user", "functions"):
        assert f'GRANT safesend_owner TO "{user["name"]}";' in sql, user["name"]


def test_the_documented_grants_step_uses_outputs_that_exist():
    (block,) = [b for b in blocks("sh") if "postgres_setup_sql" in b]
    used = set(re.findall(r"terraform output -json safesend \| jq -r \.(\w+)", block))
    assert used >= {"postgres_setup_sql", "postgres_instance", "postgres_connection_name"}
    outputs = top_level("output", MODULE)
    assert used <= set(outputs), f"missing module outputs {used - set(outputs)}"
    for env in ENVS:  # each environment passes the module's outputs on as one
        assert top_level("output", INFRA / "envs" / env)["safesend"]["value"] == "${module.safesend}", env
    assert "user=postgres" in block and "dbname=safesend" in block and "-f setup.sql" in block


def test_the_documented_gcloud_commands_create_what_the_module_creates(model):
    """Users (type, names: one per function of the loop, the module's names), both Cloud SQL roles
    with the module's IAM condition, the CA secret and its accessors, the network pieces."""
    block = gcloud_block()
    cmds = commands(block)
    (loop,) = re.findall(r"^for f in ([a-z ]+); do", block, re.M)
    functions = loop.split()
    users = {u.key: u["name"] for u in model.instances("google_sql_user", "functions")}
    assert sorted(functions) == sorted(users), "one database user per function that uses the store"
    create = one(cmds, "gcloud", "sql", "users", "create")
    assert flag_values(create)["type"] == "cloud_iam_service_account"
    for fn in functions:
        assert expand(create[4], f=fn) == users[fn], fn
    instance = model.instances("google_sql_database_instance", "jobs")[0]
    assert expand(flag_values(create)["instance"]) == instance["name"]
    (cond,) = re.findall(r'^cond="(.*)"$', block, re.M)
    expression = expand(cond).split("expression=", 1)[1].split(",title=", 1)[0]
    roles = {}
    for command in cmds:
        if command[:3] == ["gcloud", "projects", "add-iam-policy-binding"]:
            flags = flag_values(command)
            roles[flags["role"]] = flags.get("condition")
    assert roles == {"roles/cloudsql.instanceUser": "$cond", "roles/cloudsql.client": "$cond"}
    for name in ("cloudsql_instance_user", "cloudsql_client"):
        for grant in model.instances("google_project_iam_member", name):
            assert grant["condition"][0]["expression"] == expression, name
    secret = model.instances("google_secret_manager_secret", "cloudsql_server_ca")[0]["secret_id"]
    assert expand(one(cmds, "gcloud", "secrets", "create")[3]) == secret
    accessor = one(cmds, "gcloud", "secrets", "add-iam-policy-binding")
    assert expand(accessor[3]) == secret and flag_values(accessor)["role"] == "roles/secretmanager.secretAccessor"
    network = model.instances("google_compute_network", "jobs")[0]
    subnet = model.instances("google_compute_subnetwork", "functions")[0]
    psa = model.instances("google_compute_global_address", "cloudsql_psa")[0]
    assert expand(one(cmds, "gcloud", "compute", "networks", "create")[4]) == network["name"]
    sub = one(cmds, "gcloud", "compute", "networks", "subnets", "create")
    assert expand(sub[5]) == subnet["name"] and flag_values(sub)["range"] == subnet["ip_cidr_range"]
    address = one(cmds, "gcloud", "compute", "addresses", "create")
    assert expand(address[4]) == psa["name"] and flag_values(address)["prefix-length"] == str(psa["prefix_length"])
    peering = flag_values(one(cmds, "gcloud", "services", "vpc-peerings", "connect"))
    assert expand(peering["ranges"]) == psa["name"] and expand(peering["network"]) == network["name"]
    assert (
        one(cmds, "gcloud", "sql", "databases", "create")[4]
        == model.instances("google_sql_database", "safesend")[0]["name"]
    )
    setup = one(cmds, "python3", "infra/env_spec.py", "postgres-setup-sql")
    assert expand(" ".join(setup)).count("--fact") == 3


def documented_instance(model: ModuleModel) -> dict:
    """What `gcloud sql instances describe` would say of the instance the documented command creates."""
    create = one(commands(gcloud_block()), "gcloud", "sql", "instances", "create")
    flags = {k: expand(v) for k, v in flag_values(create).items()}
    ip_config = {
        "sslMode": flags.get("ssl-mode"),
        "privateNetwork": flags.get("network"),
        "ipv4Enabled": "no-assign-ip" not in flags,
    }
    return {
        "name": expand(create[4]),
        "databaseVersion": flags.get("database-version"),
        "settings": {
            "tier": flags.get("tier"),
            "edition": (flags.get("edition") or "").upper().replace("-", "_"),
            "databaseFlags": [
                {"name": n, "value": v}
                for n, _, v in (f.partition("=") for f in flags.get("database-flags", "").split(",") if f)
            ],
            "ipConfiguration": ip_config,
            "deletionProtectionEnabled": "deletion-protection" in flags,
            "backupConfiguration": {
                "enabled": "backup-start-time" in flags,
                "pointInTimeRecoveryEnabled": "enable-point-in-time-recovery" in flags,
            },
        },
        "serverCaMode": flags.get("server-ca-mode"),
        "ipAddresses": [{"type": "PRIVATE", "ipAddress": "10.1.2.3"}] if flags.get("network") else [],
    }


def test_the_documented_instance_is_one_the_gcloud_pipeline_accepts_and_the_module_would_create(model):
    from .test_env_parity import env_spec

    described = documented_instance(model)
    network = model.instances("google_compute_network", "jobs")[0]["name"]
    assert env_spec().sql_instance_problems(described, network) == []
    instance = model.instances("google_sql_database_instance", "jobs")[0]
    settings = instance["settings"][0]
    assert described["name"] == instance["name"]
    assert described["databaseVersion"] == instance["database_version"]
    assert described["settings"]["tier"] == settings["tier"]
    assert described["settings"]["edition"] == settings["edition"]
    assert described["settings"]["ipConfiguration"]["sslMode"] == settings["ip_configuration"][0]["ssl_mode"]
    assert described["settings"]["ipConfiguration"]["ipv4Enabled"] is settings["ip_configuration"][0]["ipv4_enabled"]
    assert described["serverCaMode"] == settings["ip_configuration"][0]["server_ca_mode"]
    flags = {f["name"]: f["value"] for f in described["settings"]["databaseFlags"]}
    module_flags = {f["name"]: f["value"] for f in settings["database_flags"]}
    assert flags.items() <= module_flags.items()
    assert flags["cloudsql.iam_authentication"] == "on"


def test_every_variable_of_the_option_is_in_the_table():
    text = section()
    names = [n for n in top_level("variable", MODULE) if n == "job_store" or n.startswith("postgres_")]
    assert len(names) >= 12
    for name in names:
        assert re.search(rf"^\| `{name}` \|", text, re.M), f"{name} is not in the section's table"
