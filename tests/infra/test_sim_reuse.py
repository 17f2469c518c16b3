"""What keeps the sims of Cloud Build cheap without changing what they check: a gcloud build runs
once per distinct input and process (test_env_parity.gcloud_run), reused only for the same
overrides of the same bytes, so a mutated copy is built anew; the stub gcloud is bash talking to a
loopback server (stub_server) and records and answers as the Python stub did."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from . import cloudbuild_sim, stub_server
from . import test_env_parity as parity
from .support import ROOT


def repo_copy(tmp_path: Path) -> Path:
    """The files a sim reads (cloudbuild-gcloud.yaml and infra/), copied with a Terraform cache in it."""
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "infra", root / "infra", ignore=shutil.ignore_patterns(*cloudbuild_sim.NOT_COPIED))
    shutil.copy(ROOT / "cloudbuild-gcloud.yaml", root)
    (root / "infra" / "envs" / "dev" / ".terraform").mkdir(parents=True)
    return root


def test_the_inputs_digest_sees_every_byte_a_sim_copies_and_nothing_else(tmp_path, monkeypatch):
    monkeypatch.setattr(cloudbuild_sim, "ROOT", repo_copy(tmp_path))
    root = cloudbuild_sim.ROOT
    before = cloudbuild_sim.inputs_digest("cloudbuild-gcloud.yaml", b"{}")
    assert before == cloudbuild_sim.inputs_digest("cloudbuild-gcloud.yaml", b"{}")
    assert before != cloudbuild_sim.inputs_digest("cloudbuild-gcloud.yaml", b'{"region": "x"}')
    (root / "infra" / "envs" / "dev" / ".terraform" / "state").write_text("not copied")
    (root / "infra" / "terraform.tfstate.backup").write_text("not copied")
    assert cloudbuild_sim.inputs_digest("cloudbuild-gcloud.yaml", b"{}") == before
    env_spec = root / "infra" / "env_spec.py"
    env_spec.write_bytes(env_spec.read_bytes().replace(b"postgres", b"postgreS", 1))
    changed = cloudbuild_sim.inputs_digest("cloudbuild-gcloud.yaml", b"{}")
    assert changed != before
    (root / "infra" / "env_spec.py").rename(root / "infra" / "env_spec2.py")  # same bytes, other name
    assert cloudbuild_sim.inputs_digest("cloudbuild-gcloud.yaml", b"{}") not in (before, changed)
    config = root / "cloudbuild-gcloud.yaml"
    (root / "infra" / "env_spec2.py").rename(env_spec)
    config.write_text(config.read_text() + "\n# changed\n")
    assert cloudbuild_sim.inputs_digest("cloudbuild-gcloud.yaml", b"{}") not in (before, changed)


def test_a_build_is_reused_for_equal_inputs_only_and_handed_out_as_a_copy(tmp_path, monkeypatch):
    monkeypatch.setattr(cloudbuild_sim, "ROOT", repo_copy(tmp_path))
    monkeypatch.setattr(parity, "_GCLOUD_RUNS", {})
    built = []

    def build(where: Path, overrides: dict) -> dict:
        built.append((where, overrides))
        return {"send": {"env": {"A": "1"}}, "_calls": [["gcloud", "functions", "deploy"]]}

    monkeypatch.setattr(parity, "_gcloud_build", build)
    first = parity.gcloud_config(tmp_path / "a", {"region": "x"})
    first["send"]["env"]["A"] = "changed by a caller"
    first.pop("_calls")
    again = parity.gcloud_config(tmp_path / "b", {"region": "x"})
    assert again == {"send": {"env": {"A": "1"}}, "_calls": [["gcloud", "functions", "deploy"]]}
    assert built == [(tmp_path / "a", {"region": "x"})]
    assert parity.gcloud_run(tmp_path / "c", {"region": "x"}).workspace == tmp_path / "a" / "workspace"
    parity.gcloud_config(tmp_path / "d", {"region": "y"})
    assert [where for where, _ in built] == [tmp_path / "a", tmp_path / "d"]
    tf = cloudbuild_sim.ROOT / "infra" / "modules" / "safesend" / "variables.tf"
    tf.write_text(tf.read_text() + "\n")  # a mutated file: the same overrides build anew
    parity.gcloud_config(tmp_path / "e", {"region": "x"})
    assert [where for where, _ in built] == [tmp_path / "a", tmp_path / "d", tmp_path / "e"]


def test_the_stub_records_every_argument_and_answers_as_the_table_says(tmp_path):
    """The bash stub and its loopback server: argv recorded exactly (spaces, quotes, newlines,
    backslashes, non-ASCII, empty), the first matching regex answers with its output (to stdout
    or a file beside the caller) and exit code, no match exits 0 silently."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    stub = stubs / "gcloud"
    stub.write_text(stub_server.STUB.replace("{bash}", shutil.which("bash")))
    stub.chmod(0o755)
    log = tmp_path / "calls.jsonl"
    odd = ["a b", "", "q\"uo'te", "line\nbreak", "back\\slash", "ünï €", "--flag=x=y", "*", "$HOME"]
    answers = [
        (r"^gcloud projects describe", "123\nmulti €\n", 0),
        (r"sql \S+ describe", "", 1),
        (r"write me", '{"a": 1}', 3, "out/file.json"),
    ]
    script = "\n".join(
        [
            'gcloud "$@"; echo "rc=$?"',
            'gcloud projects describe p --format=json; echo "rc=$?"',
            'gcloud sql instances describe x; echo "rc=$?"',
            'mkdir out; gcloud write me; echo "rc=$?"',
        ]
    )
    env = {**os.environ, "PATH": f"{stubs}{os.pathsep}{os.environ['PATH']}"}
    with stub_server.serving(log, answers) as port:
        proc = subprocess.run(
            ["bash", "-c", script, "step", *odd],
            cwd=tmp_path,
            env={**env, "STUB_PORT": str(port)},
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.stdout == "rc=0\n123\nmulti €\nrc=0\nrc=1\nrc=3\n" and proc.stderr == "", proc
    assert (tmp_path / "out" / "file.json").read_text() == '{"a": 1}'
    assert [json.loads(line) for line in log.read_text().splitlines()] == [
        ["gcloud", *odd],
        ["gcloud", "projects", "describe", "p", "--format=json"],
        ["gcloud", "sql", "instances", "describe", "x"],
        ["gcloud", "write", "me"],
    ]
