"""(e) The deploy artifact: functions/ zipped with the Terraform module's exclude rules
(infra/package_source.py, also used by cloudbuild-gcloud.yaml), installed into a fresh venv from
its own requirements.txt, where main imports and functions-framework finds every entry point, each
starting with exactly the environment the Terraform module renders for it (secrets as dummy values).

Needs PyPI (pip install). Uses Python 3.12 (the functions' runtime, python312) when this machine
has it, else the interpreter running the tests."""

from __future__ import annotations

import glob
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from .support import FUNCTIONS, INFRA, blocks, entry_points, resource
from .tfmodel import ModuleModel

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


def test_packager_ships_exactly_the_terraform_globs_and_the_stores_lock():
    block = archive_block()
    assert block.body["type"] == "zip"
    assert block.body["output_file_mode"] == "0644"
    assert "source_dir" not in block.body and "excludes" not in block.body
    storage = (INFRA / "modules" / "safesend" / "storage.tf").read_text()
    globs = re.search(r"functions_globs = \[(.*?)\]", storage, re.S)
    assert globs and re.findall(r'"([^"]+)"', globs.group(1)) == package_module().INCLUDES
    assert (
        'functions_requirements = var.job_store == "postgres" ? "requirements-postgres.txt" : "requirements.txt"'
        in storage
    )
    assert package_module().REQUIREMENTS == {"firestore": "requirements.txt", "postgres": "requirements-postgres.txt"}
    assert re.search(r'filename = "requirements.txt"', storage)
    assert (
        resource("google_storage_bucket_object", "functions_source").body["source"]
        == "${data.archive_file.functions_source.output_path}"
    )


def test_include_globs_follow_doublestar_rules():
    pkg = package_module()
    patterns = [pkg.pattern_regex(p) for p in pkg.INCLUDES]
    for path in ("main.py", "channels.toml", "safesend/core/keys.py", "safesend/adapters/cloud_tasks.py"):
        assert any(p.match(path) for p in patterns), path
    for path in (
        "safesend/__pycache__/keys.cpython-312.pyc",
        "requirements.in",
        "requirements-postgres.txt",
        "tests/test_x.pyc",
        "other/x.py",
        ".venv/lib/x.py",
    ):
        assert not any(p.match(path) for p in patterns), path


def test_zip_is_deterministic_and_holds_what_the_runtime_needs(tmp_path):
    pkg = package_module()
    first, second = tmp_path / "a.zip", tmp_path / "b.zip"
    assert pkg.build_zip(FUNCTIONS, first) == pkg.build_zip(FUNCTIONS, second)
    names = zipfile.ZipFile(first).namelist()
    assert {"main.py", "requirements.txt", "channels.toml", "safesend/__init__.py"} <= set(names)
    assert names == sorted(names)
    assert not [n for n in names if "__pycache__" in n or n.endswith((".pyc", ".in")) or "/tests/" in n]
    shipped = {
        p.relative_to(FUNCTIONS).as_posix()
        for p in FUNCTIONS.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and not p.name.startswith("requirements")
    }
    assert set(names) - {"requirements.txt"} == shipped  # every source file, nothing else
    for name in names:  # Terraform's file() reads text only
        zipfile.ZipFile(first).read(name).decode("utf-8")


def test_each_job_store_ships_its_own_lock_as_requirements_txt(tmp_path):
    pkg = package_module()
    for store, lock in (("firestore", "requirements.txt"), ("postgres", "requirements-postgres.txt")):
        artifact = tmp_path / f"{store}.zip"
        pkg.build_zip(FUNCTIONS, artifact, store)
        requirements = zipfile.ZipFile(artifact).read("requirements.txt")
        assert requirements == (FUNCTIONS / lock).read_bytes()
        assert (b"psycopg==" in requirements) == (store == "postgres")


