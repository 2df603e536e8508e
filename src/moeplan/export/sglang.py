"""SGLang launch arguments for a MixServe strategy (pure: strategy in, argument list out).

Flag semantics (SGLang docs, server arguments and expert parallelism pages): ``--tp-size`` is
the GPU count of one pipeline stage (every node of it); attention DP (``--attn-dp-size N`` in
the pinned 0.5.2x line, ``--dp-size N --enable-dp-attention`` before it) splits attention into
``N`` groups of ``tp/N`` GPUs; ``--ep-size`` shards experts (MoE TP = ``tp/ep``);
``--moe-a2a-backend deepep`` needs ``ep_size == tp_size`` and DeepEP-capable hardware and
models (:mod:`moeplan.export.constraints`); ``--pp-size`` pipelines layers; multi-node runs take
``--nnodes --node-rank --dist-init-addr`` (one command per node). A Sem-MoE placement goes in
with ``--init-expert-location FILE`` and, when it replicates experts,
``--ep-num-redundant-experts N``.

What SGLang cannot express is said plainly in ``warnings``: there is no fused
RS-Combine/AG-Dispatch, and without DeepEP the MoE dispatch is all-gather/all-reduce.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from moeplan.cost.a2a import HardwareFacts, moe_backend
from moeplan.errors import require
from moeplan.export.constraints import SGLANG, EngineVersion, Target, deepep_blockers
from moeplan.export.knob_flags import prefill_chunk_args, sglang_knob_args
from moeplan.planners.strategy.space import Strategy
from moeplan.serve.iteration.instance_knobs import InstanceKnobs


@dataclass(frozen=True, kw_only=True, slots=True)
class ExportResult:
    """Launch arguments for one node and the caveats a user must read."""

    engine: str
    args: tuple[str, ...]
    warnings: tuple[str, ...]
    expressible: bool

    def as_dict(self) -> dict:
        return {
            "engine": self.engine,
            "args": list(self.args),
            "warnings": list(self.warnings),
            "expressible": self.expressible,
        }


def multinode_args(num_nodes: int, node_rank: int, init_addr: str) -> list[str]:
    """SGLang's multi-node flags (empty for one node)."""
    require(0 <= node_rank < num_nodes, f"node_rank ({node_rank}) must be in [0, {num_nodes})")
    if num_nodes == 1:
        return []
    return [
        "--nnodes",
        str(num_nodes),
        "--node-rank",
        str(node_rank),
        "--dist-init-addr",
        init_addr,
    ]


def attn_dp_args(attn_dp: int, version: EngineVersion) -> list[str]:
    """Attention-DP flags in the spelling ``version`` accepts (none for attn_dp == 1)."""
    if attn_dp <= 1:
        return []
    if version.attn_dp_flag == "--attn-dp-size":
        return ["--attn-dp-size", str(attn_dp)]
    return ["--dp-size", str(attn_dp), "--enable-dp-attention"]


def _ep_args(
    s: Strategy, tp: int, target: Target, nodes: int, warnings: list[str], a2a: str = "auto"
) -> list[str]:
    """``--ep-size`` and the DeepEP backend where :func:`moeplan.cost.a2a.moe_backend` (the
    cost model's decision) picks it for ``a2a``."""
    if s.moe_ep <= 1:
        return []
    hw = HardwareFacts(
        target.architecture, target.gpu_facts, target.intra, target.inter, target.gpus_per_node
    )
    if moe_backend(a2a, "sglang", hw, None, s.moe_tp, s.moe_ep) == "deepep":
        return ["--ep-size", str(s.moe_ep), "--moe-a2a-backend", "deepep"]
    blockers = deepep_blockers(target, nodes)
    if a2a == "nccl":
        return ["--ep-size", str(s.moe_ep)]
    if s.moe_ep != tp:
        warnings.append(
            f"SGLang's deepep backend needs ep_size == tp_size ({s.moe_ep} != {tp}); "
            f"MoE TP{s.moe_tp} x EP{s.moe_ep} runs with --moe-a2a-backend none, which "
            "dispatches by all-gather/all-reduce instead of the modelled all-to-all"
        )
    else:
        warnings.append(
            "no --moe-a2a-backend deepep: " + "; ".join(blockers) + ". EP runs on the default "
            "backend (all-gather/all-reduce dispatch), slower than the modelled all-to-all"
        )
    return ["--ep-size", str(s.moe_ep)]


