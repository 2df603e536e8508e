"""Weight offload to host memory with layer prefetch: which layers' weights live on the host,
what stays on the GPU, and what a forward pass pays to bring them back.

The engines' grouped offloader (SGLang ``OffloaderV2``, python/sglang/srt/utils/offloader.py,
flags ``--offload-group-size``, ``--offload-num-in-group``, ``--offload-prefetch-step``,
``--offload-mode cpu``, read at 0.5.x; vLLM's prefetch offloader, vllm/config/offload.py
``PrefetchOffloadConfig``, the same three flags and meanings) works as follows, and so does
this module:

- **Which layers.** Decoder layer ``i`` (counted from 0 over the layers one pipeline stage
  builds) is offloaded when ``i % group_size >= group_size - num_in_group``: the last
  ``num_in_group`` layers of every group of ``group_size`` (``OffloaderV2.wrap_modules``;
  vLLM's docstring: group 8, 2 in group offloads layers 6, 7, 14, 15, ...).
  ``num_in_group <= group_size`` and ``prefetch_step >= 1`` (vLLM's ``validate_offload_config``).
- **What moves.** Of an offloaded layer, the routed experts' weights held by the GPU: SGLang's
  DeepSeek model hands the offloader ``layer.mlp.experts`` with the whitelist ``w13_weight``,
  ``w2_weight`` and, for NVFP4, their block scales; a dense layer's MLP is no ``FusedMoE`` and
  moves nothing (python/sglang/srt/models/deepseek_v2.py ``offloader_kwargs``). Priced: the
  expert bytes of :func:`layer_bytes` (the model's expert dtype, scales included).
- **Memory.** On the GPU stay every other weight plus the offloaded layers in flight: after
  offloaded layer ``k`` computes, the offloader starts loading layer ``k + prefetch_step``
  and only then drops ``k`` (``_on_forward_end``: ``start_onload`` before ``offload``), so at
  most ``prefetch_step + 1`` offloaded layers are on the GPU at once: the prefetch buffers are
  ``min(prefetch_step + 1, m)`` times the largest offloaded layer (``m`` offloaded layers).
- **Time.** Two serial streams. The compute stream runs the layers in order; an offloaded
  layer waits for its copy (``wait_and_get_device_tensors``: ``_load_event.wait()``). The copy
  stream (``alt_stream``) starts the copy of offloaded layer ``k + p`` when layer ``k``'s
  compute ends (``alt_stream.wait_stream(current_stream)``) and after the copy before it;
  a copy takes the layer's bytes over the host link (:attr:`moeplan.specs.GPUSpec.host_link_bw`,
  one direction: host to device). The index wraps (``(index + p) % m``): the first ``p``
  layers of the next forward pass load during the last layers of this one and the work
  after them (final norm, lm-head). :func:`offloaded_span` runs this recurrence over repeated
  forward passes and returns the steady pass: each window, from a copy's start to its layer,
  costs ``max(compute of the layers in between, transfer)``. Closed forms: when every
  window's compute covers its copy the pass is the compute alone; with ``p = 1`` a copy
  cannot start before the previous offloaded layer computed, so the pass is the sum over
  offloaded layers of ``max(compute between the two, copy) + the layer's own compute``;
  when the copies dominate and ``p >= 2`` they run back to back and the pass is their sum.

Not priced: the copies' share of the GPU's HBM bandwidth (a few percent of a layer's reads at
the host link's rate), and two-batch overlap's interleaving inside a layer (a layer's time is
its share of the forward pass). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from moeplan.errors import MoeplanError, require
from moeplan.specs import GPUSpec, ModelSpec

#: the flag value that asks for the smallest offload that fits, and the one that forbids it
AUTO, OFF = "auto", "off"
#: steady state: forward passes the recurrence runs (its period settles within two)
PASSES = 6


@dataclass(frozen=True, slots=True)
class WeightOffload:
    """The engine's three offload flags (module docstring)."""

    group_size: int
    num_in_group: int
    prefetch_step: int = 1

    def __post_init__(self) -> None:
        g, n, p = self.group_size, self.num_in_group, self.prefetch_step
        flag = f"--weight-offload ({g}:{n}:{p})"
        require(isinstance(g, int) and g >= 1, f"{flag}: the group size must be an integer >= 1")
        require(
            isinstance(n, int) and 1 <= n <= g,
            f"{flag}: the layers offloaded per group must be in 1..{g}, the group size "
            "(vllm/config/offload.py validate_offload_config)",
        )
        require(isinstance(p, int) and p >= 1, f"{flag}: the prefetch step must be >= 1")

    @classmethod
    def parse(cls, text: str) -> WeightOffload:
        """``GROUP:NUM[:PREFETCH]`` (prefetch 1 when left out), one-line error otherwise."""
        parts = text.split(":")
        ok = 2 <= len(parts) <= 3 and all(p.isdigit() for p in parts)
        if not ok:
            raise MoeplanError(
                f"--weight-offload ({text!r}) must be auto, off or GROUP:NUM[:PREFETCH] "
                "(the engine's --offload-group-size, --offload-num-in-group, "
                "--offload-prefetch-step), e.g. 2:1:1"
            )
        return cls(*(int(p) for p in parts))

    @property
    def label(self) -> str:
        return f"{self.group_size}:{self.num_in_group}:{self.prefetch_step}"

    def layers(self, num_layers: int) -> tuple[int, ...]:
        """The offloaded decoder layers of a stage of ``num_layers`` layers (module docstring)."""
        g, n = self.group_size, self.num_in_group
        return tuple(i for i in range(num_layers) if i % g >= g - n)

    def check(self, model: ModelSpec, gpu: GPUSpec) -> None:
        """One line when the model or the GPU cannot run this offload: a group larger than
        the model's layers (it would offload layers the model does not have), no MoE layer
        offloaded (nothing moves), no host-link figure in the GPU's record, or a prefetch
        step past the offloaded layers."""
        n = model.num_layers
        require(
            self.group_size <= n,
            f"--weight-offload ({self.label}): a group of {self.group_size} layers is more "
            f"than {model.name}'s {n} decoder layers",
        )
        moved = [i for i in self.layers(n) if model.is_moe_layer(i)]
        require(
            bool(moved),
            f"--weight-offload ({self.label}) offloads layers {list(self.layers(n))}: no MoE "
            "layer, so no weights move (the engines offload the routed experts)",
        )
        require(
            self.prefetch_step <= len(self.layers(n)),
            f"--weight-offload ({self.label}): prefetch step {self.prefetch_step} is more than "
            f"the {len(self.layers(n))} offloaded layers",
        )
        require(
            gpu.host_link_bw is not None,
            f"--weight-offload ({self.label}): {gpu.name} has no host-link bandwidth in its "
            "record (host_link_bw), so offloaded weights cannot be priced",
        )


