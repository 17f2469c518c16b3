"""The parity tests run a gcloud build once per distinct input and process (test_env_parity.gcloud_run):
a build is reused only for the same overrides of the same bytes, so a mutated copy is built anew."""

from __future__ import annotations

import shutil
from pathlib import Path

from . import cloudbuild_sim
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
