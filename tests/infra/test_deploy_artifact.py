"""(e) The deploy artifact: functions/ zipped with the Terraform module's exclude rules
(infra/package_source.py, also used by cloudbuild-gcloud.yaml), installed into a fresh venv from
its own requirements.txt, where main imports and functions-framework finds every entry point.

Needs PyPI (pip install). Uses Python 3.12 (the functions' runtime, python312) when this machine
has it, else the interpreter running the tests."""

from __future__ import annotations

import glob
import json
import importlib.util
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from .support import FUNCTIONS, INFRA, blocks, entry_points, resource

PACKAGE = INFRA / "package_source.py"


def package_module():
    spec = importlib.util.spec_from_file_location("package_source", PACKAGE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def archive_block():
    found = [b for b in blocks("data") if b.type == "archive_file"]
    assert len(found) == 1, "expected one data.archive_file (the functions source)"
    return found[0]


def test_packager_uses_exactly_the_terraform_exclude_rules():
    block = archive_block()
    assert block.body["type"] == "zip"
    assert block.body["output_file_mode"] == "0644"
    assert block.body["excludes"] == package_module().EXCLUDES
    assert block.body["source_dir"] == "${local.functions_source_dir}"
    assert resource("google_storage_bucket_object", "functions_source").body["source"] == \
        "${data.archive_file.functions_source.output_path}"


def test_exclude_matching_follows_doublestar_rules():
    pkg = package_module()
    patterns = [pkg.pattern_regex(p) for p in pkg.EXCLUDES]
    for path in ("__pycache__", "safesend/__pycache__", "a/b/c.pyc", "x.pyc", "tests", "safesend/tests",
                 ".venv", "pkg.egg-info"):
        assert pkg.excluded(path, patterns), path
    for path in ("main.py", "requirements.txt", "channels.toml", "safesend/adapters/cloud_tasks.py",
                 "testsuite.py", "safesend/pyc.py"):
        assert not pkg.excluded(path, patterns), path


def test_zip_is_deterministic_and_holds_what_the_runtime_needs(tmp_path):
    pkg = package_module()
    first, second = tmp_path / "a.zip", tmp_path / "b.zip"
    assert pkg.build_zip(FUNCTIONS, first) == pkg.build_zip(FUNCTIONS, second)
    names = zipfile.ZipFile(first).namelist()
    assert {"main.py", "requirements.txt", "channels.toml", "safesend/__init__.py"} <= set(names)
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc") or "/tests/" in n]
    expected = sorted(str(p.relative_to(FUNCTIONS)) for p in FUNCTIONS.rglob("*")
                      if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")
    assert sorted(names) == expected


def runtime_python() -> str:
    """An interpreter matching the functions' runtime (python312) if there is one, else this one."""
    runtime = resource("google_cloudfunctions2_function", "send").first("build_config", "runtime")
    assert runtime == "${var.runtime}"
    want = "3.12"
    candidates = [shutil.which(f"python{want}")] + sorted(glob.glob(f"/root/.pyenv/versions/{want}*/bin/python{want}")) \
        + sorted(glob.glob(str(Path.home() / f".pyenv/versions/{want}*/bin/python{want}")))
    for candidate in filter(None, candidates):
        probe = subprocess.run([candidate, "-c", "import venv, ensurepip"], capture_output=True, timeout=30)
        if probe.returncode == 0:
            return candidate
    return sys.executable


# What the deployed functions get from infra/ at the least (no network is touched at import).
DEPLOYED_ENV = {"PATH": "/usr/bin:/bin", "GOOGLE_CLOUD_PROJECT": "demo-artifact",
                "SAFESEND_MESSAGE_ID_DOMAIN": "notifications.mail.example-shop.com",
                "SAFESEND_DEFAULT_FROM": "Shop <shop@example-shop.com>",
                "SAFESEND_AUTH_HMAC_SECRET": "0123456789abcdef0123456789abcdef"}

CHECK = """
import sys
import functions_framework
import main
names = sys.argv[1].split(",")
for name in names:
    app = functions_framework.create_app(target=name, source="main.py", signature_type="http")
    assert callable(getattr(main, name)), name
    assert app is not None, name
print("entry points ok:", ",".join(names), "python", sys.version.split()[0])
"""


def test_artifact_installs_in_a_fresh_venv_and_exposes_every_entry_point(tmp_path):
    pkg = package_module()
    artifact = tmp_path / "functions-source.zip"
    pkg.build_zip(FUNCTIONS, artifact)
    app_dir = tmp_path / "workspace"
    zipfile.ZipFile(artifact).extractall(app_dir)
    venv = tmp_path / "venv"
    started = time.monotonic()
    subprocess.run([runtime_python(), "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    install = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                              "-r", "requirements.txt"], cwd=app_dir, capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    # The deployed entry points (env_spec.json); the others are listed there as not deployed yet
    # (test_policy.py), and may need settings of their own (e.g. the review console's).
    deployed = json.loads((INFRA / "modules" / "safesend" / "env_spec.json").read_text())["functions"]
    assert set(deployed) <= entry_points()
    names = sorted(deployed)
    # -I: only the venv and the unpacked artifact, nothing from this checkout or PYTHONPATH.
    command = [str(python), "-I", "-c", f"import sys; sys.path.insert(0, '.'); exec({CHECK!r})", ",".join(names)]
    run = subprocess.run(command, cwd=app_dir, capture_output=True, text=True, timeout=120, env=DEPLOYED_ENV)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "entry points ok" in run.stdout
    # The import-time gate: a Message-ID domain that cannot make a valid message stops the revision.
    broken = subprocess.run(command, cwd=app_dir, capture_output=True, text=True, timeout=120,
                            env={**DEPLOYED_ENV, "SAFESEND_MESSAGE_ID_DOMAIN": "no_underscores.example.com"})
    assert broken.returncode != 0 and "refusing to start" in broken.stdout, broken.stdout[-2000:]
    print(run.stdout.strip(), f"(venv + install + import: {time.monotonic() - started:.0f} s)")
