"""The gcloud path, checked by gcloud (issue 23): every gcloud command line cloudbuild-gcloud.yaml
runs (rendered by its own steps against the stub of cloudbuild_sim, in scenarios that switch
every optional part on) goes through the real Google Cloud CLI with an empty configuration: no
credentials, no prompts, a proxy that refuses every connection. gcloud parses every argument
before it needs an account, so each command must fail only for want of one; an unknown flag or a
bad value fails at parsing ("unrecognized arguments", "Invalid choice", "Bad value").

Flags newer than this machine's gcloud cannot be parsed here: NEWER_FLAGS names them with the
release that has them; only if the pipeline pins (_GCLOUD_IMAGE) a release at least that new, and
the local gcloud is older, they are dropped from the local parse (or a value it knows stands in, so
the rest of the command is still parsed)."""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from .support import CLOUDBUILD_FILES, parsed_yaml
from .test_env_parity import MAILBOXES, REVIEWERS, gcloud_run

pytestmark = pytest.mark.functions_out_of_process  # tests/coverage_pause.py

INSTALL_GCLOUD = """gcloud (the Google Cloud CLI) is not installed; the gate parses the gcloud pipeline with it.
Debian/Ubuntu: https://cloud.google.com/sdk/docs/install#deb (apt-get install google-cloud-cli),
or set SAFESEND_GCLOUD to its path."""

PARSE_ERRORS = re.compile(
    r"unrecognized arguments|Invalid choice|Bad value|argument --?[\w-]+:|must be specified|"
    r"Invalid value for|is not a valid|Unknown value|expected one argument|not allowed with"
)
WANT_OF_CREDENTIALS = re.compile(
    r"You do not currently have an active account selected|Your current active account .* does not have any valid "
    r"credentials|gcloud auth login|Reauthentication"
)
# Flags (or flag=value) the pipeline uses that older gcloud releases reject:
# command prefix -> ((flag, stand-in for older releases or None to drop it, first release), ...).
NEWER_FLAGS = {
    ("functions", "deploy"): (("--network", None, (558, 0, 0)), ("--subnet", None, (558, 0, 0))),
    # Absent from 528.0.0 (it offers app-engine, backend-services, forwarding-rule); 558.0.0 has it.
    ("iap", "web", "add-iam-policy-binding"): (
        ("--resource-type=cloud-run", "--resource-type=backend-services", (529, 0, 0)),
    ),
}
SCENARIOS = {
    "defaults": {},
    "everything-on": {
        **REVIEWERS,
        "job_store": "postgres",
        "gmail_delegated_user": "boss@example.com",
        "public_callers": True,
        "callback_allowed_hosts": ["n8n.example.com"],
        **MAILBOXES,
    },
}


def gcloud_bin() -> str:
    found = os.environ.get("SAFESEND_GCLOUD") or shutil.which("gcloud")
    if not found:
        pytest.fail(INSTALL_GCLOUD, pytrace=False)
    return found


