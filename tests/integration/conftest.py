"""Fixtures shared by the integration tests: a fresh Gmail simulator, the fault relay before it, the real
Gmail discovery client, and a fresh Graph simulator."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httplib2
import pytest
from googleapiclient.discovery import build

from devstack.gmail_sim import GmailSimulator
from devstack.graph_sim import GraphSimulator
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


@pytest.fixture
def graph_sim() -> Iterator[GraphSimulator]:
    with GraphSimulator() as simulator:
        yield simulator


@pytest.fixture
def make_client() -> Callable[..., Any]:
    """Build the real discovery client against a base URL (the simulator or a relay)."""

    def factory(url: str, timeout: float = 5.0, http: httplib2.Http | None = None) -> Any:
        http = http or httplib2.Http(timeout=timeout)
        return build("gmail", "v1", http=http, client_options={"api_endpoint": url}, static_discovery=True)

    return factory