def layer_bytes(model: ModelSpec, layer: int, local_experts: float, moe_tp: int = 1) -> float:
    """Bytes one GPU moves for offloaded layer ``layer``: its routed experts (``local_experts``
    of them, each split ``moe_tp`` ways) at the experts' bytes per weight; 0 for a dense
    layer (module docstring)."""
    if not model.is_moe_layer(layer):
        return 0.0
    return local_experts * model.expert_params / moe_tp * model.quant.experts.bytes_per_weight


@dataclass(frozen=True, kw_only=True, slots=True)
class OffloadMemory:
    """Bytes per GPU: ``offloaded`` (weights held on the host), ``buffers`` (the prefetch
    buffers on the GPU), and the offloaded layers."""

    offloaded: float
    buffers: float
    layers: tuple[int, ...]

    @property
    def saved(self) -> float:
        """What the offload takes off the GPU (negative when the buffers outweigh it)."""
        return self.offloaded - self.buffers


def offload_memory(
    model: ModelSpec, offload: WeightOffload, layers: range, local_experts: float, moe_tp: int = 1
) -> OffloadMemory:
    """:class:`OffloadMemory` of a stage holding ``layers`` (offloaded indices counted from
    the stage's first layer, as the engine enumerates its stage's layers)."""
    off = tuple(layers[i] for i in offload.layers(len(layers)))
    sizes = [layer_bytes(model, i, local_experts, moe_tp) for i in off]
    in_flight = min(offload.prefetch_step + 1, len(off))
    return OffloadMemory(
        offloaded=sum(sizes), buffers=in_flight * max(sizes, default=0.0), layers=off
    )


def offloaded_span(
    compute: Sequence[float], transfer: Sequence[float], offloaded: Sequence[int], prefetch: int
) -> float:
    """Seconds of one steady forward pass whose layers compute for ``compute`` (in order; a
    trailing entry for the work after the last layer) when the layers ``offloaded`` (indices
    into ``compute``, ascending) each wait for a copy of ``transfer`` seconds (one per
    offloaded layer) prefetched ``prefetch`` offloaded layers ahead (module docstring)."""
    m = len(offloaded)
    require(len(transfer) == m, "one transfer time per offloaded layer")
    if m == 0:
        return float(sum(compute))
    require(1 <= prefetch <= m, f"prefetch ({prefetch}) must be in 1..{m}")
    slot = {layer: j for j, layer in enumerate(offloaded)}
    ready = dict.fromkeys(range(prefetch), 0.0)  # loaded before the first pass
    t = copy_free = 0.0
    ends: list[float] = []
    for r in range(PASSES):
        for i, c in enumerate(compute):
            j = slot.get(i)
            if j is None:
                t += c
                continue
            k = r * m + j
            t = max(t, ready.pop(k)) + c
            nxt = k + prefetch  # start_onload of (index + p) % m, after this layer's compute
            copy_free = max(copy_free, t) + transfer[nxt % m]
            ready[nxt] = copy_free
        ends.append(t)
    return ends[-1] - ends[-2]
