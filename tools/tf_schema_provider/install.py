"""Build an offline plugin directory: the pinned providers, served by server.py, under their real
addresses and versions, for `terraform init -plugin-dir DIR`.

    .venv-tfplugin/bin/python tools/tf_schema_provider/install.py OUT_DIR

prints DIR (OUT_DIR/plugins); OUT_DIR/index.json lists each provider's address, version and
schema file (server.py's --dev form serves it long-lived). Layout, Terraform's unpacked
plugin-directory form: DIR/registry.terraform.io/hashicorp/<name>/<version>/<os>_<arch>/
terraform-provider-<name>_v<version>, a shell script that runs server.py with this python and
OUT_DIR/schemas/<name>.pb. tests/infra builds one OUT_DIR per test session (a scratch copy of the
repository builds its own: the scripts name the tree they run from).

Decoding a wheel takes seconds (google's jsii assembly is large), so the decoded schema is kept
in $XDG_CACHE_HOME/safesend/tf-schema-decoded/<wheel>-<key>.json (~/.cache/... without it; written
atomically; shared by every tree and every clone: a fresh clone, as CI and the gate run in, decoded
the four wheels again, ~12 CPU-s; the key names the wheel file, immutable on PyPI, and this code). Each .pb
holds the provider block and the resource and data source types infra/**/*.tf uses
(regenerate.used_types(), as the snapshots do): Terraform decodes the schema at every provider
start, and google's 1,800 types made that most of a test run's time. Which wheels, and which
provider each is, comes from regenerate.WHEELS, the same pins the offline checks use.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
WHEEL_DIR = ROOT / ".venv-infra" / "schema-wheels"
DECODED = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "safesend" / "tf-schema-decoded"

sys.path.insert(0, str(ROOT))
from tools.tf_schema_provider.schema import provider_schema, regenerate  # noqa: E402 - path set above

NESTING = {"single": 1, "list": 2, "set": 3, "map": 4, "group": 5}


def target() -> str:
    machine = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}[platform.machine().lower()]
    return f"{sys.platform.removesuffix('2')}_{machine}"  # linux_amd64, darwin_arm64


def block_pb(block: dict[str, Any]) -> Any:
    from tf.gen import tfplugin_pb2 as pb

    return pb.Schema.Block(
        attributes=[
            pb.Schema.Attribute(
                name=name,
                type=json.dumps(spec["type"]).encode(),
                required=spec.get("required", False),
                optional=spec.get("optional", False),
                computed=spec.get("computed", False),
                sensitive=spec.get("sensitive", False),
            )
            for name, spec in sorted(block["attributes"].items())
        ],
        block_types=[
            pb.Schema.NestedBlock(
                type_name=name,
                block=block_pb(spec["block"]),
                nesting=NESTING[spec["nesting_mode"]],
                min_items=spec.get("min_items", 0),
                max_items=spec.get("max_items", 0),
            )
            for name, spec in sorted(block["block_types"].items())
        ],
    )


def response_pb(schema: dict[str, Any]) -> bytes:
    """schema.py's JSON -> a serialized GetProviderSchema.Response."""
    from tf.gen import tfplugin_pb2 as pb

    def one(entry: dict[str, Any]) -> Any:
        return pb.Schema(version=entry["version"], block=block_pb(entry["block"]))

    empty = pb.Schema(version=0, block=pb.Schema.Block())
    response = pb.GetProviderSchema.Response(
        provider=one(schema["provider"]),
        provider_meta=empty,
        resource_schemas={name: one(entry) for name, entry in schema["resource_schemas"].items()},
        data_source_schemas={name: one(entry) for name, entry in schema["data_source_schemas"].items()},
    )
    return bytes(response.SerializeToString(deterministic=True))


def wheels() -> list[tuple[Path, str]]:
    """(wheel, provider local name) per pin of regenerate.WHEELS; fails with the fix when absent."""
    found = []
    for requirement, name, _ in regenerate().WHEELS:
        package, version = requirement.split("==")
        matches = sorted(WHEEL_DIR.glob(f"{package.replace('-', '_')}-{version}-*.whl"))
        if not matches:
            raise SystemExit(f"{requirement} is not in {WHEEL_DIR}: run `bash scripts/bootstrap.sh`")
        found.append((matches[0], name))
    return found


def decoded(wheel: Path, directory: Path) -> dict[str, Any]:
    """schema.provider_schema(wheel), kept as JSON (keyed by the wheel and the decoding code)."""
    code = (HERE / "schema.py").read_bytes() + (ROOT / "infra" / "schema" / "regenerate.py").read_bytes()
    key = hashlib.sha256(code + f"{wheel.stat().st_size}".encode()).hexdigest()[:16]
    path = directory / f"{wheel.stem}-{key}.json"
    if path.exists():
        return dict(json.loads(path.read_text(encoding="utf-8")))
    schema = provider_schema(wheel)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}")
    tmp.write_text(json.dumps(schema), encoding="utf-8")
    tmp.replace(path)
    return schema


def build(cache: Path) -> Path:
    pins = wheels()
    plugins = cache / "plugins"
    used = regenerate().used_types()
    schemas = cache / "schemas"
    schemas.mkdir(parents=True, exist_ok=True)
    index = {}
    for wheel, name in pins:
        schema = decoded(wheel, DECODED)
        if schema["address"].rsplit("/", 1)[1] != name:
            raise SystemExit(f"{wheel.name} serves {schema['address']}, expected {name}")
        pb_path = schemas / f"{name}.pb"
        wanted = used.get(name, {"resource": set(), "data": set()})
        served = {
            **schema,
            "resource_schemas": {t: s for t, s in schema["resource_schemas"].items() if t in wanted["resource"]},
            "data_source_schemas": {t: s for t, s in schema["data_source_schemas"].items() if t in wanted["data"]},
        }
        pb_path.write_bytes(response_pb(served))
        host, namespace, type_name = schema["address"].split("/")
        directory = plugins / host / namespace / type_name / schema["version"] / target()
        directory.mkdir(parents=True, exist_ok=True)
        executable = directory / f"terraform-provider-{type_name}_v{schema['version']}"
        address = f"{host}/{namespace}/{type_name}"
        server = HERE / "server.py"
        executable.write_text(f'#!/bin/sh\nexec "{sys.executable}" -I "{server}" "{pb_path}" "{address}" "$@"\n')
        executable.chmod(0o755)
        index[schema["address"]] = {
            "version": schema["version"],
            "schema": str(pb_path),
            "wheel": schema["wheel"],
            "resources": f"{len(served['resource_schemas'])} of {len(schema['resource_schemas'])}",
            "data_sources": f"{len(served['data_source_schemas'])} of {len(schema['data_source_schemas'])}",
            "left_out": schema["left_out"],
        }
    (cache / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    return plugins


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: install.py OUT_DIR")
    print(build(Path(sys.argv[1]).resolve()))
