"""(d) What `terraform validate` would check, offline: every resource and data block in infra/ against the
provider schemas in infra/schema/*-provider-snapshot.json (extracted from the cdktn-provider-* wheels by
infra/schema/regenerate.py), and the provider versions pinned in the environments against the snapshots."""

from __future__ import annotations

import json
import re

import pytest

from .support import ENVS, INFRA, META_ARGUMENTS, MODULE, ROOT, Block, blocks, body_items, is_block, parsed_hcl

SCHEMA = INFRA / "schema"
PREFIXES = {"google_": "google", "archive_": "archive", "time_": "time"}


def snapshots() -> dict[str, dict]:
    return {name: json.loads((SCHEMA / f"{name}-provider-snapshot.json").read_text()) for name in PREFIXES.values()}


def schema_for(block: Block) -> dict | None:
    provider = next((p for prefix, p in PREFIXES.items() if block.type.startswith(prefix)), None)
    if provider is None:
        return None
    section = "resources" if block.kind == "resource" else "data_sources"
    return snapshots()[provider][section].get(block.type)


def check_body(body: dict, schema: dict, where: str, top: bool) -> list[str]:
    errors = []
    present = set()
    for key, value in body_items(body):
        if top and key in META_ARGUMENTS:
            continue
        if key == "dynamic":
            for entry in value:
                for label, dyn in body_items(entry):
                    if label not in schema["blocks"]:
                        errors.append(f"{where}: dynamic \"{label}\" is not a block here")
                        continue
                    present.add(label)
                    for content in dyn.get("content", []):
                        errors += check_body(content, schema["blocks"][label], f"{where}.{label}", False)
            continue
        present.add(key)
        if key in schema["blocks"]:
            if not is_block(value):
                errors.append(f"{where}: {key} is a block, write `{key} {{ ... }}`")
                continue
            for instance in value:
                errors += check_body(instance, schema["blocks"][key], f"{where}.{key}", False)
        elif key in schema["arguments"]:
            if is_block(value):
                errors.append(f"{where}: {key} is an argument, write `{key} = ...`")
        else:
            errors.append(f"{where}: unknown {'argument or block'} {key!r}")
    for name in schema.get("required", []):
        if name not in present:
            errors.append(f"{where}: required {name!r} is missing")
    return errors


def all_blocks() -> list[Block]:
    return blocks("resource") + blocks("data")


def test_snapshots_are_the_committed_output_of_regenerate():
    for name, data in snapshots().items():
        assert data["generated_by"].startswith("infra/schema/regenerate.py"), name
        assert data["unknown_types"] == [], f"{name}: infra uses types the provider lacks: {data['unknown_types']}"
        assert data["resources"] or data["data_sources"], name
    assert (SCHEMA / "regenerate.py").is_file()


def test_every_type_used_is_in_a_snapshot_and_every_snapshot_type_is_used():
    used = {(b.kind, b.type) for b in all_blocks()}
    unknown = sorted(f"{k} {t}" for k, t in used if schema_for(Block("", k, t, "", {})) is None)
    assert not unknown, f"not in the provider schema snapshots (typo, or run infra/schema/regenerate.py): {unknown}"
    in_snapshots = {("resource", t) for s in snapshots().values() for t in s["resources"]} | \
                   {("data", t) for s in snapshots().values() for t in s["data_sources"]}
    assert in_snapshots == used, "snapshots hold unused types: run python3 infra/schema/regenerate.py"


@pytest.mark.parametrize("block", all_blocks(), ids=lambda b: f"{b.type}.{b.name}")
def test_block_arguments_and_nested_blocks_exist_in_the_provider_schema(block):
    schema = schema_for(block)
    assert schema is not None, f"{block.address}: unknown type"
    errors = check_body(block.body, schema, block.address, top=True)
    assert not errors, "\n".join(errors)


def test_lifecycle_blocks_use_known_meta_arguments():
    for block in all_blocks():
        for lifecycle in block.blocks("lifecycle"):
            unknown = {k for k, _ in body_items(lifecycle)} - {
                "create_before_destroy", "prevent_destroy", "ignore_changes", "replace_triggered_by",
                "precondition", "postcondition"}
            assert not unknown, f"{block.address}: unknown lifecycle settings {unknown}"


def test_checker_rejects_what_terraform_validate_would():
    schema = snapshots()["google"]["resources"]["google_pubsub_topic"]
    ok = {"name": "t", "project": "p", "__is_block__": True}
    assert check_body(ok, schema, "t", True) == []
    assert check_body({**ok, "nmae": "x"}, schema, "t", True) == ["t: unknown argument or block 'nmae'"]
    assert check_body({"project": "p"}, schema, "t", True) == ["t: required 'name' is missing"]
    assert "is a block" in check_body({**ok, "schema_settings": {"schema": "s"}}, schema, "t", True)[0]
    assert "unknown" in check_body({**ok, "schema_settings": [{"shcema": "s", "__is_block__": True}]}, schema, "t",
                                   True)[0]


@pytest.mark.parametrize("env", ENVS)
def test_environment_pins_exactly_the_snapshot_provider_versions(env):
    versions = parsed_hcl()[f"infra/envs/{env}/versions.tf"]
    terraform = versions["terraform"][0]
    providers = terraform["required_providers"][0]
    for name, data in snapshots().items():
        assert providers[name]["source"] == data["provider"]["source"], (env, name)
        assert providers[name]["version"] == data["provider"]["version"], \
            f"{env}: pin {name} to {data['provider']['version']} (the version the schema snapshot was made from)"
    assert terraform["backend"] == [{"gcs": {"__is_block__": True}}], f"{env}: want an empty backend \"gcs\" {{}}"


def test_module_constraints_admit_the_pinned_versions():
    module_versions = parsed_hcl()[str((MODULE / "versions.tf").relative_to(ROOT))]
    providers = module_versions["terraform"][0]["required_providers"][0]

    def as_tuple(version: str) -> tuple[int, ...]:
        return tuple(int(x) for x in version.split("."))

    for name, data in snapshots().items():
        pinned = as_tuple(data["provider"]["version"])
        for op, version in re.findall(r"(>=|<=|<|>|=|~>)\s*([\d.]+)", providers[name]["version"]):
            bound = as_tuple(version)
            ok = {">=": pinned >= bound, "<": pinned < bound, "<=": pinned <= bound, ">": pinned > bound,
                  "=": pinned == bound, "~>": pinned[:len(bound) - 1] == bound[:-1] and pinned >= bound}[op]
            assert ok, f"module constraint {name} {op} {version} excludes the pinned {data['provider']['version']}"
