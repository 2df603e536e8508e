"""The launch writer of an engine: the export module its backend names
(:attr:`moeplan.backends.EngineBackend.launch_module`), with one interface
(:class:`LaunchWriter`) that :mod:`moeplan.export.launch_servers` drives for every engine."""

from __future__ import annotations

import importlib
from typing import Any, Protocol, cast

from moeplan.backends import backend, exported
from moeplan.errors import MoeplanError
from moeplan.export.deployment import Slot
from moeplan.export.sglang import ExportResult
from moeplan.planners.layout import Layout


class LaunchWriter(Protocol):
    """What an engine's export module provides."""

    #: the sentence said when a P/D deployment gets no router (None: the engine's servers sit
    #: behind sglang-router's P/D mode)
    PD_PROXY_NOTE: str | None

    def engine_args(
        self, strategy: Layout, *, model_path: str, target: Any, num_nodes: int
    ) -> ExportResult:
        """One server's arguments for ``strategy`` on node 0 (``moeplan strategy --export``)."""
        ...

    def server_nodes(self, slot: Slot, ctx: Any, notes: list[str]) -> list[list[list[str]]] | None:
        """The commands of every node ``slot`` spans (the last of each is the server); None
        when the engine cannot express the slot's layout (``notes`` say why)."""
        ...

    def slot_files(self, slot: Slot, ctx: Any) -> dict[str, str]:
        """Files a slot's servers read beside ``launch.sh`` (name -> text; e.g. a config)."""
        ...

    def server_env(self, slot: Slot, gpus_per_node: int) -> list[tuple[str, str]]:
        """The environment that selects the slot's GPUs (empty: a flag does)."""
        ...

    def check_server(self, args: list[str], slot: Slot, ctx: Any, rank: int) -> list[str]:
        """Every pinned-release rule node ``rank``'s server command breaks."""
        ...


def writer(engine: str) -> LaunchWriter:
    """The launch writer of ``engine``; one line for an engine without one."""
    module = backend(engine).launch_module
    if module is None:
        raise MoeplanError(f"--export ({engine}) must be one of {exported()}")
    return cast(LaunchWriter, importlib.import_module(module))
