"""(d) Part of what `terraform validate` checks, offline, against the provider schema snapshots in
infra/schema/*-provider-snapshot.json (extracted from the cdktn-provider-* wheels, plus enums from
Google's API discovery documents, by infra/schema/regenerate.py):

* every resource and data block: its type exists, every argument and nested block exists, no
  required one is missing, a block is written as a block and an argument as an argument, a block
  the provider allows once appears once;
* every literal value has the argument's type (number, bool, string, list, map) and, where the
  provider or the API lists the allowed values, is one of them; so is a conditional's literal
  branches and the default of a variable an argument is set from;
* every reference resolves: var.* and local.* are declared, module.M.O is an output of M,
  resource and data references name a declared block, index it exactly when it has count or
  for_each, and read attributes the provider schema has (arguments, computed attributes, nested
  blocks, down to the last step);
* the snapshots are exactly what regenerate.py makes from the pinned wheels (it is run), the
  environments pin exactly the snapshot versions, and a committed .terraform.lock.hcl pins them too.

Not checked here (Cloud Build's `terraform validate` and `plan` do): types of computed
expressions, provider-side validation beyond enums (formats, ranges), API behaviour."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from . import hcl_eval as H  # noqa: N812 - H reads like the HCL it evaluates
from .support import (
    ENVS,
    INFRA,
    META_ARGUMENTS,
    MODULE,
    ROOT,
    SNAPSHOT_CACHE,
    VENV_INFRA,
    Block,
    blocks,
    body_items,
    infra_bin,
    is_block,
    parsed_hcl,
    run_tool,
    top_level,
)

pytestmark = pytest.mark.functions_out_of_process  # tests/coverage_pause.py

SCHEMA = INFRA / "schema"
PROVIDERS = ("google", "google-beta", "archive", "time")
WHEEL_CACHE = VENV_INFRA / "schema-wheels"
ADDRESS_ROOTS = ("google_", "archive_", "time_")
LIFECYCLE = {
    "create_before_destroy",
    "prevent_destroy",
    "ignore_changes",
    "replace_triggered_by",
    "precondition",
    "postcondition",
}


def snapshots(schema_dir: Path = SCHEMA) -> dict[str, dict]:
    return {
        name: json.loads(path.read_text())
        for name in PROVIDERS
        if (path := schema_dir / f"{name}-provider-snapshot.json").exists()
    }


def provider_of(block: Block) -> str:
    explicit = block.body.get("provider")
    if explicit:
        return explicit.removeprefix("${").removesuffix("}").split(".")[0]
    return block.type.split("_", 1)[0]


def schema_for(block: Block, snaps: dict | None = None) -> dict | None:
    snap = (snaps or snapshots()).get(provider_of(block))
    if snap is None:
        return None
    section = "resources" if block.kind == "resource" else "data_sources"
    return snap[section].get(block.type)


# ------------------------------------------------------------------ values: types and enums
def literal_candidates(value, variables: dict) -> list | None:
    """The literal values an argument can take, when the configuration says so: the literal itself,
    both literal branches of a conditional, or the default of the variable it is set from.
    None when only evaluation could tell."""
    if not isinstance(value, str) or "${" not in value:
        return [value]
    pieces = H.interpolations(value)
    if len(pieces) != 1 or value != "${" + pieces[0] + "}":
        return None
    node = H.parse(pieces[0])
    if node.kind == "cond" and node.args[1].kind == "lit" and node.args[2].kind == "lit":
        return [node.args[1].args[0], node.args[2].args[0]]
    if node.kind == "attr" and node.args[0].kind == "var" and node.args[0].args[0] == "var":
        default = variables.get(node.args[1], {}).get("default", None)
        if default is not None and not (isinstance(default, str) and "${" in default):
            return [default]
    return None


def type_problem(value, tf_type: str) -> str | None:
    if isinstance(value, str) and "${" in value:
        return None
    if tf_type == "any":
        return None
    if tf_type == "number":
        if isinstance(value, bool) or not (
            isinstance(value, (int, float)) or (isinstance(value, str) and re.fullmatch(r"-?\d+(\.\d+)?", value))
        ):
            return f"needs a number, got {value!r}"
    elif tf_type == "bool":
        if not (isinstance(value, bool) or value in ("true", "false")):
            return f"needs a bool, got {value!r}"
    elif tf_type == "string":
        if isinstance(value, (list, dict)):
            return f"needs a string, got {type(value).__name__}"
    elif tf_type.startswith(("list(", "set(")):
        if not isinstance(value, list):
            return f"needs a list, got {value!r}"
        inner = tf_type[tf_type.index("(") + 1 : -1]
        return next((p for p in (type_problem(v, inner) for v in value) if p), None)
    elif tf_type.startswith("map("):
        if not isinstance(value, dict):
            return f"needs a map, got {value!r}"
        inner = tf_type[4:-1]
        return next((p for k, v in value.items() if not k.startswith("__") and (p := type_problem(v, inner))), None)
    return None


def value_problems(name: str, value, spec: dict, variables: dict, where: str) -> list[str]:
    candidates = literal_candidates(value, variables)
    if candidates is None:
        return []
    errors = []
    for candidate in candidates:
        problem = type_problem(candidate, spec["type"])
        if problem:
            errors.append(f"{where}: {name} {problem}")
        elif "enum" in spec and isinstance(candidate, str) and "${" not in candidate and candidate not in spec["enum"]:
            errors.append(f"{where}: {name} = {candidate!r} is not one of {spec['enum']} ({spec['enum_source']})")
    return errors


# ------------------------------------------------------------------ blocks
def check_body(body: dict, schema: dict, where: str, top: bool, variables: dict | None = None) -> list[str]:
    variables = variables or {}
    errors = []
    present = set()
    for key, value in body_items(body):
        if top and key in META_ARGUMENTS:
            continue
        if key == "dynamic":
            for entry in value:
                for label, dyn in body_items(entry):
                    if label not in schema["blocks"]:
                        errors.append(f'{where}: dynamic "{label}" is not a block here')
                        continue
                    present.add(label)
                    for content in dyn.get("content", []):
                        errors += check_body(content, schema["blocks"][label], f"{where}.{label}", False, variables)
            continue
        present.add(key)
        if key in schema["blocks"]:
            if not is_block(value):
                errors.append(f"{where}: {key} is a block, write `{key} {{ ... }}`")
                continue
            if schema["blocks"][key]["nesting"] == "single" and len(value) > 1:
                errors.append(f"{where}: at most one {key} block")
            for instance in value:
                errors += check_body(instance, schema["blocks"][key], f"{where}.{key}", False, variables)
        elif key in schema["arguments"]:
            if is_block(value):
                errors.append(f"{where}: {key} is an argument, write `{key} = ...`")
                continue
            errors += value_problems(key, value, schema["arguments"][key], variables, where)
        else:
            errors.append(f"{where}: unknown argument or block {key!r}")
    for name, spec in {**schema["arguments"], **schema["blocks"]}.items():
        if spec.get("required") and name not in present:
            errors.append(f"{where}: required {name!r} is missing")
    return errors


def all_blocks() -> list[Block]:
    return blocks("resource") + blocks("data")


def variables_of(block: Block) -> dict:
    return top_level("variable", (ROOT / block.file).parent)


# ------------------------------------------------------------------ references
def walk_schema(node: dict, steps: list, where: str) -> str | None:
    """Follow attribute/index steps through a resource schema; the first impossible step's error."""
    kind = "object"
    i = 0
    while i < len(steps):
        step = steps[i]
        if kind == "object":
            if step[0] != "attr":
                return f"{where}: cannot index here"
            name = step[1]
            if name in node.get("blocks", {}):
                node, kind = node["blocks"][name], "nested"
            elif name in node.get("arguments", {}):
                node, kind = node["arguments"][name], "value"
            elif name in node.get("attributes", {}):
                attr = node["attributes"][name]
                node, kind = (attr, "nested") if "attributes" in attr and "nesting" in attr else (attr, "value")
            else:
                known = sorted({*node.get("arguments", {}), *node.get("attributes", {}), *node.get("blocks", {})})
                return f"{where}: no attribute {name!r} (has {known})"
        elif kind == "nested":
            # SDKv2 nested blocks and objects are lists/maps even with one element: index first.
            if step[0] not in ("index", "splat"):
                return f"{where}: {steps[i - 1][1]!r} is a list of objects; index it ([0]) before .{step[1]}"
            node = {
                "arguments": node.get("arguments", {}),
                "attributes": node.get("attributes", {}),
                "blocks": node.get("blocks", {}),
            }
            kind = "object"
        else:  # value
            tf_type = node.get("type", "any")
            if tf_type.startswith(("list(", "map(", "set(")):
                if step[0] not in ("index", "splat"):
                    return f"{where}: .{step[1]} on a {tf_type}"
                node = {"type": tf_type[tf_type.index("(") + 1 : -1]}
            elif tf_type != "any":
                return f"{where}: {tf_type} has no {step}"
            else:
                return None
        i += 1
    return None


