"""pytest plugin: how pytest-xdist workers (`--dist loadgroup`; `scripts/test.sh --fast`) share the suite.

Enabled from tests/conftest.py. Without xdist nothing changes but the order of the modules.

- One module, one worker: the scheduler below hands out whole groups, one group per module, so a
  module's module-scoped stack starts once, on one worker, as in a serial run. Each worker has its
  own session (its own emulators, PostgreSQL and stacks, on free ports): no worker sees another's data.
- The two real-n8n modules are groups of their own too: on a new machine the first to need n8n
  installs it (scripts/n8n-install.sh; a second waits on its flock), and each n8n (~0.5 GB) fits.
  While the gate's background install runs (its pid in SAFESEND_N8N_INSTALL_PID, scripts/test.sh),
  they are handed out only when no other group is left: on a new machine both had taken a worker at
  the start and waited ~300 s on the install's lock (fresh clone of 9cd1180, 2026-12-03).
- A module whose tests each start their own stack (no module-scoped fixture: the fault storm's
  phases) is split: each of its tests is a group of its own, so its phases run on several workers
  at once instead of one after the other on one. A split module's test that asks for a module- or
  class-scoped fixture fails before it starts (that fixture would start on every worker).
- Slow first: the scheduler hands out groups in collection order, so the longest ones (real n8n,
  the storm's phases, the pacing stack, ...) start at once and the many short unit modules fill
  the tail instead of one long group running alone at the end.
- A waiting lane (``--waiting-lane``, the full gate): the last worker takes the WAITING groups (the
  storm's phases: ~440 s of wall for ~110 CPU-s, the rest spent waiting on arrivals spaced in time,
  reconcile windows and paced mailboxes) before anything else, and the other workers take every other
  group first. A phase no longer holds one of the CPU-bound workers for minutes while a core idles.
  Neither kind of worker ever idles while work is left: each takes the other kind once its own is
  done (the lane helps with the rest; at the end the others share the storm's last phases).

The groups are made by a scheduler of our own, not by ``xdist_group`` marks: xdist tags a marked
test by rewriting ``item._nodeid``, which pytest 9's nodes no longer read, so marks group nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

# Modules whose tests are each a group of their own: every test starts (and stops) its own stack.
SPLIT_MODULES: frozenset[str] = frozenset({"tests/integration/test_fault_storm.py"})

STORM = "tests/integration/test_fault_storm.py::"
# Longest first: modules, or single tests of a SPLIT_MODULES module (wall seconds each in the serial
# gate, 2026-12-02, idle 2-core machine; the storm's phases 2026-12-01; real n8n after its runs moved
# onto one `n8n start`, measured on a slower machine), then the rest of the integration tests, the
# infra checks, and the unit tests last. The mutation suite runs beside the workers in a process of
# its own (scripts/test.sh). Real n8n stays first although two storm phases are now longer: with
# the storm's two pool phases first, each on its own stack at once, the storm took 450 worker-s
# against 367 and the suite 150 CPU-s more (fresh clones of 44ba374 and 7afeb8b, 2026-12-02).
SLOW_FIRST: tuple[str, ...] = (
    "tests/integration/test_n8n_node_e2e.py",  # 105 s (206 s with an `n8n execute` per run)
    "tests/integration/test_n8n_e2e.py",  # 89 s (132 s)
    STORM + "test_fault_storm[paced-pool]",  # 117 s
    STORM + "test_fault_storm[graph-pool]",  # 96 s
    "tests/integration/test_pacing_stack.py",  # 95 s: one test on a module-scoped stack
    "tests/unit/test_mutation_runs.py",  # 76 s: two nested runs that hang for 20 s each
    "tests/integration/test_messengers_stack.py",  # 73 s
    "tests/unit/test_gate_workers.py",  # 65 s: nested pytest runs
    STORM + "test_fault_storm_messengers",  # 63 s
    "tests/integration/test_openapi_contract.py",  # 63 s
    STORM + "test_fault_storm[beyond-window]",  # 59 s
    "tests/infra/test_terraform.py",  # 51 s
    STORM + "test_fault_storm[inside-window]",  # 50 s
    "tests/integration/test_store_contract.py",  # 50 s
    "tests/integration/test_callbacks_live.py",  # 49 s
    "tests/integration/test_console_browser.py",  # 45 s
    "tests/integration/test_stack.py",  # 41 s
    STORM + "test_fault_storm[reviewers]",  # 40 s
    "tests/integration/test_pacing_bench.py",  # 35 s
    "tests/integration/test_notify_stack.py",  # 34 s
    "tests/integration/test_never_silent_stack.py",  # 33 s
    "tests/infra/test_env_parity.py",  # 37 s on a worker (97 s before its stub became bash)
    "tests/infra/test_gcloud_cli.py",  # 33 s
    "tests/integration/test_index_lag_stack.py",  # 30 s
)
SUITE_ORDER: tuple[str, ...] = ("tests/integration", "tests/infra", "tests/unit")
# Groups that mostly wait (see the module's docstring): the waiting lane's, with --waiting-lane.
WAITING_MODULES: frozenset[str] = frozenset({"tests/integration/test_fault_storm.py"})
WAITING_LANE_OPTION = "--waiting-lane"
# Groups that need the real n8n, and the variable that names the gate's background install of it.
N8N_MODULES: frozenset[str] = frozenset({"tests/integration/test_n8n_node_e2e.py", "tests/integration/test_n8n_e2e.py"})
N8N_INSTALL_PID = "SAFESEND_N8N_INSTALL_PID"


def n8n_installing(environ: Mapping[str, str] = os.environ, proc: Path = Path("/proc")) -> bool:
    """Whether the gate's background n8n install (scripts/test.sh) is still running. Read from
    /proc, not by signal 0: a finished install stays a zombie until the gate reaps it at its end."""
    raw = environ.get(N8N_INSTALL_PID, "")
    if not raw.isdigit() or int(raw) <= 0:
        return False
    try:
        stat = (proc / raw / "stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] not in (["Z"], ["X"], [])


def pick(queue: Iterable[str], *, waiting_first: bool | None, defer_n8n: bool) -> str | None:
    """The group to hand out next: the first of the node's own kind (waiting_first: True on the
    waiting lane, False elsewhere, None without a lane) that is not deferred; else the first of any
    kind not deferred; else the first of its own kind; else the queue's first. None: empty queue."""
    groups = list(queue)

    def own(group: str) -> bool:
        return waiting_first is None or is_waiting(group) == waiting_first

    def ready(group: str) -> bool:
        return not (defer_n8n and module_path(group) in N8N_MODULES)

    for test in (lambda g: own(g) and ready(g), ready, own, lambda g: True):
        found = next((group for group in groups if test(group)), None)
        if found is not None:
            return found
    return None


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        WAITING_LANE_OPTION,
        action="store_true",
        default=False,
        help="with --dist loadgroup: the last worker takes the mostly waiting groups (tests/scheduling.py) "
        "first, the others every other group first",
    )


