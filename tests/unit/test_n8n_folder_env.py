"""The environment every n8n process of the e2e tests gets (tests/integration/n8n_support.py)."""

from __future__ import annotations

from pathlib import Path

from tests.integration import n8n_support as ns


def test_no_task_runner_process_is_started_and_each_folder_has_its_own_runner_token(tmp_path: Path) -> None:
    """No workflow of the e2e tests has a Code node: external mode spares a runner process per n8n
    process; its broker still demands a token, a secret of each folder."""
    first = ns.N8nFolder(tmp_path / "n8n", tmp_path / "one").env()
    second = ns.N8nFolder(tmp_path / "n8n", tmp_path / "two").env()
    assert first["N8N_RUNNERS_MODE"] == second["N8N_RUNNERS_MODE"] == "external"
    assert len(first["N8N_RUNNERS_AUTH_TOKEN"]) >= 32
    assert first["N8N_RUNNERS_AUTH_TOKEN"] != second["N8N_RUNNERS_AUTH_TOKEN"]


def test_node_compiles_each_file_once_into_a_cache_beside_the_install_unless_told_otherwise(
    tmp_path: Path, monkeypatch
) -> None:
    """Each CLI command boots n8n: Node's compile cache spares compiling its JavaScript every time."""
    monkeypatch.delenv("NODE_COMPILE_CACHE", raising=False)
    home = tmp_path / "n8n-home"
    folder = ns.N8nFolder(home / "bin" / "n8n", tmp_path / "one")
    assert folder.env()["NODE_COMPILE_CACHE"] == str(home / "compile-cache")
    monkeypatch.setenv("NODE_COMPILE_CACHE", str(tmp_path / "mine"))
    assert folder.env()["NODE_COMPILE_CACHE"] == str(tmp_path / "mine")
