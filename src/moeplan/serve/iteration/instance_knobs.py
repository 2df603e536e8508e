"""Engine knobs of one instance that change what an iteration costs: the MoE all-to-all
backend, two-batch overlap, multi-token prediction and the KV-cache dtype.

(Redundant experts change the layout's memory and balance and live on
:class:`~moeplan.serve.layout.Layout`.) :func:`resolve_knobs` turns the user's flags into
:class:`InstanceKnobs` with the engine's rules, each error one line naming flag, value and rule:

- ``a2a``: :func:`moeplan.cost.a2a.moe_backend` — the one decision the exports use too.
- ``tbo``: two-batch overlap hides DeepEP's dispatch / combine of one micro-batch under the
  other's compute; SGLang's ``--enable-two-batch-overlap`` and vLLM's dual-batch overlap
  (``--enable-dbo``) run it with a DeepEP all-to-all backend only
  (sglang docs/advanced_features/expert_parallelism.md; vllm docs expert_parallel_deployment).
- ``mtp``: draft tokens per step of DeepSeek's multi-token-prediction module (SGLang
  ``--speculative-algorithm EAGLE`` with the model's NextN layer); needs a model that ships one
  (``num_nextn_predict_layers`` > 0 in its config) and the acceptance rate ``mtp_accept`` the
  user states, in (0, 1] — no default.
- ``mem_fraction``: the engine's memory fraction the KV pool is sized at (SGLang
  ``--mem-fraction-static``, vLLM ``--gpu-memory-utilization``, TensorRT-LLM
  ``free_gpu_memory_fraction``; :class:`moeplan.cost.memory.KVPool`), in (0, 1); None: the
  engine's own default for the instance (:func:`moeplan.serve.knobs.kv_pool`).
- ``kv_dtype``: ``auto`` (the engines' default: the model's activation dtype, bf16), ``bf16``
  or ``fp8`` (1 byte per element: SGLang ``--kv-cache-dtype fp8_e4m3``, vLLM ``fp8``).
"""

from __future__ import annotations

from dataclasses import dataclass

from moeplan.cost.a2a import A2A_CHOICES, moe_backend
from moeplan.errors import MoeplanError, require
from moeplan.planners.layout import Layout
from moeplan.specs import ClusterSpec, ModelSpec

KV_DTYPES = ("auto", "bf16", "fp8")
KV_BYTES = {"auto": 2.0, "bf16": 2.0, "fp8": 1.0}  # bytes per cached element
MAX_MTP = 8  # SGLang's speculative_num_steps examples go to 5; a bound on the search


@dataclass(frozen=True, kw_only=True, slots=True)
class InstanceKnobs:
    """Resolved knobs (``a2a`` is ``"deepep"`` or ``"nccl"``)."""

    a2a: str = "nccl"
    tbo: bool = False
    mtp: int = 0
    mtp_accept: float = 0.0
    kv_dtype: str = "auto"
    mem_fraction: float | None = None

    def __post_init__(self) -> None:
        require(self.a2a in ("deepep", "nccl"), f"knobs.a2a ({self.a2a!r}) must be resolved")
        require(
            self.mem_fraction is None or 0.0 < self.mem_fraction < 1.0,
            f"--mem-fraction ({self.mem_fraction}) must be in (0, 1)",
        )
        require(
            self.kv_dtype in KV_DTYPES,
            f"--kv-dtype ({self.kv_dtype!r}) must be one of {', '.join(KV_DTYPES)}",
        )
        require(0 <= self.mtp <= MAX_MTP, f"--mtp ({self.mtp}) must be in 0..{MAX_MTP}")
        if self.mtp:
            require(
                0.0 < self.mtp_accept <= 1.0,
                f"--mtp-accept ({self.mtp_accept}) must be in (0, 1]",
            )

    @property
    def kv_scale(self) -> float:
        """KV bytes per element over bf16's."""
        return KV_BYTES[self.kv_dtype] / KV_BYTES["bf16"]

    @property
    def tokens_per_step(self) -> float:
        """Expected tokens a sequence gains per decode step with ``mtp`` draft tokens each
        accepted with probability ``mtp_accept`` given its predecessors were (chain drafting,
        independent acceptances): ``1 + P + P^2 + ... + P^N``."""
        return sum(self.mtp_accept**i for i in range(self.mtp + 1)) if self.mtp else 1.0

    def to_dict(self) -> dict[str, object]:
        return {
            "a2a": self.a2a,
            "tbo": self.tbo,
            "mtp": self.mtp,
            "mtp_accept": self.mtp_accept if self.mtp else None,
            "kv_dtype": self.kv_dtype,
            "mem_fraction": self.mem_fraction,
        }


def resolve_knobs(
    engine: str | None,
    model: ModelSpec,
    cluster: ClusterSpec,
    layout: Layout,
    *,
    a2a: str = "auto",
    tbo: bool | None = None,
    mtp: int = 0,
    mtp_accept: float | None = None,
    kv_dtype: str = "auto",
    mem_fraction: float | None = None,
) -> InstanceKnobs:
    """The knobs for these flags (``tbo=None``: off, the engines' default), or one-line
    :class:`MoeplanError` (module docstring)."""
    if a2a not in A2A_CHOICES:
        raise MoeplanError(f"--a2a ({a2a!r}) must be one of {', '.join(A2A_CHOICES)}")
    backend = moe_backend(a2a, engine, model, cluster, layout.moe_tp, layout.moe_ep)
    if tbo and backend != "deepep":
        raise MoeplanError(
            f"--tbo needs the DeepEP all-to-all (the MoE backend here is {backend}: "
            "--a2a deepep on an EP layout without MoE TP, SM90 GPUs, NVLink P2P and RDMA)"
        )
    require(mtp_accept is None or mtp > 0, f"--mtp-accept ({mtp_accept}) needs --mtp N (N >= 1)")
    if mtp:
        require(
            model.num_nextn_predict_layers > 0,
            f"--mtp ({mtp}) needs a model with an MTP/NextN layer; {model.name} has none",
        )
        require(mtp_accept is not None, f"--mtp ({mtp}) needs --mtp-accept P in (0, 1]")
    return InstanceKnobs(
        a2a=backend,
        tbo=bool(tbo),
        mtp=mtp,
        mtp_accept=float(mtp_accept or 0.0),
        kv_dtype=kv_dtype,
        mem_fraction=mem_fraction,
    )
