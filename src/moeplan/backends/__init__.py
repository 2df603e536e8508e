"""Serving-engine backends: one record per engine of everything that engine decides.

:func:`backend` returns an engine's :class:`~moeplan.backends.base.EngineBackend` by its
``--engine`` name; callers ask it (scheduler defaults, memory budget, DeepEP and attention-DP
gates, kernel tables, launch flags) instead of comparing engine names — no module outside
this package tests an engine's name (``tests/test_architecture_engines.py``).

Adding an engine is one module plus one line here:

1. ``moeplan/backends/<engine>.py`` holding one :class:`EngineBackend` (or a subclass that
   overrides the decisions it makes differently: ``default_chunk``, ``chunk_args``,
   ``knob_args``, ...), every fact with its source;
2. its instance in :data:`BACKENDS` below.

A field left at its default is a part the engine lacks (no scheduler model: not simulated;
no ``launch_module``: not exported), and every caller refuses it with one line.

Capabilities (what a release runs per architecture family, GPU and checkpoint, each fact with
the engine source line it was read from) are a backend's ``caps`` table
(:mod:`moeplan.backends.capabilities`; :mod:`.sglang_caps`, :mod:`.vllm_caps`). The queries,
``version`` None meaning the pinned release and any other version taking the nearest stated
one; each blocker is one line naming rule and source, None when the engine runs it:

- ``deepep_blocker(architecture, moe_dtype, version)``: a DeepEP MoE path for the family with
  experts of that kernel dtype (:func:`moeplan.cost.a2a.a2a_backends` adds the hardware rules);
- ``capability_blocker("attn_dp" | "tbo" | "mtp" | "deepep", architecture, version)``,
  ``tbo_blocker``, ``mtp_blocker``;
- ``mtp_running_cap(version)``: ``(cap, source)`` of the instance's running requests under
  speculative decoding, or None;
- ``moe_kernel_blocker(moe_dtype, gpu, version)``: no MoE kernel a table prices on that GPU;
- ``default_kv_dtype(architecture, checkpoint_fp8, gpu, version)``: what ``auto`` stores.
"""

from __future__ import annotations

from moeplan.backends.base import EngineBackend
from moeplan.backends.sglang import SGLANG
from moeplan.backends.trtllm import TRTLLM
from moeplan.backends.vllm import VLLM
from moeplan.errors import MoeplanError

#: every engine by its ``--engine`` name, in the order the CLI lists them
BACKENDS: dict[str, EngineBackend] = {b.name: b for b in (SGLANG, VLLM, TRTLLM)}
#: the engine a command models when none is given
DEFAULT_ENGINE = SGLANG.name
#: the cost commands' ``--engine`` value for "no engine's kernel tables" (not an engine)
NO_ENGINE = "none"


def names() -> tuple[str, ...]:
    """Every engine's name (the CLI's ``--engine`` choices of the cost commands)."""
    return tuple(BACKENDS)


def simulated() -> tuple[str, ...]:
    """The engines with a scheduler model (``plan`` / ``serve-sim`` ``--engine``)."""
    return tuple(n for n, b in BACKENDS.items() if b.scheduler is not None)


def exported() -> tuple[str, ...]:
    """The engines with a launch export (``plan``'s launch folders, ``strategy --export``)."""
    return tuple(n for n, b in BACKENDS.items() if b.launch_module is not None)


def kernel_tables() -> tuple[str, ...]:
    """The engine names of the measured kernel tables."""
    return tuple(dict.fromkeys(b.kernel_table for b in BACKENDS.values()))


def backend(name: str) -> EngineBackend:
    """The backend of engine ``name``; an unknown name is one line."""
    b = BACKENDS.get(name)
    if b is None:
        raise MoeplanError(f"engine ({name!r}) must be one of {', '.join(BACKENDS)}")
    return b


def priced_engine(cost_engine: str, engine: str) -> str | None:
    """The engine whose measured kernel tables price a run: ``engine``, or None when
    ``--cost-engine`` is :data:`NO_ENGINE` (the calibrated GEMM/NCCL model alone)."""
    return None if cost_engine == NO_ENGINE else engine


def backend_or_none(name: str | None) -> EngineBackend | None:
    """The backend of ``name``, or None for no engine (``None``, :data:`NO_ENGINE`, or a
    name no backend has)."""
    return BACKENDS.get(name) if name is not None else None


__all__ = [
    "DEFAULT_ENGINE",
    "NO_ENGINE",
    "BACKENDS",
    "EngineBackend",
    "backend",
    "backend_or_none",
    "exported",
    "kernel_tables",
    "names",
    "priced_engine",
    "simulated",
]
