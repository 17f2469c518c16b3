"""Run Cloud Build steps of cloudbuild*.yaml offline: Cloud Build's substitutions, then the step's
entrypoint and args in a scratch copy of the repository, with `gcloud` and `terraform` replaced by
a stub that records every call (argv, one JSON line each) and answers from a table (stub_server).

The steps' scripts are what runs in Cloud Build, so the tests check behaviour (which gcloud calls
a deploy makes, with which files; whether an apply happens), not the YAML's wording."""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .stub_server import STUB, serving
from .support import ROOT, parsed_yaml

NOT_COPIED = (".terraform", "__pycache__", "*.tfstate*")  # of infra/, into a sim's workspace
SUBSTITUTION = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def substitute(text: str, subs: dict[str, str]) -> str:
    """Cloud Build: $$ is a literal $, ${NAME} and $NAME are substitutions (unknown ones refused)."""

    def one(match: re.Match) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1) or match.group(2)
        if name not in subs:
            raise KeyError(f"substitution {name} has no value")
        return subs[name]

    return SUBSTITUTION.sub(one, text)


@dataclass
class Sim:
    config_name: str  # "cloudbuild.yaml" | "cloudbuild-gcloud.yaml"
    workdir: Path
    subs: dict[str, str]
    answers: list[tuple] = field(default_factory=list)  # (regex, output, exit code[, file to write])

    @classmethod
    def create(
        cls, config_name: str, tmp: Path, overrides: dict[str, str] | None = None, config_path: Path | None = None
    ) -> Sim:
        work = tmp / "workspace"
        shutil.copytree(ROOT / "infra", work / "infra", ignore=shutil.ignore_patterns(*NOT_COPIED))
        config = _load(config_path or ROOT / config_name)
        subs = {k: str(v) for k, v in (config.get("substitutions") or {}).items()}
        subs.update(PROJECT_ID="proj-1", BUILD_ID="build-123", LOCATION="global", PROJECT_NUMBER="123456789012")
        subs.update(overrides or {})
        sim = cls(config_name, work, subs)
        sim.config = config
        (tmp / "stubs").mkdir()
        for tool in ("gcloud", "terraform"):
            stub = tmp / "stubs" / tool
            stub.write_text(STUB.replace("{bash}", shutil.which("bash") or "/bin/bash"))
            stub.chmod(0o755)
        python3 = _python3(os.environ.get("PATH", ""))
        if python3 is not None:  # the steps' `python3`: the interpreter PATH's python3 starts, without a shim
            (tmp / "stubs" / "python3").symlink_to(python3)
        sim.stubs = tmp / "stubs"
        sim.log = tmp / "calls.jsonl"
        return sim

    def step(self, step_id: str) -> dict:
        steps = {s["id"]: s for s in self.config["steps"]}
        return steps[step_id]

    def run(self, step_id: str, timeout: float = 60) -> subprocess.CompletedProcess:
        step = self.step(step_id)
        args = [substitute(str(a), self.subs) for a in step.get("args", [])]
        entry = step.get("entrypoint")
        if entry is None:
            image = substitute(step["name"], self.subs)
            if not image.startswith("hashicorp/terraform"):
                raise AssertionError(f"{step_id}: no entrypoint and not the terraform image")
            command = ["terraform", *args]
        else:
            command = [entry, *args]
        env = {k: v for k, v in os.environ.items() if not k.startswith("SAFESEND_FACT_")}
        for item in step.get("env", []):
            key, _, value = substitute(item, self.subs).partition("=")
            env[key] = value
        cwd = self.workdir / substitute(step["dir"], self.subs) if "dir" in step else self.workdir
        with serving(self.log, self.answers) as port:
            env.update(PATH=f"{self.stubs}{os.pathsep}{env.get('PATH', '')}", STUB_PORT=str(port))
            return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)

    def calls(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]


def inputs_digest(config_name: str, *extra: bytes) -> str:
    """A digest of what a sim of `config_name` runs: the config's bytes and every file Sim.create copies
    from infra/ (name and bytes), plus `extra`. Equal digests, equal builds: a mutated copy differs."""
    digest = hashlib.sha256((ROOT / config_name).read_bytes())
    for path in sorted((ROOT / "infra").rglob("*")):
        parts = path.relative_to(ROOT).parts
        if path.is_file() and not any(fnmatch.fnmatch(part, pattern) for part in parts for pattern in NOT_COPIED):
            digest.update(b"\0" + "/".join(parts).encode() + b"\0" + path.read_bytes())
    for item in extra:
        digest.update(b"\0" + item)
    return digest.hexdigest()


@functools.cache
def _python3(path: str) -> str | None:
    """The interpreter `python3` on `path` runs. A pyenv shim (bash, then `pyenv exec`) took ~0.15
    CPU-s per call, 3-5 calls a build; linked directly, the steps run the same interpreter."""
    found = shutil.which("python3", path=path)
    if found is None:
        return None
    proc = subprocess.run(
        [found, "-c", "import sys; print(sys.executable)"],
        cwd=tempfile.gettempdir(),  # where the steps run: no .python-version of the repository's
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return proc.stdout.strip()


def _load(path: Path) -> dict[str, Any]:
    if path.parent == ROOT:
        return parsed_yaml(ROOT / "cloudbuild.yaml", ROOT / "cloudbuild-gcloud.yaml")[path.name]
    from .support import infra_bin, run_tool

    proc = run_tool([str(infra_bin("python")), "-I", str(Path(__file__).with_name("infra_tool.py")), "yaml", str(path)])
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)[str(path)]


def flags(argv: list[str]) -> dict[str, str | bool]:
    """--name=value / --name (boolean) of one recorded call."""
    out: dict[str, str | bool] = {}
    for arg in argv:
        if arg.startswith("--"):
            name, sep, value = arg[2:].partition("=")
            out[name] = value if sep else True
    return out


def read_env_yaml(path: Path) -> dict[str, str]:
    """The env-vars files infra/env_spec.py writes: `NAME: <JSON string>` per line (or `{}`)."""
    text = path.read_text()
    if text.strip() == "{}":
        return {}
    out = {}
    for line in text.splitlines():
        name, _, value = line.partition(": ")
        out[name] = json.loads(value)
    return out