def reference_problems(file: str, parsed: dict, snaps: dict) -> list[str]:
    directory = (ROOT / file).parent
    declared_vars = set(top_level("variable", directory))
    declared_locals = {
        k
        for f, p in parsed_hcl().items()
        if (ROOT / f).parent == directory
        for entry in p.get("locals", [])
        for k, _ in body_items(entry)
    }
    module_calls = top_level("module", directory)
    resources_here = {(b.type, b.name): b for b in blocks("resource", directory) if (ROOT / b.file).parent == directory}
    data_here = {(b.type, b.name): b for b in blocks("data", directory) if (ROOT / b.file).parent == directory}
    errors = []
    for section, entries in parsed.items():
        if section in ("moved", "terraform") or section.startswith("__"):
            continue
        for expr in H.expressions_in(entries):
            try:
                refs = H.traversals(H.parse(expr))
            except H.Unsupported as exc:
                errors.append(f"{file}: cannot parse {expr!r}: {exc}")
                continue
            for root, steps in refs:
                where = f"{file}: {root}" + "".join(f".{s[1]}" if s[0] == "attr" else "[…]" for s in steps)
                errors += _check_reference(
                    root,
                    steps,
                    where,
                    declared_vars,
                    declared_locals,
                    module_calls,
                    resources_here,
                    data_here,
                    snaps,
                    directory,
                )
    for entry in parsed.get("moved", []):
        source, target = entry["from"].strip("${}"), entry["to"].strip("${}")
        tf_type, name = target.split("[")[0].split(".")
        block = resources_here.get((tf_type, name))
        counted = block is not None and ("count" in block.body or "for_each" in block.body)
        if not counted or not target.startswith(f"{tf_type}.{name}[") or source.split(".")[0] != tf_type:
            errors.append(f"{file}: moved {source} -> {target} must move a resource to an instance of a counted one")
    return errors