def version_of(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


@pytest.fixture(scope="module")
def local_version() -> tuple[int, ...]:
    proc = subprocess.run([gcloud_bin(), "version", "--format=json"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return version_of(json.loads(proc.stdout)["Google Cloud SDK"])


def pinned_version() -> tuple[int, ...]:
    subs = parsed_yaml(*CLOUDBUILD_FILES)["cloudbuild-gcloud.yaml"]["substitutions"]
    match = re.fullmatch(r"gcr\.io/google\.com/cloudsdktool/cloud-sdk:(\d+\.\d+\.\d+)(-slim)?", subs["_GCLOUD_IMAGE"])
    assert match, f"_GCLOUD_IMAGE must pin a release: {subs['_GCLOUD_IMAGE']}"
    return version_of(match.group(1))


def offline_env(config_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLOUDSDK_", "GOOGLE_"))}
    env.update(
        CLOUDSDK_CONFIG=str(config_dir),
        CLOUDSDK_CORE_DISABLE_PROMPTS="1",
        CLOUDSDK_CORE_PROJECT="proj-1",
        CLOUDSDK_CORE_DISABLE_USAGE_REPORTING="true",
        CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK="true",
        # Any connection attempt goes to a closed local port and fails at once.
        CLOUDSDK_PROXY_TYPE="http",
        CLOUDSDK_PROXY_ADDRESS="127.0.0.1",
        CLOUDSDK_PROXY_PORT="9",
    )
    return env


@dataclass(frozen=True)
class Call:
    argv: tuple[str, ...]  # without the leading "gcloud"
    cwd: Path


def pipeline_calls(tmp_path: Path) -> list[Call]:
    """Every gcloud call of the scenarios, one per shape: command and flag names (gcloud start-up takes
    about a second; six deploys that differ in values only parse the same flags)."""
    seen: dict[tuple[str, ...], Call] = {}
    for name, overrides in SCENARIOS.items():
        run = gcloud_run(tmp_path / name, overrides)
        for argv in run.config["_calls"]:
            if argv[0] != "gcloud":
                continue
            words = tuple(re.sub(r"send|reconcile|sweep|status|notify|review", "FN", a) for a in argv[1:])
            shape = tuple(w.split("=")[0] for w in words if w.startswith("--") or w == words[0]) + words[1:3]
            seen.setdefault(shape, Call(tuple(argv[1:]), run.workspace))
    return list(seen.values())


def for_local_parse(argv: tuple[str, ...], local: tuple[int, ...], pinned: tuple[int, ...]) -> tuple[str, ...]:
    """argv without the flags this gcloud is too old for, when the pinned release has them."""
    kept = list(argv)
    for prefix, newer in NEWER_FLAGS.items():
        if tuple(argv[: len(prefix)]) != prefix:
            continue
        for flag, stand_in, since in newer:
            used = [a for a in kept if a == flag or ("=" not in flag and a.startswith(flag + "="))]
            if not used:
                continue
            assert pinned >= since, f"{' '.join(prefix)} {flag} needs gcloud {since}; _GCLOUD_IMAGE pins {pinned}"
            if local < since:
                kept = [(stand_in if a in used else a) for a in kept]
                kept = [a for a in kept if a is not None]
    return tuple(kept)


PARSE_BOUND_S = 180  # a gcloud call that has not ended by then hangs: the test fails (TimeoutExpired)


def parse(call: Call, argv: tuple[str, ...], config_dir: Path) -> tuple[int, str, float]:
    """gcloud's exit code, output and wall time for one call. No bound on the time but the hang
    bound: every connection attempt fails at once (offline_env), so a slow call is a starved one,
    not one that waited on the network: the mutation suite runs these niced beside the gate's
    workers, and on a 2-core machine half as fast as the first one (2026-12-02) three calls that
    failed for want of credentials, as they must, took 36-44 s; a 30-s bound failed the gate."""
    started = time.monotonic()
    proc = subprocess.run(
        [gcloud_bin(), *argv],
        cwd=call.cwd,
        capture_output=True,
        text=True,
        timeout=PARSE_BOUND_S,
        env=offline_env(config_dir),
        stdin=subprocess.DEVNULL,
    )
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - started


def refusals(calls: list[Call], local, pinned, config_dir: Path) -> list[str]:
    """Each call that gcloud refuses for another reason than missing credentials."""
    jobs = [(call, for_local_parse(call.argv, local, pinned)) for call in calls]
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda job: parse(job[0], job[1], config_dir), jobs))
    wrong = []
    for (_, argv), (code, output, seconds) in zip(jobs, results, strict=True):
        first = output.strip().splitlines()[0] if output.strip() else ""
        if code == 0 or PARSE_ERRORS.search(output) or not WANT_OF_CREDENTIALS.search(output):
            wrong.append(f"gcloud {' '.join(argv)}\n  -> exit {code} after {seconds:.1f}s: {first}")
    return wrong


def test_every_pipeline_command_fails_only_for_want_of_credentials(tmp_path, local_version):
    calls = pipeline_calls(tmp_path)
    commands = {" ".join(c.argv[:3]) for c in calls}
    assert {"functions deploy safesend-send", "firestore indexes composite"} <= commands or any(
        c.argv[:2] == ("functions", "deploy") for c in calls
    ), commands
    assert any("iap" in c.argv for c in calls) and any("--network" in " ".join(c.argv) for c in calls), (
        "the scenarios must reach the reviewer side and Direct VPC"
    )
    assert {"create", "update", "add-iam-policy-binding"} <= {
        c.argv[2] for c in calls if c.argv[:2] == ("tasks", "queues")
    }, "the scenarios must create and update a mailbox queue and grant on it"
    wrong = refusals(calls, local_version, pinned_version(), tmp_path / "gcloud-config")
    assert not wrong, "gcloud refused these for another reason than credentials:\n" + "\n".join(wrong)


def test_a_misspelled_flag_is_refused_at_parsing(tmp_path, local_version):
    calls = [c for c in pipeline_calls(tmp_path) if c.argv[:2] == ("functions", "deploy")][:1]
    typo = Call(tuple(a.replace("--ingress-settings", "--ingress-setings") for a in calls[0].argv), calls[0].cwd)
    bad_value = Call(
        tuple(re.sub(r"^--ingress-settings=.*", "--ingress-settings=everyone", a) for a in calls[0].argv), calls[0].cwd
    )
    wrong = refusals([typo, bad_value], local_version, pinned_version(), tmp_path / "gcloud-config")
    assert len(wrong) == 2 and "unrecognized arguments" in wrong[0] and "Invalid choice" in wrong[1], wrong


def test_flags_newer_than_this_gcloud_need_the_pin(local_version):
    argv = ("functions", "deploy", "x", "--network=n", "--subnet=s")
    if local_version < (558, 0, 0):
        assert for_local_parse(argv, local_version, (558, 0, 0)) == argv[:3]
    else:
        assert for_local_parse(argv, local_version, (558, 0, 0)) == argv
    with pytest.raises(AssertionError, match="needs gcloud"):
        for_local_parse(argv, local_version, (557, 0, 0))
