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
- ``kv_dtype``: ``auto`` (no flag: what the engine stores by default for this checkpoint on
  this GPU, :meth:`moeplan.backends.EngineBackend.default_kv_dtype`), ``bf16`` or ``fp8``
  (1 byte per element: SGLang ``--kv-cache-dtype fp8_e4m3``, vLLM ``fp8``). The dtype stored
  (``kv_cache``) prices both the KV pool (memory) and the KV reads (time).
- ``routing``: how one batch's tokens pick their experts beside the placement's expected
  shares. ``random`` (the default): each token's experts are a draw, so the busiest EP rank of
  a batch carries more than the mean (:mod:`moeplan.cost.ep_spread`, on the DeepEP path);
  ``balanced``: every rank receives exactly its share in every batch — what DeepSeek's own
  profile states (deepseek-ai/profile-data README: the profiles simulate an absolutely
  balanced MoE routing). A routing trace's per-expert loads (``--routing-trace``) enter the
  placement either way.
- ``offload``: the weight offload to host memory (:class:`moeplan.cost.offload.WeightOffload`,
  the engine's ``--offload-group-size / --offload-num-in-group / --offload-prefetch-step``);
  None: none. Given, it must suit the model and the GPU
  (:meth:`moeplan.cost.offload.WeightOffload.check`: a host-link figure in the GPU's record,
  no group past the model's layers) and the engine must have the flags
  (:meth:`moeplan.backends.EngineBackend.offload_blocker`).
- ``tbo`` and ``mtp`` are the engine's for the model's family too (its capability table:
  two-batch overlap, MTP/NextN drafting), each refusal one line naming the engine source.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from moeplan.backends import backend_or_none
from moeplan.cost.a2a import A2A_CHOICES, moe_backend
from moeplan.cost.offload import WeightOffload
from moeplan.errors import MoeplanError, require
from moeplan.planners.layout import Layout
from moeplan.specs import ClusterSpec, ModelSpec

KV_DTYPES = ("auto", "bf16", "fp8")
ROUTINGS = ("random", "balanced")  # a batch's spread over EP ranks (module docstring)
KV_BYTES = {"bf16": 2.0, "fp8": 1.0}  # bytes per cached element of a stored dtype
MAX_MTP = 8  # SGLang's speculative_num_steps examples go to 5; a bound on the search


@dataclass(frozen=True, kw_only=True, slots=True)
class InstanceKnobs:
    """Resolved knobs (``a2a`` is ``"deepep"`` or ``"nccl"``). ``kv_dtype`` is the flag
    (``auto``: none), ``kv_cache`` the dtype the engine stores for it (``""``: not resolved,
    the flag's dtype, bf16 for ``auto``), ``kv_model_bytes`` the bytes per KV value the
    model's records carry (its checkpoint's statement, 2 unstated): the memory model scales
    them by :attr:`kv_scale`."""

    a2a: str = "nccl"
    tbo: bool = False
    mtp: int = 0
    mtp_accept: float = 0.0
    kv_dtype: str = "auto"
    kv_cache: str = ""
    kv_model_bytes: int = 2
    mem_fraction: float | None = None
    routing: str = "random"
    offload: WeightOffload | None = None
    #: the scheduler's host work overlapped with the GPU step (vLLM ``--async-scheduling``,
    #: SGLang's overlap scheduler; :mod:`moeplan.cost.host`); None: the engine's default
    overlap: bool | None = None

    def __post_init__(self) -> None:
        require(
            self.routing in ROUTINGS,
            f"--routing ({self.routing!r}) must be one of {', '.join(ROUTINGS)}",
        )
        require(self.a2a in ("deepep", "nccl"), f"knobs.a2a ({self.a2a!r}) must be resolved")
        require(
            self.mem_fraction is None or 0.0 < self.mem_fraction < 1.0,
            f"--mem-fraction ({self.mem_fraction}) must be in (0, 1)",
        )
        require(
            self.kv_dtype in KV_DTYPES,
            f"--kv-dtype ({self.kv_dtype!r}) must be one of {', '.join(KV_DTYPES)}",
        )
        require(
            self.kv_cache in ("", *KV_BYTES),
            f"knobs.kv_cache ({self.kv_cache!r}) must be one of {', '.join(KV_BYTES)}",
        )
        require(0 <= self.mtp <= MAX_MTP, f"--mtp ({self.mtp}) must be in 0..{MAX_MTP}")
        if self.mtp:
            require(
                0.0 < self.mtp_accept <= 1.0,
                f"--mtp-accept ({self.mtp_accept}) must be in (0, 1]",
            )

    @property
    def kv_stored(self) -> str:
        """The KV dtype the engine stores (``bf16`` or ``fp8``)."""
        if self.kv_cache:
            return self.kv_cache
        return "bf16" if self.kv_dtype == "auto" else self.kv_dtype

    @property
    def kv_scale(self) -> float:
        """Stored KV bytes per element over the bytes the model's records carry."""
        return KV_BYTES[self.kv_stored] / self.kv_model_bytes

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
            "kv_cache_dtype": self.kv_stored,
            "mem_fraction": self.mem_fraction,
            "routing": self.routing,
            "weight_offload": None if self.offload is None else self.offload.label,
            "overlap_schedule": self.overlap,
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
    routing: str = "random",
    version: str | None = None,
    phase: str | None = None,
    offload: WeightOffload | None = None,
    overlap: bool | None = None,
) -> InstanceKnobs:
    """The knobs for these flags (``tbo=None``: off, the engines' default), or one-line
    :class:`MoeplanError` (module docstring); the engine's capabilities are release
    ``version``'s (None: its pinned release), for an instance running ``phase``
    (``prefill`` / ``decode``: a P/D pool; None: both)."""
    if a2a not in A2A_CHOICES:
        raise MoeplanError(f"--a2a ({a2a!r}) must be one of {', '.join(A2A_CHOICES)}")
    check_engine_runs(engine, model, cluster, version)
    backend = moe_backend(a2a, engine, model, cluster, layout.moe_tp, layout.moe_ep, version, phase)
    eng = backend_or_none(engine)
    if tbo and backend != "deepep":
        raise MoeplanError(
            f"--tbo needs the DeepEP all-to-all (the MoE backend here is {backend}: "
            "--a2a deepep on an EP layout without MoE TP, SM90 GPUs, NVLink P2P and RDMA)"
        )
    if (
        tbo
        and eng is not None
        and (why := eng.tbo_blocker(model.architecture, version)) is not None
    ):
        raise MoeplanError(f"--tbo cannot run here: {why}")
    require(mtp_accept is None or mtp > 0, f"--mtp-accept ({mtp_accept}) needs --mtp N (N >= 1)")
    if mtp:
        require(
            model.num_nextn_predict_layers > 0,
            f"--mtp ({mtp}) needs a model with an MTP/NextN layer; {model.name} has none",
        )
        if eng is not None and (why := eng.mtp_blocker(model.architecture, version)) is not None:
            raise MoeplanError(f"--mtp ({mtp}) cannot run here: {why}")
        require(mtp_accept is not None, f"--mtp ({mtp}) needs --mtp-accept P in (0, 1]")
    if offload is not None:
        offload.check(model, cluster.gpu)
        if eng is not None and (why := eng.offload_blocker()) is not None:
            raise MoeplanError(f"--weight-offload ({offload.label}) cannot run here: {why}")
    if overlap is not None:
        if eng is None:
            raise MoeplanError("--overlap-schedule needs an engine (--engine)")
        eng.overlap_args(overlap, version)  # one line where the engine has no such flag
        if overlap and (why := eng.overlap_blocker(layout.pp, mtp, version)) is not None:
            raise MoeplanError(f"--overlap-schedule cannot run here: {why}")
    return with_kv_cache(
        InstanceKnobs(
            overlap=overlap,
            a2a=backend,
            tbo=bool(tbo),
            mtp=mtp,
            mtp_accept=float(mtp_accept or 0.0),
            kv_dtype=kv_dtype,
            mem_fraction=mem_fraction,
            routing=routing,
            offload=offload,
        ),
        engine,
        model,
        cluster,
    )


def model_kv_bytes(model: ModelSpec) -> int:
    """Bytes per KV value the model's records carry: 1 where its checkpoint states an FP8 KV
    cache (:func:`moeplan.specs.model_reader.quant_rules`), else 2."""
    kinds = [x.mixer.kv_bytes for x in model.layer_specs if x.mixer.has_kv_cache]
    return int(min(kinds)) if kinds else 2


def with_kv_cache(
    knobs: InstanceKnobs, engine: str | None, model: ModelSpec, cluster: ClusterSpec
) -> InstanceKnobs:
    """``knobs`` with the KV dtype the engine stores resolved: the flag's, or for ``auto`` the
    engine's default for this checkpoint on this GPU
    (:meth:`moeplan.backends.EngineBackend.default_kv_dtype`; no engine: the checkpoint's
    statement)."""
    stated = model_kv_bytes(model)
    if knobs.kv_dtype != "auto":
        stored = knobs.kv_dtype
    else:
        eng = backend_or_none(engine)
        fp8 = stated == 1
        if eng is None:
            stored = "fp8" if fp8 else "bf16"
        else:
            stored = eng.default_kv_dtype(model.architecture, fp8, cluster.gpu)
    return replace(knobs, kv_cache=stored, kv_model_bytes=stated)


def check_engine_runs(
    engine: str | None, model: ModelSpec, cluster: ClusterSpec, version: str | None = None
) -> None:
    """One line (exit 2) when ``engine`` has no MoE kernel a table prices for the model's
    experts on the cluster's GPU (:meth:`moeplan.backends.EngineBackend.moe_kernel_blocker`):
    no layout of it can be served, so nothing is priced."""
    b = backend_or_none(engine)
    if b is None:
        return
    why = b.moe_kernel_blocker(model.quant.experts.format.kernel_dtype, cluster.gpu, version)
    if why is not None:
        raise MoeplanError(f"engine ({b.name}) cannot serve {model.name} here: {why}")
