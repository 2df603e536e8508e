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

from moeplan.backends.sglang import SGLANG as BACKEND
from moeplan.cost.a2a import HardwareFacts, moe_backend
from moeplan.errors import require
from moeplan.export import constraints as cons
from moeplan.export.constraints import SGLANG_PINNED, EngineVersion, Target, deepep_blockers
from moeplan.export.deployment import Slot, node_addr
from moeplan.export.slot_args import chunk_args, location, pinned_args
from moeplan.planners.layout import Layout
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
    s: Layout,
    tp: int,
    target: Target,
    nodes: int,
    warnings: list[str],
    a2a: str = "auto",
    phase: str | None = None,
) -> list[str]:
    """``--ep-size`` and the DeepEP backend where :func:`moeplan.cost.a2a.moe_backend` (the
    cost model's decision for a server running ``phase``; None: both) picks it for ``a2a``;
    experts DeepEP runs under its low-latency dispatch only add that dispatch's MoE runner
    and mode (:meth:`moeplan.backends.EngineBackend.deepep_ll_args`)."""
    if s.moe_ep <= 1:
        return []
    hw = HardwareFacts(
        target.architecture,
        target.gpu_facts,
        target.intra,
        target.inter,
        target.domain_gpus,
        target.moe_dtype,
    )
    if moe_backend(a2a, BACKEND.name, hw, None, s.moe_tp, s.moe_ep, phase=phase) == "deepep":
        ll = BACKEND.deepep_ll_args(target.moe_dtype)
        return ["--ep-size", str(s.moe_ep), "--moe-a2a-backend", "deepep", *ll]
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
    strategy: Layout,
    *,
    model_path: str,
    target: Target,
    num_nodes: int,
    node_rank: int = 0,
    init_addr: str = "${MASTER_ADDR}:5000",
    expert_location: str | None = None,
    redundant_experts: int = 0,
    version: EngineVersion = SGLANG_PINNED,
    knobs: InstanceKnobs | None = None,
    role: str = "colocated",
) -> ExportResult:
    """``python -m sglang.launch_server`` arguments for ``strategy`` on node ``node_rank``;
    ``knobs``: the instance knobs the plan priced (MoE backend, two-batch overlap, MTP, KV
    dtype; :meth:`moeplan.backends.EngineBackend.knob_args`); ``role``: ``colocated``, or
    the P/D pool's ``prefill`` / ``decode`` (the phase its DeepEP dispatch runs)."""
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
    phase = None if role == "colocated" else role
    ep_args = _ep_args(s, tp, target, num_nodes, warnings, knobs.a2a if knobs else "auto", phase)
    args += ep_args
    if expert_location is not None:
        args += ["--init-expert-location", expert_location]
        if redundant_experts:
            args += ["--ep-num-redundant-experts", str(redundant_experts)]
    elif redundant_experts and s.moe_ep > 1:  # SGLang's own EPLB places the replicas
        args += ["--ep-num-redundant-experts", str(redundant_experts), "--enable-eplb"]
    if "--moe-runner-backend" not in ep_args:  # DeepEP's low-latency runner pins its own
        args += BACKEND.moe_runner_args(target.moe_dtype, target.gpu_sm)
    if knobs is not None:
        args += BACKEND.knob_args(knobs)
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
        engine=BACKEND.name, args=tuple(args), warnings=tuple(warnings), expressible=True
    )


# ---- the launch writer (moeplan.export.writers.LaunchWriter) ---------------------------------
TRANSFER_BACKEND = "mooncake"  # SGLang --disaggregation-transfer-backend (its default)
PD_PROXY_NOTE: str | None = None  # sglang-router runs P/D itself (--pd-disaggregation)
#: the RDMA devices Mooncake moves KV over, a variable launch.sh requires before it starts a
#: P/D server (arg_groups/fields/disagg.py ``disaggregation_ib_device``: one device, a
#: comma-separated list or a per-GPU JSON mapping; on multi-NIC nodes the default picks one)
IB_DEVICE = "${MOEPLAN_IB_DEVICE}"


def engine_args(
    strategy: Layout, *, model_path: str, target: Target, num_nodes: int
) -> ExportResult:
    """:func:`sglang_args` on node 0."""
    return sglang_args(strategy, model_path=model_path, target=target, num_nodes=num_nodes)


def server_nodes(slot: Slot, ctx: Any, notes: list[str]) -> list[list[list[str]]]:
    """:func:`sglang_args` for the slot's layout on every node it spans, plus ``--host
    0.0.0.0 --port P``, ``--base-gpu-id`` when it does not start at GPU 0, the rendezvous
    ``--dist-init-addr`` of its first node, ``--disaggregation-mode`` and the KV transfer
    backend for a P/D pool (``--disaggregation-bootstrap-port`` on prefill), and
    ``--init-expert-location`` where the placement was made for the slot's EP size."""
    s, pool = slot.strategy, slot.pool
    loc = location(slot, ctx, notes)
    version = cons.sglang_version(ctx.versions.get(BACKEND.name))
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
            version=version,
            role=slot.role,
        )
        args = [*r.args, "--host", "0.0.0.0", "--port", str(slot.port)]
        if slot.gpus[0]:
            args += ["--base-gpu-id", str(slot.gpus[0])]
        if slot.role != "colocated":
            args += ["--disaggregation-mode", slot.role]
            args += ["--disaggregation-transfer-backend", TRANSFER_BACKEND]
            args += ["--disaggregation-ib-device", IB_DEVICE]
        if slot.bootstrap_port is not None:
            args += ["--disaggregation-bootstrap-port", str(slot.bootstrap_port)]
        if ctx.remote_code:
            args.append("--trust-remote-code")
        args += chunk_args(BACKEND, slot, ctx)
        args += pinned_args(BACKEND, slot, ctx)
        if version is not SGLANG_PINNED:
            args = [cons.SGLANG_LEGACY_RENAMES.get(a, a) for a in args]
        out.append([args])
        if rank == 0:
            notes += r.warnings
    return out


def slot_files(slot: Slot, ctx: Any) -> dict[str, str]:
    """None: SGLang's servers take every option as a flag."""
    del slot, ctx
    return {}


def server_env(slot: Slot, gpus_per_node: int) -> list[tuple[str, str]]:
    """None: ``--base-gpu-id`` selects the slot's GPUs."""
    del slot, gpus_per_node
    return []


def check_server(args: list[str], slot: Slot, ctx: Any, rank: int) -> list[str]:
    """:func:`moeplan.export.constraints.check_sglang` with the placement file's width."""
    del rank
    loc = "--init-expert-location" in args
    return cons.check_sglang(
        args,
        ctx.target,
        gpus_used=slot.gpu_count,
        version=cons.sglang_version(ctx.versions.get(BACKEND.name)),
        location_width=ctx.placement_width if loc else None,
    )


def pd_strategy(layout: Any) -> Layout:
    """The engine layout of one pool instance (a :class:`moeplan.serve.Layout`)."""
    return Layout(
        attn_tp=layout.attn_tp,
        attn_dp=layout.attn_dp,
        moe_tp=layout.moe_tp,
        moe_ep=layout.moe_ep,
        pp=layout.pp,
    )
