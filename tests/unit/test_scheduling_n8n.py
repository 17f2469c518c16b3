"""tests/scheduling.py while the gate's background n8n install runs: the real-n8n modules go last, so
no worker waits minutes on the install's lock while other groups are left, and the waiting lane's
preference holds beside it."""

from __future__ import annotations

import os
import subprocess
import time

from hypothesis import given
from hypothesis import strategies as st

from tests import scheduling

N8N = "tests/integration/test_n8n_e2e.py"
N8N_NODE = "tests/integration/test_n8n_node_e2e.py"
STORM = "tests/integration/test_fault_storm.py::test_fault_storm[paced-pool]"
OTHER = "tests/integration/test_stack.py"
UNIT = "tests/unit/test_keys.py"


def test_while_installing_the_n8n_modules_wait_for_every_other_group():
    queue = [N8N_NODE, N8N, OTHER, UNIT]
    assert scheduling.pick(queue, waiting_first=None, defer_n8n=True) == OTHER
    assert scheduling.pick([N8N_NODE, N8N, UNIT], waiting_first=None, defer_n8n=True) == UNIT
    # nothing else left: the n8n module is handed out (its tests wait on the install's lock)
    assert scheduling.pick([N8N_NODE, N8N], waiting_first=None, defer_n8n=True) == N8N_NODE


def test_once_installed_the_queues_order_rules_again():
    assert scheduling.pick([N8N_NODE, N8N, OTHER], waiting_first=None, defer_n8n=False) == N8N_NODE


def test_the_lane_and_the_deferral_together():
    queue = [N8N_NODE, OTHER, STORM]
    assert scheduling.pick(queue, waiting_first=True, defer_n8n=True) == STORM  # the lane: its own kind
    assert scheduling.pick(queue, waiting_first=False, defer_n8n=True) == OTHER  # the others: not n8n yet
    assert scheduling.pick([N8N_NODE, STORM], waiting_first=False, defer_n8n=True) == STORM  # a ready storm phase
    assert scheduling.pick([N8N_NODE], waiting_first=True, defer_n8n=True) == N8N_NODE  # the last group
    assert scheduling.pick([], waiting_first=True, defer_n8n=True) is None


GROUPS = st.lists(st.sampled_from([N8N, N8N_NODE, STORM, OTHER, UNIT]), unique=True)


@given(GROUPS, st.sampled_from([None, True, False]), st.booleans())
def test_pick_hands_out_a_queued_group_whenever_one_is_queued(queue, waiting_first, defer):
    """No worker idles while work is left: whatever the preferences, some queued group comes out, and
    a deferred n8n module only when nothing else is queued."""
    chosen = scheduling.pick(queue, waiting_first=waiting_first, defer_n8n=defer)
    assert (chosen is None) == (not queue)
    if chosen is not None and defer and chosen in (N8N, N8N_NODE):
        assert set(queue) <= {N8N, N8N_NODE}


def test_an_install_counts_as_running_until_it_ends_not_until_it_is_reaped(tmp_path):
    """A finished install is a zombie until the gate waits for it at its end: signal 0 would still
    find it, so the n8n modules would wait for the end of the gate."""
    env = scheduling.N8N_INSTALL_PID
    assert scheduling.n8n_installing({env: str(os.getpid())})
    child = subprocess.Popen(["sleep", "0"])
    deadline = time.monotonic() + 10
    while scheduling.n8n_installing({env: str(child.pid)}) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not scheduling.n8n_installing({env: str(child.pid)})  # ended, not yet reaped
    assert child.poll() == 0
    assert not scheduling.n8n_installing({env: str(child.pid)})  # reaped
    assert not scheduling.n8n_installing({})
    assert not scheduling.n8n_installing({env: "not-a-pid"})
    assert not scheduling.n8n_installing({env: "0"})
    assert not scheduling.n8n_installing({env: "123"}, proc=tmp_path)  # no such process
