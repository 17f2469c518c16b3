"""Run Cloud Build steps of cloudbuild*.yaml offline: Cloud Build's substitutions, then the step's
entrypoint and args in a scratch copy of the repository, with `gcloud` and `terraform` replaced by
a stub that records every call (argv, one JSON line each) and answers from a table.

The steps' scripts are what runs in Cloud Build, so the tests check behaviour (which gcloud calls
a deploy makes, with which files; whether an apply happens), not the YAML's wording."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .support import ROOT, parsed_yaml

SUBSTITUTION = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")

STUB = r"""#!{python}
import json, os, re, sys
argv = sys.argv[1:]
name = os.path.basename(sys.argv[0])
with open(os.environ["STUB_LOG"], "a") as log:
    log.write(json.dumps([name] + argv) + "\n")
answers = json.load(open(os.environ["STUB_ANSWERS"]))
line = " ".join([name] + argv)
for pattern, out, code, *write_to in answers:
    if re.search(pattern, line):
        if write_to:
            with open(write_to[0], "w") as handle:
                handle.write(out)
        else:
            sys.stdout.write(out)
        sys.exit(code)
sys.exit(0)
"""


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
        shutil.copytree(
            ROOT / "infra", work / "infra", ignore=shutil.ignore_patterns(".terraform", "__pycache__", "*.tfstate*")
        )
        config = _load(config_path or ROOT / config_name)
        subs = {k: str(v) for k, v in (config.get("substitutions") or {}).items()}
        subs.update(PROJECT_ID="proj-1", BUILD_ID="build-123", LOCATION="global", PROJECT_NUMBER="123456789012")
        subs.update(overrides or {})
        sim = cls(config_name, work, subs)
        sim.config = config
        (tmp / "stubs").mkdir()
        for tool in ("gcloud", "terraform"):
            stub = tmp / "stubs" / tool
            stub.write_text(STUB.replace("{python}", sys.executable))
            stub.chmod(0o755)
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
        answers = self.workdir.parent / "answers.json"
        answers.write_text(json.dumps(self.answers))
        env.update(
            PATH=f"{self.stubs}{os.pathsep}{env.get('PATH', '')}", STUB_LOG=str(self.log), STUB_ANSWERS=str(answers)
        )
        cwd = self.workdir / substitute(step["dir"], self.subs) if "dir" in step else self.workdir
        return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)

    def calls(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]


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