def sglang_args(
    strategy: Strategy,
    *,
    model_path: str,
    target: Target,
    num_nodes: int,
    node_rank: int = 0,
    init_addr: str = "${MASTER_ADDR}:5000",
    expert_location: str | None = None,
    redundant_experts: int = 0,
    version: EngineVersion = SGLANG,
    knobs: InstanceKnobs | None = None,
) -> ExportResult:
    """``python -m sglang.launch_server`` arguments for ``strategy`` on node ``node_rank``;
    ``knobs``: the instance knobs the plan priced (MoE backend, two-batch overlap, MTP, KV
    dtype; :mod:`moeplan.export.knob_flags`)."""
    s = strategy
    tp = s.stage_size
    args = [
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        model_path,
        "--tp-size",
        str(tp),
        *attn_dp_args(s.attn_dp, version),
    ]
    warnings: list[str] = []
    args += _ep_args(s, tp, target, num_nodes, warnings, knobs.a2a if knobs else "auto")
    if expert_location is not None:
        args += ["--init-expert-location", expert_location]
        if redundant_experts:
            args += ["--ep-num-redundant-experts", str(redundant_experts)]
    elif redundant_experts and s.moe_ep > 1:  # SGLang's own EPLB places the replicas
        args += ["--ep-num-redundant-experts", str(redundant_experts), "--enable-eplb"]
    if knobs is not None:
        args += sglang_knob_args(knobs)
    if s.pp > 1:
        args += ["--pp-size", str(s.pp)]
        if s.attn_dp > 1:
            warnings.append(
                "pipeline parallelism together with DP attention depends on the "
                "SGLang version; check that your release supports both"
            )
    if s.fused:
        warnings.append(
            "SGLang has no fused RS-Combine / AG-Dispatch: it runs the sequential "
            "RS -> A2A -> AG schedule, so expect the unfused prediction"
        )
    args += multinode_args(num_nodes, node_rank, init_addr)
    return ExportResult(
        engine="sglang", args=tuple(args), warnings=tuple(warnings), expressible=True
    )


# ---- prefill/decode disaggregation ---------------------------------------------
PD_BOOTSTRAP_PORT = 8998  # SGLang's default --disaggregation-bootstrap-port
PD_TRANSFER_BACKENDS = ("mooncake", "nixl")  # --disaggregation-transfer-backend choices used
PD_SERVER_PORT = 30000
PD_ROUTER_PORT = 8000


@dataclass(frozen=True, kw_only=True, slots=True)
class PDCommand:
    """One command of a PD deployment: ``role`` prefill/decode/router, its instance and the
    node within the instance (``${PREFILL_<i>_ADDR}`` etc. name each instance's node 0)."""

    role: str
    instance: int
    node_rank: int
    args: tuple[str, ...]


