"""HardwareProfile: fitted α-β coefficients per operation, with fit quality and provenance.

A profile holds, for one GPU type:

- ``gemm``: a bf16 GEMM model called as ``gemm(m, n, k)``: a :class:`Roofline` fitted to
  measured latencies, or FinDEP's :class:`AlphaBeta` over ``x = m*n*k`` (Eq. 7).
- ``attention``: optional α-β over ``x = q_tokens * keys * heads * (d_k + d_v)`` (FinDEP
  Eq. 8); when absent the cost model uses a roofline from the GPU's peak numbers.
- ``collectives``: ``{op: {num_gpus: model}}`` for one node, ``x`` = message bytes in the
  nccl-tests convention (see :mod:`moeplan.cost.collectives`).
- ``a2e``: FinDEP's A2E/E2A α-β per ``(ag, eg)``, ``x`` = bytes received per expert GPU.
- ``kernels``: optional :class:`~moeplan.cost.kernel_fits.KernelFits` — the fused-MoE call and
  the attention core (prefill, decode) fitted to this machine's own kernels at the measured
  tables' shapes (``moeplan calibrate --device cuda``); when present the cost model prices
  those operations with them instead of ``gemm``/``attention``.
- ``quality``: a :class:`FitQuality` per fitted key (``"gemm"``, ``"all_reduce/8"``...).

Serialized as JSON (``to_dict`` / ``from_dict``); shipped profiles live in
``moeplan/cost/profiles/`` and are loaded by :func:`moeplan.cost.load_profile`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from moeplan.cost.kernel_fits import KernelFits
from moeplan.cost.linear import AlphaBeta, FitQuality, Piecewise, Roofline, model_from_dict
from moeplan.errors import MoeplanError

GemmModel = Roofline | AlphaBeta
CommModel = Piecewise | AlphaBeta

SCHEMA = "moeplan.profile/1"


@dataclass(frozen=True, kw_only=True)
class HardwareProfile:
    """Fitted cost coefficients of one GPU type (times in seconds, sizes in bytes)."""

    name: str
    source: str
    gemm: GemmModel
    attention: AlphaBeta | None = None
    collectives: dict[str, dict[int, CommModel]] = field(default_factory=dict)
    a2e: dict[tuple[int, int], AlphaBeta] = field(default_factory=dict)
    quality: dict[str, FitQuality] = field(default_factory=dict)
    kernels: KernelFits | None = None

    def collective(self, op: str, num_gpus: int) -> CommModel | None:
        return self.collectives.get(op, {}).get(num_gpus)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "name": self.name,
            "source": self.source,
            "gemm": self.gemm.to_dict(),
            "attention": self.attention.to_dict() if self.attention else None,
            "collectives": {
                op: {str(n): m.to_dict() for n, m in by_n.items()}
                for op, by_n in self.collectives.items()
            },
            "a2e": [{"ag": ag, "eg": eg, **m.to_dict()} for (ag, eg), m in self.a2e.items()],
            "quality": {k: q.to_dict() for k, q in self.quality.items()},
            **({"kernels": self.kernels.to_dict()} if self.kernels is not None else {}),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HardwareProfile:
        if not isinstance(d, dict) or d.get("schema") != SCHEMA:
            raise MoeplanError(
                f"profile.schema ({d.get('schema') if isinstance(d, dict) else d!r})"
                f" must be {SCHEMA!r}"
            )
        try:
            gemm = model_from_dict(d["gemm"])
            attn = model_from_dict(d["attention"]) if d.get("attention") else None
            colls = {
                op: {int(n): model_from_dict(m) for n, m in by_n.items()}
                for op, by_n in d.get("collectives", {}).items()
            }
            a2e = {
                (int(e["ag"]), int(e["eg"])): AlphaBeta(alpha=e["alpha"], beta=e["beta"])
                for e in d.get("a2e", [])
            }
            qual = {k: FitQuality(**q) for k, q in d.get("quality", {}).items()}
            kernels = KernelFits.from_dict(d["kernels"]) if d.get("kernels") else None
        except (KeyError, TypeError, ValueError) as err:
            raise MoeplanError(f"profile[{d.get('name')}] is malformed: {err}") from None
        if not isinstance(gemm, Roofline | AlphaBeta):
            raise MoeplanError("profile.gemm must be a roofline or alpha_beta model")
        return cls(
            name=str(d["name"]),
            source=str(d.get("source", "")),
            gemm=gemm,
            attention=attn if isinstance(attn, AlphaBeta) else None,
            collectives=colls,  # type: ignore[arg-type]
            a2e=a2e,
            quality=qual,
            kernels=kernels,
        )


def findep_a6000_profile() -> HardwareProfile:
    """FinDEP's published A6000 coefficients (Fig. 7), converted to seconds.

    The paper gives α in milliseconds and β in milliseconds per unit of ``x``:
    ``t_gm(x)``, ``x = m*n*k`` multiply-accumulates (Eq. 1); ``t_attn(y)``,
    ``y = m_a * S^2 * n_h * (d_k + d_v)`` (Eq. 1); ``t_c(z)``, ``z`` = bytes received per
    expert GPU (Eq. 9). Conversion: α_s = α_ms * 1e-3, β_s = β_ms * 1e-3.
    """
    ms = 1e-3
    return HardwareProfile(
        name="findep-a",
        source="FinDEP paper Fig. 7 (RTX A6000 micro-benchmarks), converted from ms to s",
        gemm=AlphaBeta(alpha=0.17 * ms, beta=8.59e-11 * ms),
        attention=AlphaBeta(alpha=0.15 * ms, beta=1.54e-11 * ms),
        a2e={
            (1, 7): AlphaBeta(alpha=0.10 * ms, beta=9.61e-7 * ms),
            (2, 6): AlphaBeta(alpha=0.01 * ms, beta=1.28e-6 * ms),
            (4, 4): AlphaBeta(alpha=0.37 * ms, beta=2.55e-6 * ms),
        },
    )
