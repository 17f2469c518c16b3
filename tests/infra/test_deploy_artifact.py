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


def test_packager_uses_exactly_the_terraform_exclude_rules():
    block = archive_block()
    assert block.body["type"] == "zip"
    assert block.body["output_file_mode"] == "0644"
    assert block.body["excludes"] == package_module().EXCLUDES
    assert block.body["source_dir"] == "${local.functions_source_dir}"
    assert (
        resource("google_storage_bucket_object", "functions_source").body["source"]
        == "${data.archive_file.functions_source.output_path}"
    )


def test_exclude_matching_follows_doublestar_rules():
    pkg = package_module()
    patterns = [pkg.pattern_regex(p) for p in pkg.EXCLUDES]
    for path in (
        "__pycache__",
        "safesend/__pycache__",
        "a/b/c.pyc",
        "x.pyc",
        "tests",
        "safesend/tests",
        ".venv",
        "pkg.egg-info",
    ):
        assert pkg.excluded(path, patterns), path
    for path in (
        "main.py",
        "requirements.txt",
        "channels.toml",
        "safesend/adapters/cloud_tasks.py",
        "testsuite.py",
        "safesend/pyc.py",
    ):
        assert not pkg.excluded(path, patterns), path


def test_zip_is_deterministic_and_holds_what_the_runtime_needs(tmp_path):
    pkg = package_module()
    first, second = tmp_path / "a.zip", tmp_path / "b.zip"
    assert pkg.build_zip(FUNCTIONS, first) == pkg.build_zip(FUNCTIONS, second)
    names = zipfile.ZipFile(first).namelist()
    assert {"main.py", "requirements.txt", "channels.toml", "safesend/__init__.py"} <= set(names)
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc") or "/tests/" in n]
    patterns = [pkg.pattern_regex(p) for p in pkg.EXCLUDES]  # local caches (.mypy_cache...) stay out
    expected = sorted(
        rel
        for rel in (p.relative_to(FUNCTIONS).as_posix() for p in FUNCTIONS.rglob("*") if p.is_file())
        if not any(pkg.excluded(prefix, patterns) for prefix in _prefixes(rel))
    )
    assert sorted(names) == expected


def _prefixes(rel: str) -> list[str]:
    parts = rel.split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


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
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r", "requirements.txt"],
        cwd=app_dir,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
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
    # The PostgreSQL job store: each function starts with the module's postgres settings (its DSN
    # parsed as libpq does, the pool opening in the background towards the stand-in private IP).
    for name in sorted(deployed):
        run = subprocess.run(
            command(name),
            cwd=app_dir,
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