def is_waiting(group: str) -> bool:
    """Whether a scheduling group (group_of) belongs to a module that mostly waits."""
    return module_path(group) in WAITING_MODULES


def module_of(item: pytest.Item) -> str:
    """The item's module as a path relative to the repository (its node id before '::')."""
    return module_path(item.nodeid)


def module_path(nodeid: str) -> str:
    """The module part of a node id or scheduling group (everything before the first '::')."""
    return nodeid.split("::", 1)[0]


def group_of(nodeid: str) -> str:
    """The scheduling group of a test (or of a module, given its path): its module, or the test
    itself when its module is split."""
    module = module_path(nodeid)
    return nodeid if module in SPLIT_MODULES else module


def rank(nodeid: str) -> tuple[int, int]:
    """Sort key: the slow groups in SLOW_FIRST's order, then suite by suite."""
    module = module_path(nodeid)
    unit = nodeid if module in SPLIT_MODULES else module  # a split module's tests are ranked one by one
    if unit in SLOW_FIRST:
        return (0, SLOW_FIRST.index(unit))
    parents = {str(parent) for parent in PurePosixPath(module).parents}
    suite = next((i for i, prefix in enumerate(SUITE_ORDER) if prefix in parents), len(SUITE_ORDER))
    return (1, suite)


def shared_fixture(item: pytest.Item) -> str | None:
    """A fixture of wider scope than a test but narrower than the session that `item` asks for."""
    fixtures = getattr(item, "_fixtureinfo", None)
    for name, definitions in fixtures.name2fixturedefs.items() if fixtures else ():
        scopes = {definition.scope for definition in definitions} & {"module", "class", "package"}
        if scopes:
            return f"the {'/'.join(sorted(scopes))}-scoped fixture {name!r}"
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A split module's test that shares a fixture with its module fails before it starts anything:
    on workers the fixture would start once per worker, not once per module."""
    if module_of(item) in SPLIT_MODULES and (shared := shared_fixture(item)):
        pytest.fail(f"{item.nodeid} uses {shared}, but its module is in tests/scheduling.py's SPLIT_MODULES", False)


def unique_node_ids(items: list[pytest.Item]) -> None:
    """Give each item a node id of its own: xdist hands out tests by node id, so items that share one
    collapse into a single test on the workers while a serial run runs them all. schemathesis 4
    names its per-operation items `test[POST /send]`, but pytest 9 builds a node id from the
    function's name and parameters alone: every operation got the same id, and under xdist only the
    first operation was fuzzed. Such an item takes its own name; an id still shared is refused."""
    seen: dict[str, int] = {}
    for item in items:
        seen[item.nodeid] = seen.get(item.nodeid, 0) + 1
    for item in items:
        if seen[item.nodeid] > 1 and item.name != item.nodeid.rsplit("::", 1)[-1]:
            item._id = item.parent.id.child(item.name)  # type: ignore[union-attr]  # pytest's NodeId
    counts: dict[str, int] = {}
    for item in items:
        counts[item.nodeid] = counts.get(item.nodeid, 0) + 1
    shared = sorted(nodeid for nodeid, count in counts.items() if count > 1)
    if shared:
        raise pytest.UsageError(f"tests share a node id, so xdist would run only one of each: {shared[:5]}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Unique node ids, then the slow groups first; the tests of a group keep their order."""
    unique_node_ids(items)
    items.sort(key=lambda item: rank(item.nodeid))  # stable: the order within a rank is kept


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, absent when it is not installed
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``--dist loadgroup``: whole groups (group_of), handed out in collection order."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    lane = bool(config.getoption(WAITING_LANE_OPTION, default=False))

    class ModuleGroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

        def _is_lane(self, node: Any) -> bool:
            """The waiting lane is the last worker (gwN-1 of N), with --waiting-lane and 2+ workers."""
            if not lane or len(self.nodes) < 2:
                return False
            ids = sorted((n.gateway.id for n in self.nodes), key=lambda gid: int(gid.lstrip("gw") or 0))
            return bool(node.gateway.id == ids[-1])

        def _assign_work_unit(self, node: Any) -> None:
            """The group `pick` chooses goes first: the queue's order (slow first) holds otherwise."""
            chosen = pick(
                self.workqueue, waiting_first=self._is_lane(node) if lane else None, defer_n8n=n8n_installing()
            )
            if chosen is not None:
                self.workqueue.move_to_end(chosen, last=False)
            super()._assign_work_unit(node)

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
