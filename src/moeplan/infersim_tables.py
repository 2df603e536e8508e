"""Read InferSim's Gated DeltaNet measurements on the H20 shipped in ``moeplan/data/measured/
infersim/`` (I/O layer): a second GPU for the GDN kernels' leave-one-GPU-out error.

From alibaba/InferSim @ f2293da (Apache-2.0, LICENSE in that folder):
``gdn/{decode,prefill}/h20/<conv>-<key heads>-<key dim>-<value heads>-<value dim>.csv``
(InferSim ``mfu/mfu.py`` names them so; heads unsharded, one GPU), times in microseconds.
Decode columns ``batchsize, conv, gdn_update`` (SGLang's ``causal_conv1d_update`` and its fused
recurrent update); prefill ``seq_len, conv, kkt, tril, wu, chunk_gdn, chunk_o`` for one
sequence — the chunked delta rule is the sum of its five kernels. The shipped shape is
Qwen3.5-35B-A3B's (16 key heads, 32 value heads, dims 128, conv 4); InferSim's
``4-16-128-64-128.csv`` (Qwen3.5-122B-A10B) repeats those very numbers and is not shipped.
"""

from __future__ import annotations

import csv
from importlib import resources
from pathlib import Path

import numpy as np

from moeplan.cost.kerneldb import KernelTable
from moeplan.errors import MoeplanError

GPU = "h20"
#: the cluster preset of that GPU (its record gives the datasheet device)
CLUSTER = "findep-c"
#: (phase, table column(s) summed, kernel_source of the H100 tables' role)
TABLE_ROLES: dict[str, list[tuple[tuple[str, ...], str]]] = {
    "generation": [(("conv",), "causal_conv1d_update"), (("gdn_update",), "gated_delta_rule")],
    "context": [
        (("conv",), "causal_conv1d_fn"),
        (("kkt", "tril", "wu", "chunk_gdn", "chunk_o"), "chunk_gated_delta_rule"),
    ],
}


def infersim_dir() -> Path:
    return Path(str(resources.files("moeplan").joinpath("data", "measured", "infersim")))


def _shape(name: str) -> dict[str, int]:
    parts = name.split("-")
    if len(parts) != 5 or not all(p.isdigit() for p in parts):
        raise MoeplanError(f"InferSim GDN file {name!r} must be named conv-hk-dk-hv-dv.csv")
    d_conv, hk, dk, hv, dv = (int(p) for p in parts)
    return dict(d_conv=d_conv, num_k_heads=hk, head_k_dim=dk, num_v_heads=hv, head_v_dim=dv)


def gdn_tables(root: Path | None = None) -> list[KernelTable]:
    """The H20 GDN rows as kernel tables (``context_gdn`` / ``generation_gdn``), one
    ``kernel_source`` per role, latency in seconds."""
    root = root or infersim_dir()
    out = []
    for phase, roles in TABLE_ROLES.items():
        for path in sorted(
            (root / "gdn" / ("decode" if phase == "generation" else "prefill") / GPU).glob("*.csv")
        ):
            with path.open(encoding="utf-8") as fh:
                rows = list(csv.DictReader(fh))
            shape = _shape(path.stem)
            n = len(rows)
            x = "batchsize" if phase == "generation" else "seq_len"
            base = {k: np.full(n, v) for k, v in shape.items()}
            if phase == "generation":
                base["batch_size"] = np.array([int(r[x]) for r in rows])
            else:
                base["batch_size"] = np.ones(n, int)
                base["seq_len"] = np.array([int(r[x]) for r in rows])
            for cols, kernel in roles:
                lat = np.array([sum(float(r[c]) for c in cols) for r in rows]) * 1e-6
                out.append(
                    KernelTable(
                        gpu=GPU,
                        engine="sglang",
                        op=f"{phase}_gdn",
                        version="infersim@f2293da",
                        columns={
                            **base,
                            "kernel_source": np.full(n, kernel),
                            "framework": np.full(n, "SGLang"),
                        },  # SGLang's kernels
                        latency=lat,
                        origin=str(path),
                    )  # fmt: skip
                )
    return out


DSA_GPU = "h800"
#: the FlashMLA kernel each phase's rows time: decode its KV-cache decode kernel with sparse
#: indices, prefill its sparse prefill kernel (the one NVIDIA's H100 table times)
DSA_KERNELS = {"decode": "flash_mla_with_kvcache", "prefill": "flash_mla_sparse_fwd"}
DSA_CLUSTER = "h800-sxm-8"


def dsa_tables(root: Path | None = None) -> list[KernelTable]:
    """InferSim's H800 FlashMLA sparse-attention rows (``attn-128-576-2048``: 128 heads,
    576-wide latents, top-2048) as ``dsa_sparse_attn`` rows: decode ``batch_size, kv_len``
    (one query per sequence, KV cache ``kv_dtype``), prefill ``s_q`` queries of one sequence
    each attending its top-k of ``s_kv`` keys (non-causal: InferSim's
    ``flashmla_dsa_prefill.py``; a prefix of ``s_kv`` keys here), bf16 cache."""
    root = root or infersim_dir()
    out = []
    for phase in ("decode", "prefill"):
        for path in sorted((root / "dsa" / phase / DSA_GPU).glob("attn-*.csv")):
            with path.open(encoding="utf-8") as fh:
                rows = list(csv.DictReader(fh))
            heads = int(path.stem.split("-")[1])
            n = len(rows)
            if phase == "decode":
                cols = {
                    "batch_size": np.array([int(r["batch_size"]) for r in rows]),
                    "isl": np.ones(n, int),
                    "step": np.array([int(r["kv_len"]) - 1 for r in rows]),
                    "kv_cache_dtype": np.array([r["kv_dtype"] for r in rows]),
                }
            else:
                cols = {
                    "batch_size": np.ones(n, int),
                    "isl": np.array([int(r["s_q"]) for r in rows]),
                    "step": np.array([int(r["s_kv"]) for r in rows]),
                    "kv_cache_dtype": np.full(n, "bfloat16"),
                }
            cols["num_heads"] = np.full(n, heads)
            cols["kernel_source"] = np.full(n, DSA_KERNELS[phase])
            lat = np.array([float(r["latency_us"]) for r in rows]) * 1e-6
            out.append(
                KernelTable(
                    gpu=DSA_GPU,
                    engine="sglang",
                    op="dsa_sparse_attn",
                    version="infersim@f2293da",
                    columns=cols,
                    latency=lat,
                    origin=str(path),
                )  # fmt: skip
            )
    return out
