"""Every server of a placed deployment as engine commands (pure: slots in, argument lists out).

For each :class:`~moeplan.export.deployment.Slot`, one command per node it spans:

- **SGLang**: :func:`moeplan.export.sglang.sglang_args` for the slot's layout, plus
  ``--host 0.0.0.0 --port P``, ``--base-gpu-id`` when it does not start at GPU 0, the
  rendezvous ``--dist-init-addr`` of its first node, ``--disaggregation-mode`` and the KV
  transfer backend for a P/D pool (``--disaggregation-bootstrap-port`` on prefill), and
  ``--init-expert-location`` where the placement was made for the slot's EP size.
- **vLLM**: :func:`moeplan.export.vllm.vllm_args`, plus ``--host 0.0.0.0 --port P``, its GPUs
  by ``CUDA_VISIBLE_DEVICES`` (vLLM has no base-GPU flag) and, in a P/D pool,
  ``--kv-transfer-config`` (NixlConnector).
- Both: ``--trust-remote-code`` when the checkpoint ships its own code, and the pipeline's
  layer partition as the engine's environment variable (:mod:`moeplan.export.launch_facts`).

The router: sglang-router in front of several colocated servers (``--worker-urls``,
round-robin: the policy the serving simulation feeds replicas with) and of a SGLang P/D
deployment (``--pd-disaggregation``); vLLM's colocated replicas sit behind the same router,
which forwards the OpenAI-compatible routes; vLLM has no P/D router of its own (said).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from moeplan.export import constraints as cons
from moeplan.export.deployment import ROUTER_PORT, Slot, node_addr, url
from moeplan.export.knob_flags import prefill_chunk_args, vllm_knob_env
from moeplan.export.launch_facts import PP_PARTITION_ENV, model_class_blocker, sglang_chunk
from moeplan.export.sglang import sglang_args
from moeplan.export.vllm import PD_CONNECTOR, PD_PROXY_NOTE, RAY_PORT, vllm_args

TRANSFER_BACKEND = "mooncake"  # SGLang --disaggregation-transfer-backend (its default)


@dataclass(frozen=True, kw_only=True)
class ServerCommands:
    """One slot's commands (one list per node it spans; a node may run several, the last
    one is the server), its environment, and the sentences a user must read."""

    slot: Slot
    nodes: tuple[tuple[tuple[str, ...], ...], ...]
    env: tuple[tuple[str, str], ...]
    warnings: tuple[str, ...]
    violations: tuple[str, ...]

    @property
    def server_args(self) -> tuple[tuple[str, ...], ...]:
        """The server command of every node (the last command of each)."""
        return tuple(n[-1] for n in self.nodes)


def _location(slot: Slot, ctx: Any, notes: list[str]) -> str | None:
    if ctx.placement_width is None or slot.strategy.moe_ep <= 1:
        return None
    if ctx.truncated:
        notes.append("expert_location.json covers only the planned layers; it is not passed")
        return None
    if ctx.placement_ep != slot.strategy.moe_ep:
        notes.append(
            f"expert_location.json was placed for EP{ctx.placement_ep}, the {slot.role} "
            f"servers run EP{slot.strategy.moe_ep}; it is not passed to them"
        )
        return None
    return "${HERE}/expert_location.json"


def _sglang(slot: Slot, ctx: Any, notes: list[str]) -> list[list[str]]:
    s, pool = slot.strategy, slot.pool
    loc = _location(slot, ctx, notes)
    out = []
    for rank in range(len(slot.nodes)):
        r = sglang_args(
            s,
            model_path=ctx.model_path,
            target=ctx.target,
            num_nodes=len(slot.nodes),
            node_rank=rank,
            init_addr=f"{node_addr(slot.nodes[0])}:{slot.dist_port}",
            expert_location=loc,
            redundant_experts=ctx.redundant if loc else pool.redundant,
            knobs=pool.knobs,
        )
        args = [*r.args, "--host", "0.0.0.0", "--port", str(slot.port)]
        if slot.gpus[0]:
            args += ["--base-gpu-id", str(slot.gpus[0])]
        if slot.role != "colocated":
            args += ["--disaggregation-mode", slot.role]
            args += ["--disaggregation-transfer-backend", TRANSFER_BACKEND]
        if slot.bootstrap_port is not None:
            args += ["--disaggregation-bootstrap-port", str(slot.bootstrap_port)]
        if ctx.remote_code:
            args.append("--trust-remote-code")
        args += _chunk_args("sglang", slot, ctx)
        out.append([args])
        if rank == 0:
            notes += r.warnings
    return out


def _chunk_args(engine: str, slot: Slot, ctx: Any) -> list[str]:
    """The prefill chunk the plan priced (P/D prefill pools), else the one SGLang needs for
    the model (:func:`moeplan.export.launch_facts.sglang_chunk`)."""
    s = slot.strategy
    if slot.pool.chunk:
        return prefill_chunk_args(engine, slot.pool.chunk, s.attn_dp)
    need = sglang_chunk(ctx.target.architecture, s.attn_dp) if engine == "sglang" else None
    return [] if need is None else ["--chunked-prefill-size", str(need)]


def _vllm(slot: Slot, ctx: Any, notes: list[str]) -> list[list[str]] | None:
    s, pool = slot.strategy, slot.pool
    if (why := model_class_blocker("vllm", ctx.target.architecture)) is not None:
        notes.append(why + ": run a later vLLM release that has it (the flags are the same)")
    out: list[list[str]] = []
    for rank in range(len(slot.nodes)):
        r = vllm_args(
            s,
            model_path=ctx.model_path,
            target=ctx.target,
            num_nodes=len(slot.nodes),
            node_rank=rank,
            address=node_addr(slot.nodes[0]),
            rpc_port=slot.dist_port,
            redundant_experts=max(ctx.redundant, pool.redundant),  # vLLM's EPLB places them
            knobs=pool.knobs,
            role=slot.role,
        )
        if not r.expressible:
            notes += r.warnings
            return None
        args = list(r.args)
        if args[0] == "vllm":
            args += ["--host", "0.0.0.0", "--port", str(slot.port)]
            if slot.role != "colocated":
                kv = {"kv_connector": PD_CONNECTOR, "kv_role": "kv_both"}
                args += ["--kv-transfer-config", json.dumps(kv)]
            args += _chunk_args("vllm", slot, ctx)
            if ctx.remote_code:
                args.append("--trust-remote-code")
        out.append([args])
        if rank == 0:
            notes += r.warnings
    if "--distributed-executor-backend" in out[0][0]:
        out[0].insert(0, ["ray", "start", "--head", "--port", str(RAY_PORT)])
    return out


def _env(engine: str, slot: Slot, ctx: Any, gpus_per_node: int) -> list[tuple[str, str]]:
    env = []
    if engine == "vllm" and len(slot.gpus) < gpus_per_node:
        env.append(("CUDA_VISIBLE_DEVICES", ",".join(map(str, slot.gpus))))
    if engine == "vllm":
        env += vllm_knob_env(slot.pool.knobs, slot.role)
    part = slot.pool.pp_partition
    if slot.strategy.pp > 1 and part is not None and len(part) == slot.strategy.pp:
        env.append((PP_PARTITION_ENV[engine], ",".join(map(str, part))))
    return env


def _violations(engine: str, slot: Slot, nodes: list[list[list[str]]], ctx: Any) -> list[str]:
    bad: list[str] = []
    for rank, node in enumerate(nodes):
        args = node[-1]
        if engine == "sglang":
            loc = "--init-expert-location" in args
            bad += cons.check_sglang(
                args,
                ctx.target,
                gpus_used=slot.gpu_count,
                location_width=ctx.placement_width if loc else None,
            )
        elif args[:1] == ["vllm"]:
            bad += cons.check_vllm(args, ctx.target, gpus_used=slot.gpu_count, node_rank=rank)
    return bad


def server_commands(engine: str, slot: Slot, ctx: Any) -> ServerCommands:
    """The commands of ``slot`` for ``engine``; ``nodes`` empty when the engine cannot
    express its layout (``warnings`` say why)."""
    notes: list[str] = []
    built = _sglang(slot, ctx, notes) if engine == "sglang" else _vllm(slot, ctx, notes)
    if built is None:
        return ServerCommands(slot=slot, nodes=(), env=(), warnings=tuple(notes), violations=())
    env = _env(engine, slot, ctx, ctx.target.gpus_per_node)
    return ServerCommands(
        slot=slot,
        nodes=tuple(tuple(tuple(c) for c in n) for n in built),
        env=tuple(env),
        warnings=tuple(dict.fromkeys(notes)),
        violations=tuple(dict.fromkeys(_violations(engine, slot, built, ctx))),
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
    if engine == "vllm":
        return None, PD_PROXY_NOTE
    args = [*head, "--pd-disaggregation"]
    for s in slots:
        if s.role == "prefill":
            args += ["--prefill", url(s), str(s.bootstrap_port)]
    for s in slots:
        if s.role == "decode":
            args += ["--decode", url(s)]
    args += ["--prefill-policy", "round_robin", "--decode-policy", "round_robin", *tail]
    return args, "sglang-router in front of the prefill and decode servers (P/D), round-robin"
