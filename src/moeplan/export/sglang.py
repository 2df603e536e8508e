"""SGLang launch arguments for a MixServe strategy (pure: strategy in, argument list out).

Flag names checked against the SGLang docs (server arguments, expert parallelism,
DP attention guides): ``--tp-size`` is the GPU count of one pipeline stage (every node of it),
``--dp-size`` with ``--enable-dp-attention`` splits attention into ``dp`` groups of
``tp/dp`` GPUs, ``--ep-size`` shards experts (MoE TP = ``tp/ep``), ``--moe-a2a-backend
deepep`` needs ``ep_size == tp_size``, ``--pp-size`` pipelines layers, and multi-node runs
take ``--nnodes --node-rank --dist-init-addr`` (one command per node).

What SGLang cannot express is said plainly in ``warnings`` (and ``expressible`` is False when
the flags would describe a different strategy): there is no fused RS-Combine/AG-Dispatch.
"""

from __future__ import annotations

from dataclasses import dataclass

from moeplan.errors import require
from moeplan.planners.strategy.space import Strategy


@dataclass(frozen=True, kw_only=True, slots=True)
class ExportResult:
    """Launch arguments for one node and the caveats a user must read."""

    engine: str
    args: tuple[str, ...]
    warnings: tuple[str, ...]
    expressible: bool

    def as_dict(self) -> dict:
        return {"engine": self.engine, "args": list(self.args), "warnings": list(self.warnings),
                "expressible": self.expressible}


def multinode_args(num_nodes: int, node_rank: int, init_addr: str) -> list[str]:
    """SGLang's multi-node flags (empty for one node)."""
    require(0 <= node_rank < num_nodes, f"node_rank ({node_rank}) must be in [0, {num_nodes})")
    if num_nodes == 1:
        return []
    return ["--nnodes", str(num_nodes), "--node-rank", str(node_rank),
            "--dist-init-addr", init_addr]


def sglang_args(
    strategy: Strategy,
    *,
    model_path: str,
    num_nodes: int,
    node_rank: int = 0,
    init_addr: str = "${MASTER_ADDR}:5000",
) -> ExportResult:
    """``python -m sglang.launch_server`` arguments for ``strategy`` on node ``node_rank``."""
    s = strategy
    tp = s.stage_size
    args = ["python", "-m", "sglang.launch_server", "--model-path", model_path,
            "--tp-size", str(tp)]
    warnings: list[str] = []
    if s.attn_dp > 1:
        args += ["--dp-size", str(s.attn_dp), "--enable-dp-attention"]
    if s.moe_ep > 1:
        args += ["--ep-size", str(s.moe_ep)]
        if s.moe_ep == tp:
            args += ["--moe-a2a-backend", "deepep"]
        else:
            warnings.append(
                f"SGLang's deepep backend needs ep_size == tp_size ({s.moe_ep} != {tp}); "
                f"MoE TP{s.moe_tp} x EP{s.moe_ep} runs with --moe-a2a-backend none, which "
                "dispatches by all-gather/all-reduce instead of the modelled all-to-all")
    if s.pp > 1:
        args += ["--pp-size", str(s.pp)]
        if s.attn_dp > 1:
            warnings.append("pipeline parallelism together with DP attention depends on the "
                            "SGLang version; check that your release supports both")
    if s.fused:
        warnings.append("SGLang has no fused RS-Combine / AG-Dispatch: it runs the sequential "
                        "RS -> A2A -> AG schedule, so expect the unfused prediction")
    args += multinode_args(num_nodes, node_rank, init_addr)
    return ExportResult(engine="sglang", args=tuple(args), warnings=tuple(warnings),
                        expressible=True)
