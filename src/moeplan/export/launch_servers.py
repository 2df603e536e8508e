"""Every server of a placed deployment as engine commands (pure: slots in, argument lists out).

For each :class:`~moeplan.export.deployment.Slot`, one command per node it spans, written by
the engine's launch writer (:mod:`moeplan.export.writers`: :mod:`moeplan.export.sglang`,
:mod:`moeplan.export.vllm`, :mod:`moeplan.export.trtllm`, with the files its servers read),
then for every engine alike: the environment that selects the
slot's GPUs where the engine has no flag for it, the knobs' environment, the pipeline's layer
partition as the engine's environment variable (its backend's ``pp_partition_env``), and the
rules of the pinned release each server command breaks.

The router: sglang-router in front of several colocated servers (``--worker-urls``,
round-robin: the policy the serving simulation feeds replicas with) and of a P/D deployment
(``--pd-disaggregation``) unless the engine's writer says it has no P/D router
(``PD_PROXY_NOTE``: vLLM); vLLM's colocated replicas sit behind the same router, which
forwards the OpenAI-compatible routes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from moeplan.backends import EngineBackend, backend
from moeplan.export.deployment import ROUTER_PORT, Slot, url
from moeplan.export.writers import LaunchWriter, writer


@dataclass(frozen=True, kw_only=True)
class ServerCommands:
    """One slot's commands (one list per node it spans; a node may run several, the last
    one is the server), its environment, and the sentences a user must read."""

    slot: Slot
    nodes: tuple[tuple[tuple[str, ...], ...], ...]
    env: tuple[tuple[str, str], ...]
    warnings: tuple[str, ...]
    violations: tuple[str, ...]
    #: files its servers read beside ``launch.sh`` (name -> text)
    files: tuple[tuple[str, str], ...] = ()

    @property
    def server_args(self) -> tuple[tuple[str, ...], ...]:
        """The server command of every node that runs one (the last command of each; a node
        with none is reached by its first node's job, e.g. TensorRT-LLM's MPI launch)."""
        return tuple(n[-1] for n in self.nodes if n)


def _env(b: EngineBackend, w: LaunchWriter, slot: Slot, target: Any) -> list[tuple[str, str]]:
    env = w.server_env(slot, target.gpus_per_node)
    if target.mnnvl and len(slot.nodes) > 1:  # trays of one NVLink domain (NVL72)
        env += list(b.mnnvl_env)
    env += b.knob_env(slot.pool.knobs, slot.role)
    part = slot.pool.pp_partition
    if slot.strategy.pp > 1 and part is not None and len(part) == slot.strategy.pp:
        if b.pp_partition_env is None:  # the engine takes it in its own config (slot_files)
            return env
        env.append((b.pp_partition_env, ",".join(map(str, part))))
    return env


def server_commands(engine: str, slot: Slot, ctx: Any) -> ServerCommands:
    """The commands of ``slot`` for ``engine``; ``nodes`` empty when the engine cannot
    express its layout (``warnings`` say why)."""
    b, w = backend(engine), writer(engine)
    notes: list[str] = []
    built = w.server_nodes(slot, ctx, notes)
    if built is None:
        return ServerCommands(slot=slot, nodes=(), env=(), warnings=tuple(notes), violations=())
    env = _env(b, w, slot, ctx.target)
    env += b.moe_runner_env(ctx.target.moe_dtype, ctx.target.gpu_sm)
    a2a = slot.pool.knobs.a2a if slot.pool.knobs is not None else None
    env += b.dispatch_env(ctx.target.moe_dtype, a2a, slot.role)
    bad = [
        v
        for rank, node in enumerate(built)
        if node
        for v in w.check_server(node[-1], slot, ctx, rank)
    ]
    return ServerCommands(
        slot=slot,
        nodes=tuple(tuple(tuple(c) for c in n) for n in built),
        env=tuple(env),
        warnings=tuple(dict.fromkeys(notes)),
        violations=tuple(dict.fromkeys(bad)),
        files=tuple(w.slot_files(slot, ctx).items()),
    )


def router_command(engine: str, servers: Sequence[ServerCommands]) -> tuple[list[str] | None, str]:
    """The router in front of ``servers`` (None when one server needs none, or vLLM P/D)
    and a sentence saying what it is."""
    slots = [s.slot for s in servers]
    roles = {s.role for s in slots}
    head = ["python", "-m", "sglang_router.launch_router"]
    tail = ["--host", "0.0.0.0", "--port", str(ROUTER_PORT)]
    if roles == {"colocated"}:
        if len(slots) == 1:
            return None, "one server: clients reach it directly"
        urls = [url(s) for s in slots]
        what = f"sglang-router in front of the {len(slots)} {engine} servers, round-robin"
        return [*head, "--worker-urls", *urls, "--policy", "round_robin", *tail], what
    proxy = writer(engine).PD_PROXY_NOTE
    if proxy is not None:
        return None, proxy
    args = [*head, "--pd-disaggregation"]
    for s in slots:
        if s.role == "prefill":
            args += ["--prefill", url(s), str(s.bootstrap_port)]
    for s in slots:
        if s.role == "decode":
            args += ["--decode", url(s)]
    args += ["--prefill-policy", "round_robin", "--decode-policy", "round_robin", *tail]
    return args, "sglang-router in front of the prefill and decode servers (P/D), round-robin"
