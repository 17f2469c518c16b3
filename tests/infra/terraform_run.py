"""Real Terraform, offline: the binary, the pinned providers served by tools/tf_schema_provider, and
initialized scratch copies of infra/ to run `validate` and `test` in.

* `terraform` must be on PATH (or SAFESEND_TERRAFORM): without it the tests fail with how to
  install it, they never skip.
* The plugin directory is built once per session (install.py keeps the decoded schemas in
  ~/.cache/safesend/tf-schema-decoded, so that takes a second after the first time on a machine).
  `terraform init -plugin-dir` installs the providers from it under their real addresses and
  versions; then one long-lived server per provider (server.py --dev) answers every command of the
  session through TF_REATTACH_PROVIDERS, stopped by PID at the end.
* Every command runs in a copy of infra/ under a temporary directory: `terraform init` writes
  .terraform and a .terraform.lock.hcl for the offline plugins, and the repository's own lock
  files must keep the real providers' hashes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from .support import INFRA, ROOT

TF_VERSION = "1.11.4"  # cloudbuild.yaml's _TF_VERSION
PLUGIN_VENV = ROOT / ".venv-tfplugin"
PLUGIN_TOOL = ROOT / "tools" / "tf_schema_provider"
SERVER = [str(PLUGIN_VENV / "bin" / "python"), "-u", "-I", str(PLUGIN_TOOL / "server.py")]
CONFIGS = {"dev": "infra/envs/dev", "prod": "infra/envs/prod", "module": "infra/modules/safesend"}

INSTALL_TERRAFORM = f"""terraform is not installed (the gate runs real Terraform {TF_VERSION}, offline). Install it:
  curl -fsSLo /tmp/tf.zip https://releases.hashicorp.com/terraform/{TF_VERSION}/terraform_{TF_VERSION}_linux_amd64.zip
  unzip -o /tmp/tf.zip terraform -d /usr/local/bin
or, on Debian/Ubuntu, HashiCorp's apt repository (https://developer.hashicorp.com/terraform/install):
  apt-get install terraform={TF_VERSION}-1
or set SAFESEND_TERRAFORM to its path."""


def terraform_bin() -> str:
    found = os.environ.get("SAFESEND_TERRAFORM") or shutil.which("terraform")
    if not found:
        pytest.fail(INSTALL_TERRAFORM, pytrace=False)
    return found


# Go's collector at GOGC=400 instead of 100: Terraform decodes the google providers' large schemas
# for every `run` block, and collecting four times less often took a `terraform test` of the module
# from 61 to 48 CPU-s (2026-12-02, 2-core machine) for a peak of 0.5 GB instead of 0.24; GOMEMLIMIT
# makes it collect harder again near 1 GiB. A caller's own settings win.
GO_GC_ENV = {"GOGC": "400", "GOMEMLIMIT": "1GiB"}


def base_env() -> dict[str, str]:
    """No CLI config of the user's, no checkpoint calls, no colour, no prompts; a lazier collector."""
    env = {**GO_GC_ENV, **{k: v for k, v in os.environ.items() if not k.startswith(("TF_", "GOOGLE_"))}}
    env.update(TF_CLI_CONFIG_FILE=os.devnull, CHECKPOINT_DISABLE="1", TF_IN_AUTOMATION="1", TF_INPUT="0")
    return env


def build_plugins(out: Path) -> Path:
    python = PLUGIN_VENV / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{python.relative_to(ROOT)} is missing: run `bash scripts/bootstrap.sh`", pytrace=False)
    proc = subprocess.run(
        [str(python), "-I", str(PLUGIN_TOOL / "install.py"), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return Path(proc.stdout.strip())


@dataclass
class Servers:
    """The long-lived provider servers of a session and the env that points Terraform at them."""

    pids: list[int]
    reattach: str


@contextmanager
def provider_servers(plugins: Path) -> Iterator[Servers]:
    index = json.loads((plugins.parent / "index.json").read_text())
    procs: list[subprocess.Popen[str]] = []
    reattach: dict[str, object] = {}
    try:
        for address, entry in sorted(index.items()):
            proc = subprocess.Popen(
                [*SERVER, entry["schema"], address, "--dev"],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                start_new_session=True,
            )
            procs.append(proc)
            assert proc.stdout is not None
            deadline = time.monotonic() + 30
            for _ in range(10):  # "Running in dev mode", a blank line, then the export line
                line = proc.stdout.readline()
                if "TF_REATTACH_PROVIDERS=" in line:
                    reattach.update(json.loads(line.split("=", 1)[1].strip().strip("'")))
                    break
                assert line and time.monotonic() < deadline, f"{address}: server.py --dev printed no reattach line"
            assert address in reattach, address
        yield Servers([p.pid for p in procs], json.dumps(reattach))
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
            if proc.stdout:
                proc.stdout.close()


def copy_tree(dest: Path) -> Path:
    """A scratch copy of infra/ (functions/ linked beside it, as the module's paths expect)."""
    shutil.copytree(INFRA, dest / "infra", ignore=shutil.ignore_patterns(".terraform", "__pycache__"))
    (dest / "functions").symlink_to(ROOT / "functions")
    return dest


@dataclass
class Terraform:
    binary: str
    plugins: Path
    servers: Servers | None = None

    def env(self, reattach: bool = True) -> dict[str, str]:
        env = base_env()
        if self.servers and reattach:
            env["TF_REATTACH_PROVIDERS"] = self.servers.reattach
        return env

    def run(
        self, cwd: Path, *args: str, timeout: float = 300, reattach: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """A terraform command; reattach=False lets Terraform start the installed plugins itself."""
        return subprocess.run(
            [self.binary, *args, "-no-color"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env(reattach),
        )

    def init(self, config: Path) -> subprocess.CompletedProcess[str]:
        """`terraform init` from the plugin directory (installs, no reattach), backend left out."""
        return subprocess.run(
            [self.binary, "init", "-backend=false", "-input=false", f"-plugin-dir={self.plugins}", "-no-color"],
            cwd=config,
            capture_output=True,
            text=True,
            timeout=120,
            env=base_env(),
        )


def lock_files() -> dict[str, bytes]:
    return {str(p.relative_to(ROOT)): p.read_bytes() for p in sorted(INFRA.rglob(".terraform.lock.hcl"))}