def runtime_python() -> str:
    """An interpreter matching the functions' runtime (python312) if there is one, else this one."""
    runtime = resource("google_cloudfunctions2_function", "send").first("build_config", "runtime")
    assert runtime == "${var.runtime}"
    want = "3.12"
    candidates = [
        shutil.which(f"python{want}"),
        *sorted(glob.glob(f"/root/.pyenv/versions/{want}*/bin/python{want}")),
        *sorted(glob.glob(str(Path.home() / f".pyenv/versions/{want}*/bin/python{want}"))),
    ]
    for candidate in filter(None, candidates):
        probe = subprocess.run([candidate, "-c", "import venv, ensurepip"], capture_output=True, timeout=30)
        if probe.returncode == 0:
            return candidate
    return sys.executable


# Every switch on (reviewer side, webhooks, email, callbacks, public callers), so every variable and
# secret the spec can render reaches the import-time checks. Secret values are dummies of the right shape.
ALL_ON = {
    "message_id_domain": "notifications.mail.example-shop.com",
    "default_from": "Shop <shop@example-shop.com>",
    "public_callers": True,
    "callback_allowed_hosts": ["n8n.example-shop.com"],
    "reviewers_enabled": True,
    "review_iap_members": ["group:mail-reviewers@example-shop.com"],
    "review_allowed_emails": ["ann@example-shop.com"],
    "review_allowed_domains": ["example-shop.com"],
    "notify_chat_webhook": True,
    "notify_slack_webhook": True,
    "notify_email_to": "mail-reviewers@example-shop.com",
}
SECRET_VALUES = {
    "SAFESEND_AUTH_HMAC_SECRET": "0123456789abcdef0123456789abcdef",
    "SAFESEND_AUTH_API_KEYS": "n8n:" + "ab" * 32,
    "SAFESEND_CALLBACK_HMAC_SECRET": "fedcba9876543210fedcba9876543210",
    "SAFESEND_GMAIL_CREDENTIALS_JSON": (
        '{"type": "authorized_user", "client_id": "c", "client_secret": "s", "refresh_token": "r"}'
    ),
    "SAFESEND_NOTIFY_CHAT_WEBHOOK_URL": "https://chat.googleapis.com/v1/spaces/AAA/messages?key=k&token=t",
    "SAFESEND_NOTIFY_SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T/B/X",
    "SAFESEND_REVIEW_CSRF_SECRET": "0123456789abcdef0123456789abcdef0123456789abcdef",
}


def deployed_env(function: str, overrides: dict | None = None) -> dict[str, str]:
    """What Cloud Functions gives the function: its rendered variables, its secrets, its target."""
    model = ModuleModel({**ALL_ON, **(overrides or {})})
    env = dict(model.local("function_env")[function])
    for name in model.local("function_secrets")[function]:
        env[name] = SECRET_VALUES[name]
    return {"PATH": "/usr/bin:/bin", **env, "FUNCTION_TARGET": function, "K_SERVICE": f"safesend-{function}"}


CHECK = """
import sys
import functions_framework
import main
names = sys.argv[1].split(",")
for name in names:
    app = functions_framework.create_app(target=name, source="main.py", signature_type="http")
    assert callable(getattr(main, name)), name
    assert app is not None, name
dsn = __import__("os").environ.get("SAFESEND_POSTGRES_DSN")
if dsn:  # the job store's DSN, parsed by the artifact's own psycopg as the pool will (libpq rules)
    from psycopg.conninfo import conninfo_to_dict
    from safesend.adapters.postgres_store import connection_kwargs
    parts = conninfo_to_dict(dsn)
    assert "password" not in parts and parts["sslmode"] == "verify-ca", parts
    assert "-c role=safesend_owner" in connection_kwargs(dsn)["options"], connection_kwargs(dsn)
print("entry points ok:", ",".join(names), "python", sys.version.split()[0])
"""


