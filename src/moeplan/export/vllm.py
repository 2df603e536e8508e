"""vLLM launch arguments for a MixServe strategy (pure: strategy in, argument list out).

Flag semantics (vLLM docs, data-parallel and expert-parallel deployment):
``--tensor-parallel-size`` (attention TP), ``--data-parallel-size`` (attention DP),
``--pipeline-parallel-size``, ``--enable-expert-parallel``. vLLM's MoE layers form one group
of ``TP x DP`` GPUs: with ``--enable-expert-parallel`` it is all EP (``EP = TP x DP``, MoE
TP = 1), without it all TP (MoE TP = TP x DP). A hybrid MoE TP x EP with both > 1 cannot be
expressed: :func:`vllm_args` returns no arguments and says so, and :func:`unexpressible`
tells a caller to pick another strategy (the report exports the best one vLLM can run).
Multi-node DP uses ``--data-parallel-size-local``, ``--data-parallel-address``,
``--data-parallel-rpc-port`` and, on the other nodes, ``--data-parallel-start-rank``
``--headless``; TP/PP across nodes runs on a Ray cluster (node 0 starts the head and runs
``vllm serve``, the other nodes' command joins it with ``ray start``). Replicated experts are asked for with
``--enable-eplb --eplb-config '{"num_redundant_experts": N}'``; vLLM's EPLB then places them
itself from its own load statistics — a static placement map cannot be passed to vLLM.
vLLM has no fused AR-A2A.
"""

from __future__ import annotations

import json
from typing import Any

from moeplan.backends.vllm import VLLM as BACKEND
from moeplan.errors import require
from moeplan.export import constraints as cons
from moeplan.export.constraints import Target, vllm_eplb_blockers
from moeplan.export.deployment import Slot, node_addr
from moeplan.export.sglang import ExportResult
from moeplan.export.slot_args import chunk_args, pinned_args
from moeplan.planners.layout import Layout
from moeplan.serve.iteration.instance_knobs import InstanceKnobs

RAY_PORT = 6379  # Ray's default GCS port
PROGRAM = "vllm"  # the server command (``vllm serve``); other nodes may run ``ray start``


def unexpressible(s: Layout) -> str | None:
    """Why vLLM cannot run ``s`` (None when it can)."""
    if s.moe_tp > 1 and s.moe_ep > 1:
        return (
            f"vLLM cannot express MoE TP{s.moe_tp} x EP{s.moe_ep}: its MoE group is all EP "
            f"(EP = TP x DP = {s.attn_tp * s.attn_dp}) or all TP"
        )
    return None


def vllm_args(
    strategy: Layout,
    *,
    model_path: str,
    target: Target,
    num_nodes: int,
    node_rank: int = 0,
    address: str = "${MASTER_ADDR}",
    rpc_port: int = 13345,
    redundant_experts: int = 0,
    knobs: InstanceKnobs | None = None,
    role: str = "colocated",
) -> ExportResult:
    """``vllm serve`` arguments for ``strategy`` on node ``node_rank``; ``knobs`` the
    instance knobs the plan priced (:meth:`moeplan.backends.EngineBackend.knob_args`) for an instance of
    ``role``."""
    require(0 <= node_rank < num_nodes, f"node_rank ({node_rank}) must be in [0, {num_nodes})")
    s = strategy
    why = unexpressible(s)
    if why is not None:
        return ExportResult(
            engine=BACKEND.name,
            args=(),
            expressible=False,
            warnings=(why + "; no arguments emitted",),
        )
    args = [PROGRAM, "serve", model_path, "--tensor-parallel-size", str(s.attn_tp)]
    warnings: list[str] = []
    if s.attn_dp > 1:
        args += ["--data-parallel-size", str(s.attn_dp)]
    if s.moe_ep > 1:
        args += ["--enable-expert-parallel"]
        args += _eplb(redundant_experts, target, warnings)
    elif redundant_experts:
        warnings.append(
            f"{redundant_experts} redundant experts were placed, but this strategy "
            "has no expert parallelism, so there is nothing to replicate in vLLM"
        )
    if s.pp > 1:
        args += ["--pipeline-parallel-size", str(s.pp)]
    if knobs is not None:
        args += BACKEND.knob_args(knobs, role)
    if num_nodes > 1:
        args += _multinode(s, num_nodes, node_rank, address, rpc_port, warnings)
        if node_rank > 0 and "--distributed-executor-backend" in args:
            # A Ray cluster: the other nodes join it and the head node runs vllm serve.
            args = ["ray", "start", "--address", f"{address}:{RAY_PORT}", "--block"]
    if s.fused:
        warnings.append("vLLM has no fused RS-Combine / AG-Dispatch: expect the unfused prediction")
    return ExportResult(
        engine=BACKEND.name, args=tuple(args), warnings=tuple(warnings), expressible=True
    )


