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

from moeplan.errors import require
from moeplan.export.constraints import Target, vllm_eplb_blockers
from moeplan.export.knob_flags import prefill_chunk_args, vllm_knob_args, vllm_knob_env
from moeplan.export.sglang import ExportResult, pd_address, pd_pools, pd_strategy
from moeplan.planners.strategy.space import Strategy
from moeplan.serve.iteration.instance_knobs import InstanceKnobs

RAY_PORT = 6379  # Ray's default GCS port


def unexpressible(s: Strategy) -> str | None:
    """Why vLLM cannot run ``s`` (None when it can)."""
    if s.moe_tp > 1 and s.moe_ep > 1:
        return (
            f"vLLM cannot express MoE TP{s.moe_tp} x EP{s.moe_ep}: its MoE group is all EP "
            f"(EP = TP x DP = {s.attn_tp * s.attn_dp}) or all TP"
        )
    return None


def vllm_args(
    strategy: Strategy,
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
    instance knobs the plan priced (:mod:`moeplan.export.knob_flags`) for an instance of
    ``role``."""
    require(0 <= node_rank < num_nodes, f"node_rank ({node_rank}) must be in [0, {num_nodes})")
    s = strategy
    why = unexpressible(s)
    if why is not None:
        return ExportResult(
            engine="vllm", args=(), expressible=False, warnings=(why + "; no arguments emitted",)
        )
    args = ["vllm", "serve", model_path, "--tensor-parallel-size", str(s.attn_tp)]
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
        args += vllm_knob_args(knobs, role)
    if num_nodes > 1:
        args += _multinode(s, num_nodes, node_rank, address, rpc_port, warnings)
        if node_rank > 0 and "--distributed-executor-backend" in args:
            # A Ray cluster: the other nodes join it and the head node runs vllm serve.
            args = ["ray", "start", "--address", f"{address}:{RAY_PORT}", "--block"]
    if s.fused:
        warnings.append("vLLM has no fused RS-Combine / AG-Dispatch: expect the unfused prediction")
    return ExportResult(engine="vllm", args=tuple(args), warnings=tuple(warnings), expressible=True)


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
    s: Strategy, nodes: int, rank: int, address: str, port: int, warnings: list[str]
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


def vllm_pd_commands(
    prefill: Strategy,
    decode: Strategy,
    *,
    x: int,
    y: int,
    model_path: str,
    target: Target,
    knobs: tuple[InstanceKnobs | None, InstanceKnobs | None] = (None, None),
    prefill_chunk: int | None = None,
) -> tuple[list[list[str]], list[str]]:
    """``vllm serve`` of ``x`` prefill and ``y`` decode instances with
    ``--kv-transfer-config`` (NixlConnector, ``kv_role`` kv_both), node 0 of each instance,
    each pool with the instance knobs it was priced with (``knobs``: prefill, decode; their
    DeepEP kernels per role) and the prefill pool with its chunk; and the sentences a user
    must read. When a pool's layout is one vLLM cannot express
    (:func:`unexpressible`) no command is emitted and the sentence says why."""
    cmds: list[list[str]] = []
    notes = [PD_PROXY_NOTE]
    kv = json.dumps({"kv_connector": PD_CONNECTOR, "kv_role": "kv_both"})
    pool_knobs = {"prefill": knobs[0], "decode": knobs[1]}
    for role, s, count, nodes in pd_pools(prefill, decode, x, y, target):
        r = vllm_args(
            s, model_path=model_path, target=target, num_nodes=nodes,
            address=pd_address(role, 0), knobs=pool_knobs[role], role=role,
        )  # fmt: skip
        if not r.expressible:
            return [], [f"the {role} pool cannot be launched by vLLM: {r.warnings[0]}"]
        notes += [f"{role}: {w}" for w in r.warnings]
        chunk = prefill_chunk_args("vllm", prefill_chunk, s.attn_dp) if role == "prefill" else []
        env = [f"{k}={v}" for k, v in vllm_knob_env(pool_knobs[role], role)]
        head = ["env", *env] if env else []
        cmds += [[*head, *r.args, *chunk, "--kv-transfer-config", kv] for _ in range(count)]
    return cmds, notes


def vllm_pd_script(pd: Any, *, model_path: str, target: Target) -> str:
    """Bash launch of a P/D deployment (:class:`moeplan.serve.pools.pd.PDLayout` with colocated
    pools) on vLLM: the command of ``ROLE`` (prefill or decode) and ``INSTANCE``, node 0 of
    each instance (:func:`vllm_pd_commands`, each pool's knobs and the prefill chunk), and
    the notes a user must read as comments; a pool vLLM cannot launch makes the script say
    so and exit 2."""
    from moeplan.export.launcher import comment, render_command

    cmds, notes = vllm_pd_commands(
        pd_strategy(pd.prefill),
        pd_strategy(pd.decode),
        x=pd.x,
        y=pd.y,
        model_path=model_path,
        target=target,
        knobs=(getattr(pd, "prefill_knobs", None), getattr(pd, "decode_knobs", None)),
        prefill_chunk=getattr(pd, "prefill_chunk", None),
    )
    lines = ["#!/usr/bin/env bash", "set -euo pipefail",
             comment(f"moeplan plan: vLLM prefill/decode disaggregation, {pd.label}")]  # fmt: skip
    lines += [comment(n) for n in notes]
    if not cmds:
        return "\n".join([*lines, 'echo "moeplan: no vLLM launch for this deployment" >&2',
                          "exit 2"]) + "\n"  # fmt: skip
    lines += [
        "# run with ROLE=prefill|decode and INSTANCE on node 0 of each instance",
        'TARGET="${ROLE:?set ROLE to prefill or decode}_${INSTANCE:-0}"',
        'case "${TARGET}" in',
    ]
    roles = ["prefill"] * pd.x + ["decode"] * pd.y
    for i, (role, args) in enumerate(zip(roles, cmds, strict=True)):
        idx = i if role == "prefill" else i - pd.x
        lines += [f"  {role}_{idx})", render_command(args, "    "), "    ;;"]
    lines += ['  *) echo "moeplan: no command for ${TARGET}" >&2; exit 2 ;;', "esac"]
    return "\n".join(lines) + "\n"
