"""Cost models: α-β fits, compute/attention/expert/collective times, memory per GPU.

Pure numpy/scipy (no torch, no user-file I/O). Shipped :class:`HardwareProfile` JSONs in
``moeplan/cost/profiles/`` are package data read by :func:`load_profile`.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

from moeplan.cost.collectives import COLLECTIVE_OPS, collective_time, ring_time
from moeplan.cost.kerneldb import KernelDB
from moeplan.cost.linear import AlphaBeta, FitQuality, Piecewise, Roofline
from moeplan.cost.memory import MemoryBreakdown
from moeplan.cost.model import CostModel
from moeplan.cost.profile import HardwareProfile, findep_a6000_profile
from moeplan.errors import MoeplanError
from moeplan.specs import ClusterSpec

__all__ = [
    "COLLECTIVE_OPS",
    "AlphaBeta",
    "CostModel",
    "FitQuality",
    "HardwareProfile",
    "MemoryBreakdown",
    "Piecewise",
    "Roofline",
    "collective_time",
    "cost_model_for",
    "load_profile",
    "profile_names",
    "ring_time",
]


def profile_names() -> list[str]:
    names = [
        p.name.removesuffix(".json")
        for p in resources.files(__package__).joinpath("profiles").iterdir()
        if p.name.endswith(".json")
    ]
    return sorted(set(names) | {"findep-a"})


@cache
def load_profile(name: str) -> HardwareProfile:
    """A shipped profile: ``h100_sxm``, ``h200_sxm``, ``a100_sxm`` (fitted) or ``findep-a``."""
    if name == "findep-a":
        return findep_a6000_profile()
    path = resources.files(__package__).joinpath("profiles", f"{name}.json")
    if not path.is_file():
        raise MoeplanError(
            f"profile ({name!r}) is not shipped; choose one of {', '.join(profile_names())}"
        )
    return HardwareProfile.from_dict(json.loads(path.read_text(encoding="utf-8")))


def cost_model_for(
    cluster: ClusterSpec,
    profile: str | None = None,
    engine: str | None = None,
    kernels: KernelDB | None = None,
) -> CostModel:
    """The cost model of ``cluster``: the named profile, else the cluster's own when one is
    shipped, else roofline.

    ``profile='roofline'`` forces the datasheet roofline. ``engine`` (sglang, vllm, trtllm)
    prices fused MoE, attention/MLA and intra-node all-reduce/all-to-all from the kernel
    database ``kernels`` (:mod:`moeplan.cost.kerneldb`, loaded by the I/O layer:
    :func:`moeplan.kernel_tables.kernel_db`; :func:`moeplan.kernel_tables.engine_cost_model`
    does both); ``None`` keeps the model without it.
    """
    name = profile if profile is not None else cluster.profile
    if profile is None and name is not None and name not in profile_names():
        name = None  # the cluster's measurement set ships no fitted profile (Blackwell): roofline
    if name is None or name == "roofline":
        return CostModel(cluster, engine=engine, kernels=kernels)
    return CostModel(cluster, load_profile(name), engine=engine, kernels=kernels)
