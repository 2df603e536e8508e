"""Measure this machine's operations and fit a :class:`~moeplan.cost.HardwareProfile`.

The fits are the ones :mod:`moeplan.cost.calibrate` applies to NVIDIA's measured tables, reused
as they are: :meth:`Roofline.fit` on a seeded 20 % held-out split
(:func:`~moeplan.cost.calibrate.heldout_mask`) for GEMMs — started from the measured ceilings
rather than :func:`~moeplan.cost.calibrate.fit_gemm`'s H100 guess, which a CPU is six orders of
magnitude away from (the log-space fit stalled there on CPU runs) — :func:`moeplan.cost.calibrate.fit_nccl` (:class:`Piecewise` α-β) for
collectives, and :class:`AlphaBeta` + :func:`moeplan.cost.linear.quality` with the same
held-out mask for attention (FinDEP Eq. 8: ``x = q_tokens * keys * heads * (d_k + d_v)``) and
permutation (``x`` = bytes gathered).

Two more rows check, without fitting, what the cost model derives: ``expert_ffn`` (grouped
SwiGLU predicted by :meth:`CostModel.grouped_gemm` from the fitted GEMM model, one launch for
all local experts) — its error is the error of pricing grouped experts from plain GEMMs.

Departures: the profile has no field for permutation, so its fit is reported, not stored.
Collectives are not measured yet (``meas.nccl`` stays empty; :func:`fit` already fits rows put
there with ``fit_nccl``): a multi-GPU NCCL sweep is listed as remaining work in docs/GPU.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from moeplan.cost import CostModel, HardwareProfile
from moeplan.cost.calibrate import FitRow, NcclRows, fit_nccl, heldout_mask
from moeplan.cost.kernel_fits import fit_rows
from moeplan.cost.linear import AlphaBeta, Roofline, quality
from moeplan.errors import MoeplanError
from moeplan.profiling import microbench as mb
from moeplan.profiling.shapes import attention_shapes, model_gemms, tokens_per_expert
from moeplan.profiling.timing import resolve_device
from moeplan.specs import ClusterSpec, GPUSpec, LinkSpec, load_model, model_names


@dataclass(frozen=True, kw_only=True, slots=True)
class Sizes:
    """What to measure. ``scale`` divides model widths (CPU); ``quick`` picks small sizes."""

    models: tuple[str, ...]
    tokens: tuple[int, ...]
    contexts: tuple[int, ...]
    batches: tuple[int, ...]
    scale: int
    repeats: int
    ceiling_gemm: int
    ceiling_copy_bytes: int

    @classmethod
    def preset(cls, device: str, quick: bool, models: tuple[str, ...] | None = None) -> Sizes:
        for m in models or ():
            if m not in model_names():
                raise MoeplanError(
                    f"model ({m}) is not a preset; choose from {', '.join(model_names())}"
                )
        if quick:
            return cls(
                models=models or ("qwen3-30b-a3b", "deepseek-v2-lite"),
                tokens=(1, 8, 32, 128),
                contexts=(64, 256),
                batches=(1, 4),
                scale=8 if device == "cpu" else 1,
                repeats=3,
                ceiling_gemm=256,
                ceiling_copy_bytes=16 << 20,
            )
        cpu = device == "cpu"
        return cls(
            models=models or tuple(model_names()),
            tokens=(1, 16, 64, 256, 1024) if cpu else (1, 16, 64, 256, 1024, 4096, 16384),
            contexts=(256, 1024) if cpu else (512, 2048, 8192),
            batches=(1, 4) if cpu else (1, 8, 32),
            scale=4 if cpu else 1,
            repeats=5 if cpu else 20,
            ceiling_gemm=1024 if cpu else 8192,
            ceiling_copy_bytes=(64 << 20) if cpu else (1 << 30),
        )


@dataclass(kw_only=True)
class Measurements:
    """Raw medians (seconds) collected by :func:`measure`."""

    gemm: list[tuple[int, int, int, float]] = field(default_factory=list)
    attention: list[tuple[float, float]] = field(default_factory=list)
    expert: list[tuple[int, int, int, int, float]] = field(default_factory=list)  # m, E, h, i, t
    permute: list[tuple[float, float]] = field(default_factory=list)  # bytes, t
    nccl: list[tuple[str, int, float, float]] = field(default_factory=list)
    copy_bw: float = 0.0
    gemm_flops: float = 0.0
    tables: dict[str, list[dict]] = field(default_factory=dict)  # kernel rows, ``ours_s`` added
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (job, why): see skippable


Job = tuple[str, Callable[[], None]]


def jobs(sizes: Sizes, device: torch.device, meas: Measurements, seed: int = 0) -> list[Job]:
    """Every measurement as a labelled closure (so a progress bar knows the total)."""
    gen = torch.Generator().manual_seed(seed)
    r = sizes.repeats
    out: list[Job] = [
        (
            "copy ceiling",
            lambda: setattr(
                meas,
                "copy_bw",
                mb.copy_bandwidth(sizes.ceiling_copy_bytes, device=device, gen=gen, repeats=r),
            ),
        ),
        (
            "GEMM ceiling",
            lambda: setattr(
                meas,
                "gemm_flops",
                mb.gemm_ceiling(sizes.ceiling_gemm, device=device, gen=gen, repeats=r),
            ),
        ),
    ]
    for name in sizes.models:
        model = load_model(name)
        for m, n, k in model_gemms(model, list(sizes.tokens), sizes.scale):
            out.append(
                (
                    f"{name} gemm {m}x{n}x{k}",
                    lambda m=m, n=n, k=k: meas.gemm.append(
                        (m, n, k, mb.bench_gemm(m, n, k, device=device, gen=gen, repeats=r))
                    ),
                )
            )
        for s in attention_shapes(model, list(sizes.contexts), list(sizes.batches), sizes.scale):
            out.append(
                (
                    f"{name} sdpa q{s.q_len} ctx{s.ctx_len}",
                    lambda s=s: meas.attention.append(
                        (s.macs, mb.bench_attention(s, device=device, gen=gen, repeats=r))
                    ),
                )
            )
        out += _expert_jobs(name, sizes, device, gen, meas)
    return out + _table_jobs(sizes, device, gen, meas)


def _table_jobs(
    sizes: Sizes, device: torch.device, gen: torch.Generator, meas: Measurements
) -> list[Job]:
    """Own kernels at the kernel tables' shapes (CUDA, full run) or CPU-sized ones."""
    from moeplan.profiling import tables

    rows = (
        tables.table_rows()
        if device.type == "cuda" and sizes.scale == 1 and sizes.repeats > 3
        else tables.small_rows()
    )
    reps = min(sizes.repeats, 10 if device.type == "cuda" else 2)

    def one(op: str, rs: list[dict]) -> None:
        got = tables.measure_rows({op: rs}, device=device, gen=gen, repeats=reps)[op]
        meas.tables.setdefault(op, []).extend(got)

    out: list[Job] = []
    for op, rs in rows.items():
        step = 40 if op == "moe" else 20
        for j in range(0, len(rs), step):
            out.append(
                (
                    f"{op} rows {j}-{j + len(rs[j : j + step]) - 1}",
                    lambda op=op, chunk=rs[j : j + step]: one(op, chunk),
                )
            )
    return out


