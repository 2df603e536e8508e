"""What ``moeplan run`` can start on this machine, checked before any process is spawned.

Every rank is a Python process with PyTorch and a gloo/NCCL group; a world of 64 on a 2-core
machine starts 66 processes whose imports alone take gigabytes, and a tampered plan (a model
whose sizes are absurd) has every rank try to allocate far more than the machine holds. Two
lower bounds, each compared with what the machine has; beyond either the run is refused with
one line (exit 2):

- ranks: at most :data:`MAX_RANKS_PER_CORE` per CPU core of this machine;
- memory: :data:`RANK_BASE_BYTES` per rank plus the model's weights held once across the
  world (:func:`weight_bytes`, float32) plus one copy of the input activations, against the
  memory the kernel reports available (``MemAvailable``).

Both are lower bounds on what the run needs: a run they refuse could not have finished.
"""

from __future__ import annotations

import os
from typing import Any

from moeplan.errors import MoeplanError

#: Ranks per CPU core at most: the CPU test runs use 8 ranks on 2 cores (4 per core) and
#: finish; at 8 per core gloo's collectives already wait on the scheduler for seconds.
MAX_RANKS_PER_CORE = 8
#: Resident memory of one rank before any tensor: Python with ``torch`` and
#: ``torch.distributed`` imported, measured 218 MiB (ru_maxrss, torch 2.13, CPU build).
RANK_BASE_BYTES = 200 * 2**20
FP32 = 4  # bytes per weight and activation on the runtime's CPU path


def weight_bytes(cfg: Any) -> int:
    """Bytes of the weights of ``cfg`` (a :class:`moeplan.runtime.config.MoEConfig`) stored
    once: attention (4 h^2 per layer), routed experts (3 h I each), shared and dense MLPs."""
    h, layers = int(cfg.hidden_size), int(cfg.num_layers)
    per_layer = 4 * h * h + int(cfg.num_experts) * 3 * h * int(cfg.moe_intermediate_size)
    per_layer += 3 * h * int(cfg.shared_intermediate_size) + h * int(cfg.num_experts)
    dense = len(cfg.dense_layers) * 3 * h * int(cfg.dense_intermediate_size)
    return FP32 * (layers * per_layer + dense)


def available_bytes() -> int | None:
    """Memory available to new processes (``MemAvailable``), ``None`` when unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_capacity(
    world: int, cfg: Any, tokens: int, *, cores: int | None = None, available: int | None = None
) -> None:
    """Refuse (one line) a run this machine cannot hold (module docstring)."""
    cores = cores if cores is not None else (os.cpu_count() or 1)
    if world > MAX_RANKS_PER_CORE * cores:
        raise MoeplanError(
            f"--nproc ({world}) must be at most {MAX_RANKS_PER_CORE} ranks per CPU core "
            f"({MAX_RANKS_PER_CORE * cores} on this machine's {cores} cores)"
        )
    need = world * RANK_BASE_BYTES + weight_bytes(cfg) + FP32 * tokens * int(cfg.hidden_size)
    have = available if available is not None else available_bytes()
    if have is not None and need > have:
        raise MoeplanError(
            f"run needs at least {need / 2**30:,.1f} GiB ({world} ranks x "
            f"{RANK_BASE_BYTES / 2**20:.0f} MiB + weights {weight_bytes(cfg) / 2**30:,.1f} GiB "
            f"+ activations); this machine has {have / 2**30:,.1f} GiB available"
        )