def pd_pools(
    prefill: Strategy, decode: Strategy, x: int, y: int, target: Target
) -> list[tuple[str, Strategy, int, int]]:
    """``(role, layout, instances, nodes per instance)`` of both pools."""
    return [
        (role, s, count, -(-s.world_size // target.gpus_per_node))
        for role, s, count in (("prefill", prefill, x), ("decode", decode, y))
    ]


def pd_address(role: str, instance: int) -> str:
    """The shell variable naming node 0 of a pool instance, e.g. ``${PREFILL_0_ADDR}``."""
    return f"${{{role.upper()}_{instance}_ADDR}}"


def sglang_pd_commands(
    prefill: Strategy,
    decode: Strategy,
    *,
    x: int,
    y: int,
    model_path: str,
    target: Target,
    transfer_backend: str = "mooncake",
    knobs: tuple[InstanceKnobs | None, InstanceKnobs | None] = (None, None),
    prefill_chunk: int | None = None,
) -> list[PDCommand]:
    """SGLang PD launch: ``x`` prefill and ``y`` decode servers (each with its own layout,
    ``--disaggregation-mode prefill|decode``, the KV transfer backend and, on prefill, the
    bootstrap port, and each pool's ``knobs``: its MoE backend and two-batch overlap flags),
    then ``sglang_router.launch_router --pd-disaggregation`` listing every
    prefill (with its bootstrap port) and decode server, round-robin on both (the policy
    :mod:`moeplan.serve.pools.pd` simulates). Instances sit on consecutive GPUs, prefill first; one
    smaller than a node gets ``--base-gpu-id``, and every server its own port (and prefill
    bootstrap port), so instances sharing a host do not collide. An instance spanning several
    nodes gets one command per node (``--nnodes --node-rank --dist-init-addr`` of its node 0)."""
    require(
        transfer_backend in PD_TRANSFER_BACKENDS,
        f"transfer_backend ({transfer_backend!r}) must be one of {PD_TRANSFER_BACKENDS}",
    )
    require(x >= 1 and y >= 1, f"x ({x}) and y ({y}) must both be >= 1")
    out: list[PDCommand] = []
    router = ["python", "-m", "sglang_router.launch_router", "--pd-disaggregation"]
    gpu = 0  # instances laid out on consecutive GPUs, prefill first
    pool_knobs = {"prefill": knobs[0], "decode": knobs[1]}
    for role, s, count, nodes in pd_pools(prefill, decode, x, y, target):
        for i in range(count):
            addr = pd_address(role, i)
            port, boot = PD_SERVER_PORT + len(out), PD_BOOTSTRAP_PORT + i  # unique per host
            pd = ["--disaggregation-mode", role, "--disaggregation-transfer-backend"]
            pd += [transfer_backend, "--host", "0.0.0.0", "--port", str(port)]
            if role == "prefill":
                pd += ["--disaggregation-bootstrap-port", str(boot)]
                pd += prefill_chunk_args("sglang", prefill_chunk, s.attn_dp)
            if s.world_size < target.gpus_per_node:  # several instances share a node
                pd += ["--base-gpu-id", str(gpu % target.gpus_per_node)]
            gpu += s.world_size
            for rank in range(nodes):
                r = sglang_args(
                    s,
                    model_path=model_path,
                    target=target,
                    num_nodes=nodes,
                    node_rank=rank,
                    init_addr=f"{addr}:{5000 + len(out)}",
                    knobs=pool_knobs[role],
                )
                out.append(PDCommand(role=role, instance=i, node_rank=rank, args=(*r.args, *pd)))
            url = f"http://{addr}:{port}"
            router += ["--prefill", url, str(boot)] if role == "prefill" else ["--decode", url]
    router += ["--prefill-policy", "round_robin", "--decode-policy", "round_robin"]
    router += ["--host", "0.0.0.0", "--port", str(PD_ROUTER_PORT)]
    out.append(PDCommand(role="router", instance=0, node_rank=0, args=tuple(router)))
    return out


def pd_strategy(layout: Any) -> Strategy:
    """The engine layout of one pool instance (a :class:`moeplan.serve.ServeLayout`)."""
    return Strategy(
        attn_tp=layout.attn_tp,
        attn_dp=layout.attn_dp,
        moe_tp=layout.moe_tp,
        moe_ep=layout.moe_ep,
        pp=layout.pp,
    )


def sglang_pd_script(pd: Any, *, model_path: str, target: Target) -> str:
    """Bash launch of a PD deployment (:class:`moeplan.serve.pools.pd.PDLayout` with colocated
    pools): the command of ``ROLE`` (prefill, decode or router), ``INSTANCE`` and
    ``NODE_RANK``, each instance's node 0 named by ``PREFILL_<i>_ADDR`` / ``DECODE_<i>_ADDR``."""
    from moeplan.export.launcher import comment, render_command

    cmds = sglang_pd_commands(
        pd_strategy(pd.prefill),
        pd_strategy(pd.decode),
        x=pd.x,
        y=pd.y,
        model_path=model_path,
        target=target,
        knobs=(getattr(pd, "prefill_knobs", None), getattr(pd, "decode_knobs", None)),
        prefill_chunk=getattr(pd, "prefill_chunk", None),
    )
    lines = [
        "#!/usr/bin/env bash",
        "set -euo pipefail",
        comment(f"moeplan plan: SGLang prefill/decode disaggregation, {pd.label}"),
        "# run with ROLE=prefill|decode|router, INSTANCE and NODE_RANK (default 0) on each node;",
        "# export PREFILL_<i>_ADDR and DECODE_<i>_ADDR (node 0 of each instance) everywhere",
        'TARGET="${ROLE:?set ROLE to prefill, decode or router}_${INSTANCE:-0}_${NODE_RANK:-0}"',
        'case "${TARGET}" in',
    ]
    for k in cmds:
        lines += [
            f"  {k.role}_{k.instance}_{k.node_rank})",
            render_command(k.args, "    "),
            "    ;;",
        ]
    lines += ['  *) echo "moeplan: no command for ${TARGET}" >&2; exit 2 ;;', "esac"]
    return "\n".join(lines) + "\n"
