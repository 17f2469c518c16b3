"""pytest plugin: how pytest-xdist workers (`--dist loadgroup`; `scripts/test.sh --fast`) share the suite.

Enabled from tests/conftest.py. Without xdist nothing changes but the order of the modules.

- One module, one worker: the scheduler below hands out whole groups, one group per module, so a
  module's module-scoped stack starts once, on one worker, as in a serial run. Each worker has its
  own session (its own emulators, PostgreSQL and stacks, on free ports): no worker sees another's data.
- Modules that must not run at the same time share a group: the real-n8n modules install n8n into
  one cache folder on first use (tests/integration/n8n_support.py) and each runs a memory-hungry n8n.
- Slow modules first: the scheduler hands out groups in collection order, so the longest ones
  (real n8n, the fault storm, the pacing bench, Terraform, ...) start at once and the many short
  unit modules fill the tail instead of one long module running alone at the end.

The groups are made by a scheduler of our own, not by ``xdist_group`` marks: xdist tags a marked
test by rewriting ``item._nodeid``, which pytest 9's nodes no longer read, so marks group nothing.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

import pytest

# Modules that share one worker, by group name.
SHARED_GROUPS: dict[str, str] = {
    "tests/integration/test_n8n_node_e2e.py": "n8n",
    "tests/integration/test_n8n_e2e.py": "n8n",
}

# Longest first (worker seconds each, --module-times, 2026-12-01 on the shared 2-core machine), then
# the rest of the integration tests, the infra checks, and the unit tests last. The mutation suite
# runs beside the workers in a process of its own (scripts/test.sh).
SLOW_FIRST: tuple[str, ...] = (
    "tests/integration/test_n8n_node_e2e.py",  # with test_n8n_e2e on one worker: ~6 min
    "tests/integration/test_n8n_e2e.py",
    "tests/integration/test_fault_storm.py",
    "tests/integration/test_pacing_bench.py",  # 185 s
    "tests/infra/test_terraform.py",  # 129 s
    "tests/infra/test_env_parity.py",  # 109 s
    "tests/integration/test_pacing_stack.py",  # 107 s
    "tests/integration/test_store_contract.py",  # 99 s
    "tests/integration/test_console_browser.py",  # 92 s
    "tests/integration/test_messengers_stack.py",  # 84 s
    "tests/infra/test_gcloud_cli.py",  # 81 s
    "tests/integration/test_openapi_contract.py",  # 74 s
)
SUITE_ORDER: tuple[str, ...] = ("tests/integration", "tests/infra", "tests/unit")


def module_of(item: pytest.Item) -> str:
    """The item's module as a path relative to the repository (its node id before '::')."""
    return item.nodeid.split("::", 1)[0]


def group_of(module: str) -> str:
    return SHARED_GROUPS.get(module, module)


def rank(module: str) -> tuple[int, int]:
    """Sort key: the slow modules in SLOW_FIRST's order, then suite by suite."""
    if module in SLOW_FIRST:
        return (0, SLOW_FIRST.index(module))
    parents = {str(parent) for parent in PurePosixPath(module).parents}
    suite = next((i for i, prefix in enumerate(SUITE_ORDER) if prefix in parents), len(SUITE_ORDER))
    return (1, suite)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put the slow modules first; a module's tests keep their order."""
    items.sort(key=lambda item: rank(module_of(item)))  # stable: the order within a rank is kept


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, absent when it is not installed
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``--dist loadgroup``: whole groups (group_of), handed out in collection order."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleGroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid.split("::", 1)[0])

        def _reschedule(self, node: Any) -> None:
            """The next group only when the node is down to its last test (xdist's own heuristic
            waits for two): a worker holds its last test until more comes, so one is the least that
            keeps it running, and a group queued behind a long test (the storm's, the gcloud CLI's)
            waits there while another worker could have run it."""
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
                return
            if self._pending_of(self.assigned_work[node]) <= 1:
                self._assign_work_unit(node)

    return ModuleGroupScheduling(config, log)