def _expert_jobs(
    name: str, sizes: Sizes, device: torch.device, gen: torch.Generator, meas: Measurements
) -> list[Job]:
    model = load_model(name)
    h = -(-model.hidden_size // sizes.scale)
    i = -(-model.moe_intermediate_size // sizes.scale)
    local = max(1, min(8, model.num_experts // max(1, sizes.scale)))  # experts on one GPU
    out: list[Job] = []
    for t in sizes.tokens:
        m = tokens_per_expert(model, t)
        out.append(
            (
                f"{name} experts {local}x{m}",
                lambda m=m: meas.expert.append(
                    (
                        m,
                        local,
                        h,
                        i,
                        mb.bench_expert_ffn(
                            m, local, h, i, device=device, gen=gen, repeats=sizes.repeats
                        ),
                    )
                ),
            )
        )
        nbytes = float(t * model.top_k * h * mb.bench_dtype(device).itemsize)
        out.append(
            (
                f"{name} permute {t}x{model.top_k}",
                lambda t=t, nbytes=nbytes: meas.permute.append(
                    (
                        nbytes,
                        mb.bench_permutation(
                            t,
                            model.top_k,
                            model.num_experts,
                            h,
                            device=device,
                            gen=gen,
                            repeats=sizes.repeats,
                        ),
                    )
                ),
            )
        )
    return out


def local_cluster(device: torch.device, meas: Measurements) -> ClusterSpec:
    """A one-GPU cluster whose datasheet numbers are the measured ceilings."""
    cuda = device.type == "cuda"
    name = torch.cuda.get_device_name(device) if cuda else "cpu"
    props = torch.cuda.get_device_properties(device) if cuda else None
    mem = props.total_memory if props is not None else 1 << 34
    link = LinkSpec(kind="local", bw=max(meas.copy_bw / 2, 1.0), latency=0.0)
    return ClusterSpec(
        name=f"local-{device.type}",
        num_nodes=1,
        gpus_per_node=1,
        gpu=GPUSpec(
            name=name,
            flops_bf16=max(meas.gemm_flops, 1.0),
            mem_bytes=float(mem),
            mem_bw=max(meas.copy_bw, 1.0),
            # what the card itself reports (the rest of its record stays unstated: GPUSpec)
            compute_capability=f"{props.major}.{props.minor}" if props is not None else None,
            sm_count=props.multi_processor_count if props is not None else None,
            nccl=cuda,
        ),
        intra=link,
        inter=link,
    )


def _fit_alpha_beta(
    op: str, rows: list[tuple[float, float]], seed: int
) -> tuple[AlphaBeta | None, FitRow | None]:
    if len(rows) < 3:
        return None, None
    x, y = (np.asarray(v, float) for v in zip(*rows, strict=True))
    test = heldout_mask(len(y), seed)
    fit = ~test if (~test).sum() >= 2 else np.ones_like(test)
    model = AlphaBeta.fit(x[fit], y[fit])
    q = quality(model.predict(x[fit]), y[fit], model.predict(x[test]), y[test])
    return model, FitRow(op=op, num_gpus=1, quality=q)


def _fit_gemm(meas: Measurements, seed: int) -> tuple[Roofline, list[FitRow]]:
    m, n, k, t = (np.asarray(v, float) for v in zip(*meas.gemm, strict=True))
    test = heldout_mask(len(t), seed)
    guess = (float(t.min()), max(meas.gemm_flops, 1.0), max(meas.copy_bw, 1.0))
    model = Roofline.fit(m[~test], n[~test], k[~test], t[~test], guess=guess)
    pred = model.predict(m, n, k)
    q = quality(pred[~test], t[~test], pred[test], t[test])
    return model, [FitRow(op="gemm", num_gpus=1, scope="model shapes", quality=q)]


def fit(
    meas: Measurements, name: str, source: str, cluster: ClusterSpec, seed: int = 0
) -> tuple[HardwareProfile, list[FitRow]]:
    """Fit the profile from measurements; quality per fit (see module docstring)."""
    gemm_model, report = _fit_gemm(meas, seed)
    attn, attn_row = _fit_alpha_beta("attention", meas.attention, seed + 2)
    perm, perm_row = _fit_alpha_beta("permute", meas.permute, seed + 3)
    report += [r for r in (attn_row, perm_row) if r is not None]
    colls = {}
    if meas.nccl:
        op, ng, nb, lat = (np.asarray(v) for v in zip(*meas.nccl, strict=True))
        colls, nccl_rows = fit_nccl(
            NcclRows(
                op=op, num_gpus=ng.astype(int), nbytes=nb.astype(float), latency=lat.astype(float)
            ),
            seed,
        )
        report += nccl_rows
    kernels = None
    if meas.tables:
        kernels = fit_rows(meas.tables, lambda op, r: float(r["ours_s"]), seed)
        report += [
            FitRow(op=f"{k} (own kernels)", num_gpus=1, scope="whole shapes held out", quality=q)
            for k, q in kernels.quality.items()
        ]
    profile = HardwareProfile(
        name=name,
        source=source,
        gemm=gemm_model,
        attention=attn,
        collectives=colls,  # type: ignore[arg-type]
        kernels=kernels,
    )
    cm = CostModel(cluster, profile)
    if meas.expert:
        pred = [
            cm.grouped_gemm(mm, 2 * i, h, e) + cm.grouped_gemm(mm, h, i, e)
            for mm, e, h, i, _ in meas.expert
        ]
        y = [row[-1] for row in meas.expert]
        report.append(
            FitRow(
                op="expert_ffn",
                num_gpus=1,
                scope="predicted from gemm",
                quality=quality(pred, y, pred, y),
            )
        )
    qual = {r.op if r.num_gpus == 1 else f"{r.op}/{r.num_gpus}": r.quality for r in report}
    object.__setattr__(profile, "quality", qual)
    return profile, report


def skippable(err: BaseException) -> str | None:
    """Why one measurement can be skipped without spoiling the rest (a shape larger than this
    GPU's memory, or one no fused attention kernel takes: a preset with head_dim 512, say),
    or ``None`` for any other error, which ends the run."""
    if isinstance(err, torch.cuda.OutOfMemoryError):
        return "out of GPU memory at this shape"
    if isinstance(err, RuntimeError) and "No available kernel" in str(err):
        return "no fused attention kernel for this shape"
    return None


def run_calibration(
    device: str,
    *,
    quick: bool,
    seed: int = 0,
    models: tuple[str, ...] | None = None,
    name: str | None = None,
    on_job: Callable[[str], None] | None = None,
    on_plan: Callable[[int], None] | None = None,
) -> tuple[HardwareProfile, list[FitRow], Measurements, ClusterSpec]:
    """Measure everything on ``device`` and fit. ``on_plan(n)``/``on_job(label)``: progress."""
    dev = resolve_device(device)
    sizes = Sizes.preset(device, quick, models)
    meas = Measurements()
    todo = jobs(sizes, dev, meas, seed)
    if on_plan:
        on_plan(len(todo))
    for label, job in todo:
        try:
            job()
        except (RuntimeError, torch.cuda.OutOfMemoryError) as err:
            why = skippable(err)
            if why is None:
                raise
            meas.skipped.append((label, why))
            if dev.type == "cuda":
                torch.cuda.empty_cache()
        if on_job:
            on_job(label)
    cluster = local_cluster(dev, meas)
    source = (
        f"moeplan calibrate --device {device}{' --quick' if quick else ''} --seed {seed} "
        f"on {cluster.gpu.name}, torch {torch.__version__}"
    )
    profile, report = fit(meas, name or f"measured-{device}", source, cluster, seed)
    return profile, report, meas, cluster