def _eplb(redundant: int, target: Target, warnings: list[str]) -> list[str]:
    if redundant <= 0:
        return []
    blockers = vllm_eplb_blockers(target)
    if blockers:
        warnings.append(
            f"{redundant} redundant experts were advised but not emitted: " + "; ".join(blockers)
        )
        return []
    warnings.append(
        "vLLM's EPLB chooses which experts to replicate from its own load "
        "statistics; moeplan's placement map cannot be passed to vLLM"
    )
    return ["--enable-eplb", "--eplb-config", json.dumps({"num_redundant_experts": redundant})]


def _multinode(
    s: Layout, nodes: int, rank: int, address: str, port: int, warnings: list[str]
) -> list[str]:
    if s.attn_dp >= nodes and s.attn_dp % nodes == 0 and s.pp == 1:
        local = s.attn_dp // nodes
        out = [
            "--data-parallel-size-local",
            str(local),
            "--data-parallel-address",
            address,
            "--data-parallel-rpc-port",
            str(port),
        ]
        if rank > 0:
            out += ["--data-parallel-start-rank", str(rank * local), "--headless"]
        return out
    warnings.append(
        "TP/PP across nodes in vLLM runs on a Ray cluster: `ray start` on every "
        "node, then run this command once on the head node"
    )
    return ["--distributed-executor-backend", "ray"]


# ---- prefill/decode disaggregation ---------------------------------------------
PD_CONNECTOR = "NixlConnector"
PD_PROXY_NOTE = (
    "vLLM has no PD router of its own: a proxy must send each request to a prefill instance "
    "(max_tokens 1) and then to a decode instance (vLLM's disaggregated-serving examples ship "
    "one); moeplan emits the instances only"
)


# ---- the launch writer (moeplan.export.writers.LaunchWriter) ---------------------------------
def engine_args(
    strategy: Layout, *, model_path: str, target: Target, num_nodes: int
) -> ExportResult:
    """:func:`vllm_args` on node 0."""
    return vllm_args(strategy, model_path=model_path, target=target, num_nodes=num_nodes)


def server_nodes(slot: Slot, ctx: Any, notes: list[str]) -> list[list[list[str]]] | None:
    """:func:`vllm_args` for the slot's layout on every node it spans, plus ``--host 0.0.0.0
    --port P`` and, in a P/D pool, ``--kv-transfer-config`` (NixlConnector); a TP/PP layout
    across nodes starts the Ray head first. None when vLLM cannot express the layout."""
    s, pool = slot.strategy, slot.pool
    if (why := BACKEND.model_class_blocker(ctx.target.architecture)) is not None:
        notes.append(why + ": run a later vLLM release that has it (the flags are the same)")
    out: list[list[list[str]]] = []
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
        if args[0] == PROGRAM:  # the server command (the others join the Ray cluster)
            args += ["--host", "0.0.0.0", "--port", str(slot.port)]
            if slot.role != "colocated":
                kv = {"kv_connector": PD_CONNECTOR, "kv_role": "kv_both"}
                args += ["--kv-transfer-config", json.dumps(kv)]
            args += chunk_args(BACKEND, slot, ctx)
            args += pinned_args(BACKEND, slot, ctx)
            if ctx.remote_code:
                args.append("--trust-remote-code")
        out.append([args])
        if rank == 0:
            notes += r.warnings
    if "--distributed-executor-backend" in out[0][0]:
        out[0].insert(0, ["ray", "start", "--head", "--port", str(RAY_PORT)])
    return out


def slot_files(slot: Slot, ctx: Any) -> dict[str, str]:
    """None: vLLM's servers take every option as a flag."""
    del slot, ctx
    return {}


def server_env(slot: Slot, gpus_per_node: int) -> list[tuple[str, str]]:
    """vLLM has no base-GPU flag: ``CUDA_VISIBLE_DEVICES`` selects a slot smaller than a node."""
    if len(slot.gpus) < gpus_per_node:
        return [("CUDA_VISIBLE_DEVICES", ",".join(map(str, slot.gpus)))]
    return []


def check_server(args: list[str], slot: Slot, ctx: Any, rank: int) -> list[str]:
    """:func:`moeplan.export.constraints.check_vllm` on a ``vllm serve`` command (a node that
    joins a Ray cluster has none)."""
    if args[:1] != [PROGRAM]:
        return []
    return cons.check_vllm(args, ctx.target, gpus_used=slot.gpu_count, node_rank=rank)
