"""The plugin process Terraform starts: serves one pinned provider's schema, and validates.

Run by the executable install.py writes into the plugin directory, with the .venv-tfplugin python:

    python server.py SCHEMA.pb ADDRESS            (started by Terraform: go-plugin handshake)
    python -u server.py SCHEMA.pb ADDRESS --dev   (long-lived; prints TF_REATTACH_PROVIDERS)

The second form lets one process serve every Terraform command of a test session (tests/infra
starts one per provider and stops it by PID): Terraform otherwise starts each provider several
times per `run` block, and those Python start-ups were most of a `terraform test`'s time.
SCHEMA.pb is a serialized GetProviderSchema.Response (install.py builds it once from schema.py's
JSON; parsing it is milliseconds, building it from the wheel is seconds). The protocol (go-plugin
handshake, TLS, gRPC, tfplugin6) is the `tf` library's; this only answers differently:

* GetProviderSchema: the pinned provider's real schema;
* Validate*Config, ConfigureProvider: no diagnostics (Terraform itself checks the configuration
  against the schema: names, types, nesting, required arguments);
* UpgradeResourceState: the state as given (one schema version);
* planning, applying and reading refuse with a diagnostic: only `mock_provider` in `terraform test`
  (which asks the plugin for nothing but schema and validation) may stand in for the real provider.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import grpc
from tf import iface, runner
from tf import provider as tf_provider
from tf.gen import tfplugin_pb2 as pb
from tf.utils import Diagnostics

OFFLINE = (
    "offline schema provider: it serves the pinned schema only; use mock_provider in terraform test "
    "(tools/tf_schema_provider)"
)


def _refusal() -> list[Any]:
    diags = Diagnostics()
    diags.add_error(OFFLINE)
    return diags.to_pb()


class SchemaOnlyProvider(iface.Provider):  # type: ignore[misc]
    """The `tf` framework's provider object: no resources of its own (the servicer answers)."""

    def __init__(self, address: str) -> None:
        self.address = address

    def get_model_prefix(self) -> str:
        return ""

    def get_provider_schema(self, diags: Diagnostics) -> Any:
        raise NotImplementedError("served by SchemaServicer")

    def full_name(self) -> str:
        return self.address

    def validate_config(self, diags: Diagnostics, config: Any) -> None:
        return None

    def configure_provider(self, diags: Diagnostics, config: Any) -> None:
        return None

    def get_data_sources(self) -> list[Any]:
        return []

    def get_resources(self) -> list[Any]:
        return []


class SchemaServicer(tf_provider.ProviderServicer):  # type: ignore[misc]
    """tf's servicer with the schema served from the serialized response."""

    response: Any = None  # set by main() before the server starts

    def GetProviderSchema(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802 - gRPC name
        return self.response

    def ValidateResourceConfig(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return pb.ValidateResourceConfig.Response()

    def ValidateDataResourceConfig(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return pb.ValidateDataResourceConfig.Response()

    def UpgradeResourceState(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return pb.UpgradeResourceState.Response(upgraded_state=pb.DynamicValue(json=request.raw_state.json))

    def ReadResource(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return pb.ReadResource.Response(diagnostics=_refusal())

    def PlanResourceChange(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return pb.PlanResourceChange.Response(diagnostics=_refusal())

    def ApplyResourceChange(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return pb.ApplyResourceChange.Response(diagnostics=_refusal())

    def ImportResourceState(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return pb.ImportResourceState.Response(diagnostics=_refusal())

    def ReadDataSource(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return pb.ReadDataSource.Response(diagnostics=_refusal())


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print("usage: server.py SCHEMA.pb ADDRESS [--dev]", file=sys.stderr)
        return 2
    SchemaServicer.response = pb.GetProviderSchema.Response.FromString(Path(argv[1]).read_bytes())
    # tf.runner builds its servicer from tf.provider.ProviderServicer at call time: serve ours.
    tf_provider.ProviderServicer = SchemaServicer
    runner.run_provider(SchemaOnlyProvider(argv[2]), argv)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
