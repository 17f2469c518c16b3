"""Shared helpers of tests/infra: paths, the .venv-infra tools, and a small model of the parsed HCL.

The tools (python-hcl2, checkov, check-jsonschema) live in .venv-infra, made by
scripts/bootstrap.sh from requirements-infra.txt. Without it these tests fail; they never skip.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
FUNCTIONS = ROOT / "functions"
VENV_INFRA = ROOT / ".venv-infra"
HCL2_LIB = VENV_INFRA / "python-hcl2"
TOOL = Path(__file__).with_name("infra_tool.py")
CLOUDBUILD_FILES = [ROOT / "cloudbuild.yaml", ROOT / "cloudbuild-gcloud.yaml"]
ENVS = ["dev", "prod"]
MODULE = INFRA / "modules" / "safesend"

META_ARGUMENTS = {"count", "for_each", "depends_on", "provider", "lifecycle", "provisioner", "connection"}


def infra_bin(name: str) -> Path:
    path = VENV_INFRA / "bin" / name
    if not path.exists():
        pytest.fail(
            f"{path.relative_to(ROOT)} is missing: run `bash scripts/bootstrap.sh` "
            f"(it installs requirements-infra.txt into .venv-infra)",
            pytrace=False,
        )
    return path


def run_tool(args: list[str], timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        args, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )


def tf_files() -> list[Path]:
    return sorted(p for p in INFRA.rglob("*.tf") if ".terraform" not in p.parts)


# A directory of parses keyed by file content, shared by the mutation suite's ~90 scratch copies
# (tests/infra/test_mutations.py sets it): each copy differs from the others in one file at most,
# and python-hcl2 took ~0.8 CPU-s per copy to parse the same 26 files again.
PARSE_CACHE = "SAFESEND_INFRA_PARSE_CACHE"
# Likewise a directory of the provider snapshots infra/schema/regenerate.py makes (--cache-dir, keyed
# by all its inputs): the unmutated copy and the snapshot edit read google's assembly (~7 CPU-s) once.
SNAPSHOT_CACHE = "SAFESEND_INFRA_SNAPSHOT_CACHE"


@functools.cache
def parsed_hcl() -> dict[str, dict]:
    """{path relative to the repo: python-hcl2 output} for every .tf file under infra/."""
    files = [str(p.relative_to(ROOT)) for p in tf_files()]
    cache = os.environ.get(PARSE_CACHE)
    return parse_hcl(files, Path(cache) if cache else None)


def parse_hcl(files: list[str], cache: Path | None) -> dict[str, dict]:
    """python-hcl2's output per file; with a cache, only files whose bytes it has not seen are parsed.

    The key is the file's name and bytes, the tool's bytes and the installed python-hcl2 (its
    dist-info name): a parse is a function of those, so a mutated file is always parsed anew."""
    python = infra_bin("python")
    if not (HCL2_LIB / "hcl2").is_dir():
        pytest.fail(f"{HCL2_LIB.relative_to(ROOT)} is missing: run `bash scripts/bootstrap.sh`", pytrace=False)
    keys: dict[str, Path] = {}
    found: dict[str, dict] = {}
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
        salt = hashlib.sha256(TOOL.read_bytes() + "/".join(sorted(p.name for p in HCL2_LIB.iterdir())).encode())
        for name in files:
            key = salt.copy()
            key.update(name.encode() + b"\0" + (ROOT / name).read_bytes())
            keys[name] = cache / f"{key.hexdigest()}.json"
            if keys[name].exists():
                found[name] = json.loads(keys[name].read_text())
    missing = [name for name in files if name not in found]
    if missing:
        proc = run_tool([str(python), "-I", str(TOOL), "hcl", str(HCL2_LIB), *missing])
        assert proc.returncode == 0, proc.stderr
        for name, parsed in json.loads(proc.stdout).items():
            found[name] = parsed
            if name in keys:  # written whole, then renamed: a parallel reader never sees half a file
                partial = keys[name].with_suffix(f".{os.getpid()}.tmp")
                partial.write_text(json.dumps(parsed))
                os.replace(partial, keys[name])
    return {name: found[name] for name in files}


@functools.cache
def parsed_yaml(*paths: Path) -> dict[str, Any]:
    proc = run_tool([str(infra_bin("python")), "-I", str(TOOL), "yaml", *map(str, paths)])
    assert proc.returncode == 0, proc.stderr
    return {Path(k).name: v for k, v in json.loads(proc.stdout).items()}


def is_block(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) and v.get("__is_block__") for v in value)


def body_items(body: dict) -> Iterator[tuple[str, Any]]:
    for key, value in body.items():
        if not key.startswith("__"):
            yield key, value


@dataclass(frozen=True)
class Block:
    file: str  # relative to the repo
    kind: str  # "resource" | "data"
    type: str
    name: str
    body: dict

    @property
    def address(self) -> str:
        prefix = "data." if self.kind == "data" else ""
        return f"{self.file}: {prefix}{self.type}.{self.name}"

    def first(self, *path: str) -> Any:
        """Value at body[path[0]][0][path[1]]..., blocks taking their first instance."""
        value: Any = self.body
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
            if is_block(value):
                value = value[0]
        return value

    def blocks(self, name: str) -> list[dict]:
        value = self.body.get(name)
        return value if is_block(value) else []

    def text(self) -> str:
        return json.dumps(self.body, sort_keys=True)


def blocks(kind: str, under: Path = INFRA) -> list[Block]:
    """Every `resource` (kind="resource") or `data` block of the .tf files below `under`."""
    found = []
    for file, parsed in parsed_hcl().items():
        if not (ROOT / file).is_relative_to(under):
            continue
        for entry in parsed.get(kind, []):
            for tf_type, named in body_items(entry):
                for name, body in body_items(named):
                    found.append(Block(file, kind, tf_type, name, body))
    return found


def resources(tf_type: str | None = None, under: Path = MODULE) -> list[Block]:
    return [b for b in blocks("resource", under) if tf_type is None or b.type == tf_type]


def resource(tf_type: str, name: str) -> Block:
    matches = [b for b in resources(tf_type) if b.name == name]
    assert len(matches) == 1, f"expected one {tf_type}.{name} in {MODULE.relative_to(ROOT)}, found {len(matches)}"
    return matches[0]


def top_level(kind: str, path: Path) -> dict[str, dict]:
    """{name: body} of the `variable`/`output`/`module` blocks of one directory."""
    found: dict[str, dict] = {}
    for file, parsed in parsed_hcl().items():
        if (ROOT / file).parent != path:
            continue
        for entry in parsed.get(kind, []):
            for name, body in body_items(entry):
                found[name] = body
    return found


def locals_of(path: Path) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for file, parsed in parsed_hcl().items():
        if (ROOT / file).parent == path:
            for entry in parsed.get("locals", []):
                found.update(dict(body_items(entry)))
    return found


REF = re.compile(r"^\$\{([\w.\[\]\"-]+)\}$")


def reference(value: Any) -> str | None:
    """ "${google_service_account.send.email}" -> "google_service_account.send.email"."""
    match = REF.match(value) if isinstance(value, str) else None
    return match.group(1) if match else None


def entry_points() -> set[str]:
    """Functions in functions/main.py decorated with @functions_framework.http."""
    tree = ast.parse((FUNCTIONS / "main.py").read_text())
    found = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if (
                    isinstance(target, ast.Attribute)
                    and target.attr == "http"
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "functions_framework"
                ):
                    found.add(node.name)
    return found