def _unpack_and_install(python: Path, artifact: Path, app_dir: Path) -> None:
    """What the runtime's build does with the artifact: pip over its requirements.txt (every line hashed).

    --no-compile: pip byte-compiled every module of every package (~3.4 of its 12.7 CPU-s); the
    checks import a fraction of them, compiled on first import as the runtime would."""
    zipfile.ZipFile(artifact).extractall(app_dir)
    install = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--require-hashes",
            "--no-compile",
            "-r",
            "requirements.txt",
        ],
        cwd=app_dir,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]


def test_artifact_installs_in_a_fresh_venv_and_exposes_every_entry_point(tmp_path):
    pkg = package_module()
    venv = tmp_path / "venv"
    started = time.monotonic()
    subprocess.run([runtime_python(), "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    app_dir, postgres_dir = tmp_path / "workspace", tmp_path / "workspace-postgres"
    pkg.build_zip(FUNCTIONS, tmp_path / "functions-source.zip", "firestore")
    pkg.build_zip(FUNCTIONS, tmp_path / "functions-source-postgres.zip", "postgres")
    _unpack_and_install(python, tmp_path / "functions-source.zip", app_dir)
    # The Firestore artifact carries no PostgreSQL driver.
    probe = subprocess.run([str(python), "-I", "-c", "import psycopg"], capture_output=True, timeout=60)
    assert probe.returncode != 0
    # The deployed entry points (env_spec.json); the others are listed there as not deployed yet
    # (test_policy.py), and may need settings of their own (e.g. the review console's).
    deployed = json.loads((INFRA / "modules" / "safesend" / "env_spec.json").read_text())["functions"]
    assert set(deployed) <= entry_points()
    # -I: only the venv and the unpacked artifact, nothing from this checkout or PYTHONPATH.

    def command(name: str) -> list[str]:
        return [str(python), "-I", "-c", f"import sys; sys.path.insert(0, '.'); exec({CHECK!r})", name]

    for name in sorted(deployed):
        run = subprocess.run(
            command(name), cwd=app_dir, capture_output=True, text=True, timeout=120, env=deployed_env(name)
        )
        assert run.returncode == 0, f"{name}: " + run.stdout[-3000:] + run.stderr[-3000:]
        assert "entry points ok" in run.stdout
    # The PostgreSQL job store's artifact (its own requirements.txt adds psycopg and its pool): each
    # function starts with the module's postgres settings (its DSN parsed as libpq does, the pool
    # opening in the background towards the stand-in private IP).
    _unpack_and_install(python, tmp_path / "functions-source-postgres.zip", postgres_dir)
    for name in sorted(deployed):
        run = subprocess.run(
            command(name),
            cwd=postgres_dir,
            capture_output=True,
            text=True,
            timeout=120,
            env=deployed_env(name, {"job_store": "postgres"}),
        )
        assert run.returncode == 0, f"{name} (postgres): " + run.stdout[-3000:] + run.stderr[-3000:]
        assert "entry points ok" in run.stdout
    # The import-time gate: a Message-ID domain that cannot make a valid message stops the revision,
    # and the console refuses a development identity on Cloud Run.
    broken = subprocess.run(
        command("send"),
        cwd=app_dir,
        capture_output=True,
        text=True,
        timeout=120,
        env={**deployed_env("send"), "SAFESEND_MESSAGE_ID_DOMAIN": "no_underscores.example.com"},
    )
    assert broken.returncode != 0 and "refusing to start" in broken.stdout, broken.stdout[-2000:]
    review = deployed_env("review")
    review.pop("SAFESEND_REVIEW_IAP_AUDIENCE")
    broken = subprocess.run(
        command("review"),
        cwd=app_dir,
        capture_output=True,
        text=True,
        timeout=120,
        env={**review, "SAFESEND_REVIEW_DEV_IDENTITY": "dev@localhost"},
    )
    assert broken.returncode != 0 and "refusing to start" in broken.stdout, broken.stdout[-2000:]
    print(run.stdout.strip(), f"(venv + install + import: {time.monotonic() - started:.0f} s)")
