"""One record per GPU: the cluster presets' ``gpus`` entries, validated on load.

Besides the datasheet rates (``flops_bf16``, ``mem_bytes``, ``mem_bw``) every record states,
each with its source in ``sources`` (one text per field):

- ``compute_capability``: CUDA compute capability ``"major.minor"`` (``null``: not a CUDA
  device, or a GPU the source does not name);
- ``sm_count``: streaming multiprocessors (what kernel grids fill; waves of blocks count
  them); ``sm_clock_mhz``: maximum SM clock (what a kernel's fixed floor scales by), ``null``
  where no like-for-like figure is published: the floor of the reference table GPU is kept;
- ``fp8_ratio`` / ``int8_ratio``: dense fp8 / int8 tensor peak over the bf16 peak (1 where
  the tensor cores have no such rate);
- ``measured``: the shipped GEMM/NCCL measurement set of this GPU (``moeplan.measured``) or
  ``null``; ``kernel_tables``: NVIDIA's per-engine kernel tables of this GPU
  (``moeplan.kernel_tables``) or ``null``; ``reference_tables``: the kernel-table GPU whose
  kernel efficiencies this GPU borrows (itself when it has tables);
- ``nccl``: the engines' collectives run NCCL on it (a CUDA GPU); ``deepep``: DeepEP's
  expert-parallel kernels run on it;
- ``fp4_ratio``: dense FP4 tensor peak over the bf16 peak, ``null`` on a GPU without FP4
  tensor cores (everything before Blackwell): :attr:`GPUSpec.fp4_tensor_cores` reads it, and
  with it whether NVFP4 / MXFP4 weights run natively;
- ``host_link_bw``: bytes/s per direction between the GPU and its host's memory (PCIe to
  an x86 host, NVLink-C2C to the Grace CPU of a GB200 / GB300), what weights offloaded to
  the host cross every forward pass (:mod:`moeplan.cost.offload`); ``null`` where the
  record has no figure: weight offload is refused on that GPU.

The SM version the engines dispatch kernels on (100 for B200 / GB200, 103 for B300 / GB300)
is the compute capability's (:attr:`GPUSpec.sm_version`).

A record missing a field, or with one of the wrong type, is a one-line error naming the GPU
and the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from moeplan.errors import MoeplanError, show
from moeplan.specs.cluster import GPUSpec

#: fields of a GPU record beyond the datasheet rates, and whether ``null`` is allowed
RECORD_FIELDS: dict[str, bool] = {
    "compute_capability": True,
    "sm_count": False,
    "sm_clock_mhz": True,
    "fp8_ratio": False,
    "int8_ratio": False,
    "measured": True,
    "kernel_tables": True,
    "reference_tables": False,
    "nccl": False,
    "deepep": False,
    "fp4_ratio": True,
    "host_link_bw": True,
}
RATES = ("flops_bf16", "mem_bytes", "mem_bw")
_BOOLS = ("nccl", "deepep")
_TEXTS = ("compute_capability", "measured", "kernel_tables", "reference_tables")


def _field(name: str, rec: Mapping[str, Any], key: str) -> Any:
    if key not in rec:
        raise MoeplanError(f"gpus[{name}].{key} is missing: every GPU record states it")
    v = rec[key]
    if v is None:
        if key in RECORD_FIELDS and RECORD_FIELDS[key]:
            return None
        raise MoeplanError(f"gpus[{name}].{key} (null) must be given")
    if key in _BOOLS:
        ok = isinstance(v, bool)
    elif key in _TEXTS:
        ok = isinstance(v, str) and v != ""
    else:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
    if not ok:
        kind = "true or false" if key in _BOOLS else "a text" if key in _TEXTS else "a number > 0"
        raise MoeplanError(f"gpus[{name}].{key} ({show(v)}) must be {kind}")
    return v


def gpu_from_record(name: str, rec: Any) -> GPUSpec:
    """The :class:`GPUSpec` of the preset record ``rec`` (module docstring), checked."""
    if not isinstance(rec, Mapping):
        raise MoeplanError(f"gpus[{name}] ({show(rec)}) must be an object")
    vals = {k: _field(name, rec, k) for k in (*RATES, *RECORD_FIELDS)}
    sources = rec.get("sources")
    if not isinstance(sources, Mapping):
        raise MoeplanError(f"gpus[{name}].sources is missing: one source text per field")
    for k in RECORD_FIELDS:
        if not isinstance(sources.get(k), str) or not sources[k]:
            raise MoeplanError(f"gpus[{name}].sources.{k} is missing: name where it comes from")
    cc = vals["compute_capability"]
    if cc is not None:
        major, _, minor = cc.partition(".")
        if not (major.isdigit() and minor.isdigit()):
            raise MoeplanError(f"gpus[{name}].compute_capability ({cc!r}) must be 'major.minor'")
    return GPUSpec(name=name, **vals)