def _check_reference(
    root, steps, where, declared_vars, declared_locals, module_calls, resources_here, data_here, snaps, directory
) -> list[str]:
    if root == "var":
        return (
            []
            if steps and steps[0] == ("attr", steps[0][1]) and steps[0][1] in declared_vars
            else [f"{where}: undeclared variable"]
        )
    if root == "local":
        return [] if steps and steps[0][1] in declared_locals else [f"{where}: undeclared local"]
    if root == "module":
        if not steps or steps[0][1] not in module_calls:
            return [f"{where}: undeclared module"]
        if len(steps) == 1:
            return []  # the whole module's outputs, as an object (an environment's one output)
        source = (directory / module_calls[steps[0][1]]["source"]).resolve()
        outputs = top_level("output", source)
        return [] if steps[1][1] in outputs else [f"{where}: module {steps[0][1]} has no output {steps[1][1]!r}"]
    if root == "data":
        if len(steps) < 2:
            return [f"{where}: incomplete data reference"]
        block = data_here.get((steps[0][1], steps[1][1]))
        rest = steps[2:]
    elif root.startswith(ADDRESS_ROOTS):
        if not steps:
            return []  # a whole resource (depends_on)
        block = resources_here.get((root, steps[0][1]))
        rest = steps[1:]
    else:
        return []  # count, each, path, self, iteration variables
    if block is None:
        return [f"{where}: not declared in {directory.relative_to(ROOT)}"]
    counted = "count" in block.body or "for_each" in block.body
    if counted:
        if not rest:
            return []
        if rest[0][0] not in ("index", "splat"):
            return [f"{where}: {block.type}.{block.name} has count/for_each: pick an instance ([0], [*], [key])"]
        rest = rest[1:]
    elif rest and rest[0][0] != "attr":
        return [f"{where}: {block.type}.{block.name} has no count/for_each: it cannot be indexed"]
    schema = schema_for(block, snaps)
    if schema is None:
        return [f"{where}: no schema for {block.type}"]
    problem = walk_schema(schema, rest, where)
    return [problem] if problem else []


