"""Timing discipline for micro-benchmarks.

- warm-up calls first (kernel selection, allocator, caches);
- CUDA: one pair of CUDA events around each call, read after ``synchronize``; CPU:
  ``perf_counter`` around each call followed by a synchronize (a no-op on CPU);
- the median over ``repeats`` calls (robust to the other tenants of a shared machine);
- inputs are fresh ``randn`` tensors (never zeros: zeros hit fast paths in some kernels and
  compress well on the wire), in several copies used in rotation so a call does not find the
  previous call's operands in L2 — enough copies to cover ``ROTATE_BYTES`` on CUDA. They are
  drawn on the device itself by a generator seeded from the caller's CPU generator (drawing
  gigabytes of expert weights on the CPU and copying them took longer than timing them).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from moeplan.errors import MoeplanError

ROTATE_BYTES = 256 * 2**20  # 5x the H100's 50 MB L2
MAX_COPIES = 8


def resolve_device(name: str) -> torch.device:
    """``cuda`` or ``cpu``; a missing CUDA device is a user error."""
    if name not in ("cuda", "cpu"):
        raise MoeplanError(f"device ({name}) must be cuda or cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise MoeplanError("device (cuda) is not available on this machine; use --device cpu")
    return torch.device(name)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def copies_for(nbytes: float, device: torch.device) -> int:
    """How many input copies to rotate through (2 on CPU, to save memory)."""
    if device.type != "cuda":
        return 2
    return int(min(MAX_COPIES, max(2, math.ceil(ROTATE_BYTES / max(nbytes, 1.0)))))


def device_generator(gen: torch.Generator, device: torch.device) -> torch.Generator:
    """A generator on ``device`` seeded from ``gen`` (``gen`` itself on CPU)."""
    if device.type == "cpu":
        return gen
    seed = int(torch.randint(0, 2**62, (1,), generator=gen))
    return torch.Generator(device=device).manual_seed(seed)


def randn(
    *shape: int, dtype: torch.dtype, device: torch.device, gen: torch.Generator, scale: float = 1.0
) -> torch.Tensor:
    """``randn(shape) * scale`` drawn on ``device`` (see :func:`device_generator`)."""
    g = device_generator(gen, device)
    t = torch.randn(
        *shape, generator=g, device=device, dtype=torch.float32 if device.type == "cpu" else dtype
    )
    if scale != 1.0:
        t.mul_(scale)
    return t.to(dtype)


def random_inputs(
    shapes: Sequence[tuple[int, ...]],
    *,
    dtype: torch.dtype,
    device: torch.device,
    gen: torch.Generator,
    copies: int | None = None,
) -> list[tuple[torch.Tensor, ...]]:
    """``copies`` sets of fresh ``randn`` tensors of ``shapes``, drawn on ``device``."""
    nbytes = sum(math.prod(s) for s in shapes) * torch.finfo(dtype).bits / 8
    n = copies if copies is not None else copies_for(nbytes, device)
    return [tuple(randn(*s, dtype=dtype, device=device, gen=gen) for s in shapes) for _ in range(n)]


def _graphed(
    fn: Callable[..., Any], inputs: Sequence[tuple[Any, ...]], warmup: int
) -> list[Callable[[], Any]]:
    """One captured CUDA graph of ``fn(*args)`` per input set (warm-up on a side stream)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(max(warmup, 1)):
            fn(*inputs[i % len(inputs)])
    torch.cuda.current_stream().wait_stream(side)
    graphs = []
    for args in inputs:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn(*args)
        graphs.append(g.replay)
    return graphs


def median_time(
    fn: Callable[..., Any],
    inputs: Sequence[tuple[Any, ...]],
    *,
    device: torch.device,
    warmup: int = 3,
    repeats: int = 10,
    graph: bool = False,
) -> float:
    """Median seconds of ``fn(*inputs[i % len(inputs)])`` over ``repeats`` timed calls.

    ``graph=True`` (CUDA only) captures each input set's call in a CUDA graph and times the
    replays: GPU time without the host's launch overhead, as engines run decode batches.
    """
    if repeats < 1:
        raise MoeplanError(f"repeats ({repeats}) must be >= 1")
    if graph and device.type == "cuda":
        calls = _graphed(fn, inputs, warmup)
    else:
        calls = [lambda args=args: fn(*args) for args in inputs]
    for i in range(warmup):
        calls[i % len(calls)]()
    synchronize(device)
    times = []
    for r in range(repeats):
        call = calls[(warmup + r) % len(calls)]
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e-3)
        else:
            t0 = time.perf_counter()
            call()
            synchronize(device)
            times.append(time.perf_counter() - t0)
    return float(np.median(times))
