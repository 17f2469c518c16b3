"""Real Terraform in the gate, offline (issue 23): `terraform fmt -check`, then `init` from the
offline plugin directory, `validate` and `test` (the .tftest.hcl files beside each configuration,
mock_provider against the pinned providers' real schemas) for both environments and the module.

The environments share one test directory, infra/envs/tests, run in each with
`-var-file=terraform.tfvars.example`: the configuration the README's deploy walk-through starts
from is parsed and planned by Terraform itself. Without
`terraform` these tests fail and say how to install it (terraform_run.INSTALL_TERRAFORM)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from . import terraform_run as T  # noqa: N812 - T for Terraform
from .support import INFRA, ROOT

pytestmark = pytest.mark.functions_out_of_process  # tests/coverage_pause.py

TEST_ARGS = {
    "dev": ("-var-file=terraform.tfvars.example",),
    "prod": ("-var-file=terraform.tfvars.example",),
    "module": (),
}


@pytest.fixture(scope="session")
def terraform(tmp_path_factory) -> Iterator[T.Terraform]:
    binary = T.terraform_bin()
    plugins = T.build_plugins(tmp_path_factory.mktemp("tf-plugins"))
    with T.provider_servers(plugins) as servers:
        yield T.Terraform(binary, plugins, servers)


@pytest.fixture(scope="session")
def locks_before() -> dict[str, bytes]:
    return T.lock_files()


@pytest.fixture(scope="session")
def inits(terraform, tmp_path_factory, locks_before) -> tuple[Path, dict[str, subprocess.CompletedProcess[str]]]:
    """One scratch copy of infra/ with every configuration initialized (shared by the session)."""
    tree = T.copy_tree(tmp_path_factory.mktemp("tf-tree"))
    return tree, {name: terraform.init(tree / config) for name, config in T.CONFIGS.items()}


def initialized(inits, config: str) -> Path:
    """The configuration's directory in the copy; its init must have worked (a test failure, not
    a fixture error, so the mutation suite sees which configuration Terraform refused)."""
    tree, procs = inits
    proc = procs[config]
    assert proc.returncode == 0, f"terraform init of {T.CONFIGS[config]}:\n{proc.stdout}{proc.stderr}"
    return tree / T.CONFIGS[config]


def test_terraform_fmt_finds_nothing_to_change():
    proc = subprocess.run(
        [T.terraform_bin(), "fmt", "-check", "-recursive", "-diff", "-no-color", "infra"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=T.base_env(),
    )
    assert proc.returncode == 0, f"run `terraform fmt -recursive infra`:\n{proc.stdout}{proc.stderr}"


def test_terraform_collects_lazily_unless_the_caller_says_otherwise(monkeypatch):
    monkeypatch.delenv("GOGC", raising=False)
    monkeypatch.delenv("GOMEMLIMIT", raising=False)
    assert {k: T.base_env()[k] for k in ("GOGC", "GOMEMLIMIT")} == {"GOGC": "400", "GOMEMLIMIT": "1GiB"}
    monkeypatch.setenv("GOGC", "100")
    assert T.base_env()["GOGC"] == "100"


@pytest.mark.parametrize("config", sorted(T.CONFIGS))
def test_terraform_validate(config, terraform, inits):
    proc = terraform.run(initialized(inits, config), "validate")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_terraform_starts_the_installed_plugins_itself(terraform, inits):
    """The plugin directory's executables work as Terraform starts them (go-plugin handshake, TLS),
    not only as the session's long-lived servers; the schema they serve refuses an unknown argument."""
    module = initialized(inits, "module")
    proc = terraform.run(module, "validate", reattach=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    broken = module.parent / "safesend-broken"
    shutil.copytree(module, broken, symlinks=True)
    (broken / "scheduler.tf").write_text((broken / "scheduler.tf").read_text().replace("schedule ", "schedulee ", 1))
    proc = terraform.run(broken, "validate", reattach=False)
    assert proc.returncode == 1 and 'An argument named "schedulee" is not expected here' in proc.stderr, proc.stderr


@pytest.mark.parametrize("config", sorted(T.CONFIGS))
def test_terraform_test(config, terraform, inits):
    directory = initialized(inits, config)
    assert sorted((directory / "tests").glob("*.tftest.hcl")), f"{T.CONFIGS[config]}/tests has no .tftest.hcl"
    proc = terraform.run(directory, "test", *TEST_ARGS[config], timeout=600)
    assert proc.returncode == 0 and "Success!" in proc.stdout, proc.stdout[-6000:] + proc.stderr[-4000:]
    assert " 0 failed" in proc.stdout, proc.stdout[-2000:]


def test_the_offline_run_leaves_the_lock_files_and_infra_alone(inits, locks_before):
    assert T.lock_files() == locks_before
    assert not list(INFRA.rglob(".terraform")), "terraform ran inside the repository's infra/"
    assert (initialized(inits, "dev") / ".terraform.lock.hcl").exists()  # it ran in the copy


def test_the_plugin_serves_the_real_provider_addresses_and_versions(terraform):
    found = sorted(
        str(p.relative_to(terraform.plugins)) for p in terraform.plugins.rglob("terraform-provider-*") if p.is_file()
    )
    platform = found[0].split("/")[4]
    assert found == [
        f"registry.terraform.io/hashicorp/archive/2.8.1/{platform}/terraform-provider-archive_v2.8.1",
        f"registry.terraform.io/hashicorp/google-beta/8.7.0/{platform}/terraform-provider-google-beta_v8.7.0",
        f"registry.terraform.io/hashicorp/google/8.7.0/{platform}/terraform-provider-google_v8.7.0",
        f"registry.terraform.io/hashicorp/time/0.14.2/{platform}/terraform-provider-time_v0.14.2",
    ]


def test_without_terraform_the_gate_fails_and_says_how_to_install_it(monkeypatch):
    monkeypatch.delenv("SAFESEND_TERRAFORM", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(pytest.fail.Exception) as failure:
        T.terraform_bin()
    assert "releases.hashicorp.com/terraform/1.11.4" in str(failure.value)
