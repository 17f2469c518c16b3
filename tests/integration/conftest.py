"""Fixtures shared by the integration tests: a fresh Gmail simulator, and the fault relay before it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devstack.gmail_sim import GmailSimulator
from devstack.relay import FaultRelay


@pytest.fixture
def sim() -> Iterator[GmailSimulator]:
    simulator = GmailSimulator().start()
    try:
        yield simulator
    finally:
        simulator.stop()


@pytest.fixture
def relay(sim: GmailSimulator) -> Iterator[FaultRelay]:
    fault_relay = FaultRelay(sim.url).start()
    try:
        yield fault_relay
    finally:
        fault_relay.stop()