# ------------------------------------------------------------------ tests
def test_snapshots_are_exactly_what_regenerate_makes_from_the_pinned_wheels():
    """Runs infra/schema/regenerate.py --check (wheels from PyPI, cached in .venv-infra/schema-wheels)."""
    WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(SCHEMA))
    try:
        import regenerate
    finally:
        sys.path.remove(str(SCHEMA))
    for requirement, _, _ in regenerate.WHEELS:
        name, version = requirement.split("==")
        if not list(WHEEL_CACHE.glob(f"{name.replace('-', '_')}-{version}-*.whl")):
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--quiet",
                    "--no-deps",
                    "--only-binary=:all:",
                    "--disable-pip-version-check",
                    "-d",
                    str(WHEEL_CACHE),
                    requirement,
                ],
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert proc.returncode == 0, f"pip download {requirement} (PyPI is needed once):\n{proc.stderr[-2000:]}"
    proc = subprocess.run(
        [
            sys.executable,
            str(SCHEMA / "regenerate.py"),
            "--check",
            "--wheel-dir",
            str(WHEEL_CACHE),
            # The mutation suite's copies side by side share the snapshots made (keyed by their inputs).
            *(["--cache-dir", os.environ[SNAPSHOT_CACHE]] if os.environ.get(SNAPSHOT_CACHE) else []),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, f"stale snapshots: run python3 infra/schema/regenerate.py\n{proc.stdout}{proc.stderr}"
    for name, data in snapshots().items():
        assert data["unknown_types"] == [], f"{name}: infra uses types the provider lacks: {data['unknown_types']}"


def test_regenerate_makes_a_snapshot_once_per_set_of_inputs(monkeypatch, tmp_path):
    """Reading google's assembly costs ~7 CPU-s and the gate checked the same inputs up to three
    times: with --cache-dir a snapshot is made once per inputs, and again when any of them changes."""
    sys.path.insert(0, str(SCHEMA))
    try:
        import regenerate
    finally:
        sys.path.remove(str(SCHEMA))
    made: list[tuple[bytes, dict]] = []

    def fake_snapshot(wheel: Path, provider_name: str, wanted: dict) -> dict:
        made.append((wheel.read_bytes(), wanted))
        return {"snapshot": len(made)}

    monkeypatch.setattr(regenerate, "snapshot", fake_snapshot)
    wheel, cache = tmp_path / "cdktn_provider_time-1-py3-none-any.whl", tmp_path / "cache"
    wheel.write_bytes(b"one")
    wanted = {"resource": {"time_sleep"}, "data": set()}
    first = regenerate.cached_snapshot(wheel, "time", wanted, cache)
    assert regenerate.cached_snapshot(wheel, "time", wanted, cache) == first == {"snapshot": 1}
    assert regenerate.cached_snapshot(wheel, "time", {"resource": {"time_sleep"}, "data": {"x"}}, cache) == {
        "snapshot": 2
    }
    wheel.write_bytes(b"two")
    assert regenerate.cached_snapshot(wheel, "time", wanted, cache) == {"snapshot": 3}
    assert regenerate.cached_snapshot(wheel, "time", wanted, None) == {"snapshot": 4}  # no cache: always made
    assert [data for data, _ in made] == [b"one", b"one", b"two", b"two"]


def test_every_type_used_is_in_a_snapshot_and_every_snapshot_type_is_used():
    snaps = snapshots()
    used = {(provider_of(b), b.kind, b.type) for b in all_blocks()}
    unknown = sorted(
        f"{p} {k} {t}" for p, k, t in used if schema_for(Block("", k, t, "", {"provider": p}), snaps) is None
    )
    assert not unknown, f"not in the provider schema snapshots (typo, or run infra/schema/regenerate.py): {unknown}"
    in_snapshots = {(p, "resource", t) for p, s in snaps.items() for t in s["resources"]} | {
        (p, "data", t) for p, s in snaps.items() for t in s["data_sources"]
    }
    assert in_snapshots == used, "snapshots hold unused types: run python3 infra/schema/regenerate.py"


@pytest.mark.parametrize("block", all_blocks(), ids=lambda b: f"{b.type}.{b.name}")
def test_block_arguments_types_enums_and_nested_blocks_match_the_provider_schema(block):
    schema = schema_for(block)
    assert schema is not None, f"{block.address}: unknown type"
    errors = check_body(block.body, schema, block.address, top=True, variables=variables_of(block))
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("file", sorted(parsed_hcl()), ids=lambda f: f)
def test_every_reference_resolves_against_declarations_and_the_schema(file):
    errors = reference_problems(file, parsed_hcl()[file], snapshots())
    assert not errors, "\n".join(errors)


def test_lifecycle_blocks_use_known_meta_arguments():
    for block in all_blocks():
        for lifecycle in block.blocks("lifecycle"):
            unknown = {k for k, _ in body_items(lifecycle)} - LIFECYCLE
            assert not unknown, f"{block.address}: unknown lifecycle settings {unknown}"


def test_checks_reject_what_terraform_validate_or_the_provider_would():
    """Each check on a known-bad input: every one of them can fail."""
    snaps = snapshots()
    topic = snaps["google"]["resources"]["google_pubsub_topic"]
    ok = {"name": "t", "project": "p", "__is_block__": True}
    assert check_body(ok, topic, "t", True) == []
    assert check_body({**ok, "nmae": "x"}, topic, "t", True) == ["t: unknown argument or block 'nmae'"]
    assert check_body({"project": "p"}, topic, "t", True) == ["t: required 'name' is missing"]
    assert "is a block" in check_body({**ok, "schema_settings": {"schema": "s"}}, topic, "t", True)[0]
    queue = snaps["google"]["resources"]["google_cloud_tasks_queue"]
    bad_retry = {"name": "q", "location": "l", "retry_config": [{"max_doublings": "four", "__is_block__": True}]}
    assert "needs a number" in " ".join(check_body(bad_retry, queue, "q", True))
    good_retry = {"name": "q", "location": "l", "retry_config": [{"max_doublings": 4, "__is_block__": True}]}
    assert check_body(good_retry, queue, "q", True) == []
    repo = snaps["google"]["resources"]["google_artifact_registry_repository"]
    assert "not one of" in " ".join(check_body({"repository_id": "r", "format": "DOCKERR"}, repo, "r", True))
    database = snaps["google"]["resources"]["google_firestore_database"]
    db = {"name": "(default)", "location_id": "nam5", "type": "FIRESTORE_NATIV"}
    assert "not one of" in " ".join(check_body(db, database, "d", True))
    conditional = {
        **db,
        "type": "FIRESTORE_NATIVE",
        "delete_protection_state": '${var.p ? "DELETE_PROTECTION_ENABLED" : "DELETE_PROTECTON_DISABLED"}',
    }
    assert "DELETE_PROTECTON_DISABLED" in " ".join(check_body(conditional, database, "d", True))
    job = snaps["google"]["resources"]["google_cloud_scheduler_job"]
    push = {"name": "j", "http_target": [{"uri": "u", "http_method": "PUSH", "__is_block__": True}]}
    assert "not one of" in " ".join(check_body(push, job, "j", True))
    assert "not one of" in " ".join(
        check_body({**db, "type": "${var.kind}"}, database, "d", True, {"kind": {"default": "FIRESTORE"}})
    )
    twice = {"name": "q", "location": "l", "retry_config": [{"__is_block__": True}, {"__is_block__": True}]}
    assert "at most one" in " ".join(check_body(twice, queue, "q", True))
    function = snaps["google"]["resources"]["google_cloudfunctions2_function"]
    ref = lambda text: walk_schema(function, list(H.traversals(H.parse(text))[0][1][1:]), "r")  # noqa: E731
    assert ref("google_cloudfunctions2_function.f.service_config[0].service") is None
    assert "no attribute 'locaton'" in ref("google_cloudfunctions2_function.f.locaton")
    assert "index it" in ref("google_cloudfunctions2_function.f.service_config.service")
    assert "no attribute 'servce'" in ref("google_cloudfunctions2_function.f.service_config[0].servce")


def test_the_module_pins_exactly_the_snapshot_provider_versions():
    """One place pins the providers for every environment: the module's versions.tf."""
    versions = parsed_hcl()[str((MODULE / "versions.tf").relative_to(ROOT))]
    providers = versions["terraform"][0]["required_providers"][0]
    for name, data in snapshots().items():
        assert providers[name]["source"] == data["provider"]["source"], name
        assert providers[name]["version"] == data["provider"]["version"], (
            f"pin {name} to {data['provider']['version']} (the version the schema snapshot was made from)"
        )
    assert {k for k in providers if not k.startswith("__")} == set(snapshots()), "pins without snapshots"


@pytest.mark.parametrize("env", ENVS)
def test_environment_pins_nothing_of_its_own_and_keeps_an_empty_gcs_backend(env):
    terraform = parsed_hcl()[f"infra/envs/{env}/providers.tf"]["terraform"][0]
    assert "required_providers" not in terraform, f"{env}: the module pins the providers"
    assert terraform["backend"] == [{"gcs": {"__is_block__": True}}], f'{env}: want an empty backend "gcs" {{}}'


# ------------------------------------------------------------------ lock files
def parse_hcl_file(path: Path) -> dict:
    proc = run_tool(
        [
            str(infra_bin("python")),
            "-I",
            str(Path(__file__).with_name("infra_tool.py")),
            "hcl",
            str(VENV_INFRA / "python-hcl2"),
            str(path),
        ]
    )
    assert proc.returncode == 0, proc.stderr
    parsed = json.loads(proc.stdout)[str(path)]
    assert "__error__" not in parsed, parsed
    return parsed


def lock_problems(lock: Path, snaps: dict) -> list[str]:
    """A lock file must pin every provider at its snapshot version, with hashes, and nothing else."""
    parsed = parse_hcl_file(lock)
    pinned = {}
    for entry in parsed.get("provider", []):
        for address, body in body_items(entry):
            pinned[address] = body
    errors = []
    expected = {
        f"registry.terraform.io/{data['provider']['source']}": data["provider"]["version"] for data in snaps.values()
    }
    for address, version in expected.items():
        body = pinned.get(address)
        if body is None:
            errors.append(f"{lock}: {address} is not locked")
            continue
        if body.get("version") != version:
            errors.append(f"{lock}: {address} locked at {body.get('version')}, the schema snapshot is of {version}")
        hashes = body.get("hashes") or []
        if not any(str(h).startswith("h1:") for h in hashes):
            errors.append(f"{lock}: {address} has no h1: hashes (run `terraform providers lock -platform=...`)")
    for address in set(pinned) - set(expected):
        errors.append(f"{lock}: {address} is locked but not pinned in versions.tf")
    return errors


@pytest.mark.parametrize("env", ENVS)
def test_a_committed_lock_file_pins_the_snapshot_versions(env):
    lock = INFRA / "envs" / env / ".terraform.lock.hcl"
    if lock.exists():
        assert lock_problems(lock, snapshots()) == []


def test_lock_check_rejects_a_wrong_pin(tmp_path):
    snaps = snapshots()
    lines = []
    for data in snaps.values():
        lines += [
            f'provider "registry.terraform.io/{data["provider"]["source"]}" {{',
            f'  version     = "{data["provider"]["version"]}"',
            f'  constraints = "{data["provider"]["version"]}"',
            '  hashes = ["h1:abc=", "zh:0123"]',
            "}",
        ]
    good = tmp_path / "good.hcl"
    good.write_text("\n".join(lines) + "\n")
    assert lock_problems(good, snaps) == []
    bad = tmp_path / "bad.hcl"
    bad.write_text(good.read_text().replace('version     = "8.7.0"', 'version     = "8.6.0"', 1))
    assert any("locked at 8.6.0" in e for e in lock_problems(bad, snaps))
    nohash = tmp_path / "nohash.hcl"
    nohash.write_text(good.read_text().replace('"h1:abc=", ', "", 1))
    assert any("no h1: hashes" in e for e in lock_problems(nohash, snaps))
