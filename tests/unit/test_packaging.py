"""functions/ deploys on its own: its requirements match the top level, and it needs nothing outside it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS = ROOT / "functions"


def pins(path: Path) -> dict[str, str]:
    result = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        name, _, version = line.partition("==")
        assert version, f"{path.name}: {line!r} is not pinned with =="
        result[re.sub(r"[-_.]+", "-", name).lower()] = version
    return result


def test_function_requirements_are_in_step_with_the_top_level():
    assert pins(FUNCTIONS / "requirements.txt") == pins(ROOT / "requirements.txt")


def test_deployed_code_imports_nothing_from_outside_functions():
    forbidden = ("devstack", "tests", "bench")
    for source in FUNCTIONS.rglob("*.py"):
        tree = ast.parse(source.read_text(), filename=str(source))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in forbidden, f"{source}: imports {name}"


def test_every_third_party_import_is_a_declared_requirement():
    declared = set(pins(FUNCTIONS / "requirements.txt"))
    provided_by = {
        "functions_framework": "functions-framework",
        "googleapiclient": "google-api-python-client",
        "google_auth_httplib2": "google-auth-httplib2",
        "httplib2": "httplib2",
        "google.auth": "google-auth",
        "google.oauth2": "google-auth",
        "google.cloud.pubsub_v1": "google-cloud-pubsub",
        "google.cloud.tasks_v2": "google-cloud-tasks",
        "google.api_core": "google-cloud-tasks",
        "google.protobuf": "google-cloud-tasks",
        "google.cloud": "google-cloud-pubsub",
        "grpc": "google-cloud-tasks",
        "flask": "functions-framework",
        "psycopg": "psycopg",
        "psycopg_pool": "psycopg-pool",
    }
    import sys

    stdlib = set(sys.stdlib_module_names) | {"safesend", "main"}
    for source in FUNCTIONS.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            modules = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else ([node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
            )
            for module in modules:
                if module.split(".")[0] in stdlib:
                    continue
                match = next((p for m, p in provided_by.items() if module == m or module.startswith(m + ".")), None)
                assert match in declared, f"{source.name}: import {module} is not covered by a requirement"


def test_entry_points_and_policy_file_ship_inside_functions():
    main = ast.parse((FUNCTIONS / "main.py").read_text())
    entry_points = {n.name for n in main.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")}
    assert entry_points == {"send", "reconcile", "sweep", "status", "notify", "review"}
    assert (FUNCTIONS / "channels.toml").is_file()
    from safesend.config import DEFAULT_CHANNELS_FILE

    assert DEFAULT_CHANNELS_FILE == FUNCTIONS / "channels.toml"
