"""Every GPU measurement in one run (GPU time is scarce: one process, many steps).

    PYTHONPATH=src python bench/gpu_session.py --out DIR [--steps tests,ceilings,...]

Steps (each guarded: a failing step is recorded and the next one runs):

- ``env``: GPU, driver, torch, Triton versions.
- ``tests``: the CUDA/Triton correctness tests (``tests/test_kernels_triton.py``,
  ``tests/test_kernels_permute.py``) — log in ``pytest.log``.
- ``ceilings``: device-to-device copy bandwidth (read + write) and an 8192³ bf16 GEMM.
- ``kernels``: ``bench/bench_kernels.py`` rows, the grouped experts alone (FLOP/s against the
  GEMM ceiling) and the routed-expert path split into its parts (where the time goes).
- ``calibrate``: ``moeplan calibrate --device cuda`` → ``<profile-name>.json`` (``--profile-name``,
  default ``h100-measured``), ``calibrate_rows.json`` (the own-kernel rows) + ``calibrate.json``.
- ``tables``: NVIDIA's H100 SGLang rows (fused MoE, context/generation attention) measured with
  our kernels (:mod:`moeplan.profiling.tables`) → ``tables.json``.
- ``wideep``: one wide-EP GPU's expert shard (DeepSeek-V3's shape, 2-16 local experts, decode
  and prefill token counts): bf16 / fp8 grouped GEMMs and the runtime's routed-expert path →
  ``wideep.json`` (``bench/gpu_stack.py``).
- ``stack``: a whole Qwen3-30B-A3B stack, decode steps with a real KV cache (CUDA graph) and
  prefill steps, and each part alone → ``stack.json`` (``bench/gpu_stack.py``).
- ``runtime``: the runtime's MoE layer and attention (``moeplan.runtime.layers``) at full model
  widths, bf16, one GPU → ``runtime.json``.

Everything lands in ``session.json`` (rewritten after each step); predictions are added on any
machine afterwards by ``bench/gpu_vs_tables.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

#: name of the profile ``calibrate`` writes (``--profile-name``; one per GPU model)
PROFILE_NAME = ["h100-measured"]
STEPS = (
    "env", "tests", "ceilings", "kernels", "calibrate", "tables", "runtime", "quant", "wideep",
    "stack",
)  # fmt: skip


def step_env(out: Path, res: dict[str, Any]) -> dict[str, Any]:
    smi = subprocess.run(
        [
            "nvidia-smi",
            "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
            "--format=csv,noheader",
        ],
        capture_output=True,
        text=True,
    )
    try:
        import triton

        tv = triton.__version__
    except ImportError:
        tv = None
    p = torch.cuda.get_device_properties(0)
    return {
        "nvidia_smi": smi.stdout.strip(),
        "torch": torch.__version__,
        "triton": tv,
        "cuda": torch.version.cuda,
        "device": p.name,
        "sms": p.multi_processor_count,
        "grouped_mm": hasattr(torch, "_grouped_mm"),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def step_tests(out: Path, res: dict[str, Any]) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "-rs",
        "tests/test_kernels_triton.py",
        "tests/test_kernels_permute.py",
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    (out / "pytest.log").write_text(p.stdout + p.stderr)
    return {"returncode": p.returncode, "summary": (p.stdout.strip().splitlines() or [""])[-1]}


def step_ceilings(out: Path, res: dict[str, Any]) -> dict[str, Any]:
    from moeplan.profiling import microbench as mb

    d, g = torch.device("cuda"), torch.Generator().manual_seed(0)
    return {
        "copy_Bps": mb.copy_bandwidth(1 << 30, device=d, gen=g, repeats=50),
        "gemm_flops": mb.gemm_ceiling(8192, device=d, gen=g, repeats=50),
    }


def _parts(tokens: int, k: int, e: int, h: int, i: int) -> dict[str, float]:
    """Median seconds of each part of the routed-expert path at one shape."""
    from moeplan.profiling.microbench import _expert_weights, _routing
    from moeplan.profiling.timing import median_time, random_inputs
    from moeplan.runtime import kernels as K

    d, g = torch.device("cuda"), torch.Generator().manual_seed(1)
    w = _expert_weights(e, h, i, torch.bfloat16, d, g)
    ((x,),) = random_inputs([(tokens, h)], dtype=torch.bfloat16, device=d, gen=g, copies=1)
    ids, wt = _routing(tokens, k, e, g, d)
    perm = K.permute(ids, wt, e)
    rows = K.gather_rows(x, perm)
    y = K.grouped_swiglu(rows, perm.counts, *w)
    one = [()]
    return {
        "permute": median_time(lambda: K.permute(ids, wt, e), one, device=d, repeats=20),
        "gather": median_time(lambda: K.gather_rows(x, perm), one, device=d, repeats=20),
        "grouped_swiglu": median_time(
            lambda: K.grouped_swiglu(rows, perm.counts, *w), one, device=d, repeats=20
        ),
        "combine": median_time(lambda: K.combine(y, perm), one, device=d, repeats=20),
        "whole": median_time(lambda: K.grouped_moe(x, ids, wt, *w), one, device=d, repeats=20),
    }


def step_kernels(out: Path, res: dict[str, Any]) -> dict[str, Any]:
    sys.path.insert(0, "bench")
    import bench_kernels
    from moeplan.profiling import microbench as mb

    d, g = torch.device("cuda"), torch.Generator().manual_seed(0)
    rows = bench_kernels.run()
    tokens, h, i, e, k = 16384, 4096, 1536, 128, 8
    ffn = mb.bench_expert_ffn(tokens * k // e, e, h, i, device=d, gen=g, repeats=20)
    flops = 3 * 2 * tokens * k * h * i
    parts = {f"T{t}": _parts(t, k, e, h, i) for t in (1024, 16384, 65536)}
    shapes = {
        "bench": (16384, 4096, 1536, 128, 8),
        "deepseek-v3": (16384, 7168, 2048, 256, 8),
        "qwen3-30b-a3b": (16384, 2048, 768, 128, 8),
        "decode-qwen3": (64, 2048, 768, 128, 8),
    }
    vs_loop = {}
    for label, (t, hh, ii, ee, kk) in shapes.items():
        grouped = mb.bench_moe(t, kk, ee, hh, ii, device=d, gen=g, repeats=10)
        graphed = mb.bench_moe(t, kk, ee, hh, ii, device=d, gen=g, repeats=10, graph=True)
        loop = mb.bench_moe(t, kk, ee, hh, ii, device=d, gen=g, repeats=3, loop=True)
        vs_loop[label] = {
            "shape": [t, hh, ii, ee, kk],
            "grouped_s": grouped,
            "graphed_s": graphed,
            "loop_s": loop,
            "ratio": loop / grouped,
            "tflops": 6 * t * kk * hh * ii / grouped / 1e12,
        }
    prof = ""
    try:
        from torch.profiler import ProfilerActivity, profile

        from moeplan.profiling.microbench import _expert_weights, _routing
        from moeplan.runtime import kernels as K

        w = _expert_weights(e, h, i, torch.bfloat16, d, g)
        x = torch.randn(tokens, h, device=d, dtype=torch.bfloat16)
        ids, wt = _routing(tokens, k, e, g, d)
        for _ in range(3):
            K.grouped_moe(x, ids, wt, *w)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
            for _ in range(5):
                K.grouped_moe(x, ids, wt, *w)
            torch.cuda.synchronize()
        prof = p.key_averages().table(sort_by="cuda_time_total", row_limit=25)
    except Exception as err:  # profiling is diagnostic only
        prof = f"profiler failed: {err!r}"
    (out / "profile.txt").write_text(prof)
    return {
        "bench_rows": rows,
        "grouped_ffn_s": ffn,
        "grouped_ffn_flops": flops / ffn,
        "parts": parts,
        "vs_loop": vs_loop,
        "permutation": _permutation_rows(),
        "shape": {"tokens": tokens, "h": h, "i": i, "e": e, "k": k},
    }


def _permutation_rows() -> list[dict[str, Any]]:
    """The layer's sync-free permutation (index build + gather), eager and graphed, against
    the copy ceiling: bytes = rows written + rows read (one row per token-expert pair)."""
    from moeplan.profiling import microbench as mb
    from moeplan.profiling.microbench import _routing
    from moeplan.profiling.timing import median_time, random_inputs
    from moeplan.runtime.kernels.grouped import permuted_rows

    d, g = torch.device("cuda"), torch.Generator().manual_seed(2)
    copy = mb.copy_bandwidth(1 << 30, device=d, gen=g, repeats=20)
    out = []
    for pairs, h, e, k in (
        (65536, 4096, 128, 8),
        (131072, 4096, 128, 8),
        (524288, 4096, 128, 8),
        (65536, 7168, 256, 8),
    ):
        t = pairs // k
        inputs = [
            (x, _routing(t, k, e, g, d)[0])
            for (x,) in random_inputs([(t, h)], dtype=torch.bfloat16, device=d, gen=g)
        ]
        fn = lambda x, ids, e=e: permuted_rows(x, ids, e)  # noqa: E731
        nbytes = 2.0 * pairs * h * 2
        for graph in (False, True):
            s = median_time(fn, inputs, device=d, repeats=20, graph=graph)
            out.append(
                {
                    "pairs": pairs,
                    "h": h,
                    "e": e,
                    "graph": graph,
                    "s": s,
                    "GBps": nbytes / s / 1e9,
                    "fraction_of_copy": nbytes / s / copy,
                }
            )
    return out


def step_calibrate(out: Path, res: dict[str, Any]) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-c",
        "import sys; from moeplan.cli import main; main()",
        "calibrate",
        "--device",
        "cuda",
        "--name",
        PROFILE_NAME[0],
        "--out",
        str(out / f"{PROFILE_NAME[0]}.json"),
        "--rows-out",
        str(out / "calibrate_rows.json"),
        "--json",
    ]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=420)
    (out / "calibrate.json").write_text(p.stdout or p.stderr)
    return {"returncode": p.returncode, "seconds": time.time() - t0, "stderr": p.stderr[-2000:]}


def step_tables(out: Path, res: dict[str, Any]) -> dict[str, Any]:
    from moeplan.profiling import tables as T

    d, g = torch.device("cuda"), torch.Generator().manual_seed(0)
    t0 = time.time()
    if os.environ.get("MOEPLAN_TABLES_MOE_ONLY"):
        data = {"moe": T.measure_moe(T.moe_rows(), device=d, gen=g)}
        (out / "tables.json").write_text(json.dumps(data))
        return {"rows": {k: len(v) for k, v in data.items()}, "seconds": time.time() - t0}
    data = {
        "context_attention": T.measure_attention(
            T.attention_rows("context_attention", 120), "context_attention", device=d, gen=g
        ),
        "generation_attention": T.measure_attention(
            T.attention_rows("generation_attention", 120), "generation_attention", device=d, gen=g
        ),
    }
    (out / "tables.json").write_text(json.dumps(data))
    data["moe"] = T.measure_moe(T.moe_rows(), device=d, gen=g)
    (out / "tables.json").write_text(json.dumps(data))
    return {"rows": {k: len(v) for k, v in data.items()}, "seconds": time.time() - t0}


def step_runtime(out: Path, res: dict[str, Any]) -> dict[str, Any]:
    from moeplan.profiling.timing import median_time
    from moeplan.runtime.config import from_model_spec
    from moeplan.runtime.layers.model import attention, init_model, rms, to_device
    from moeplan.runtime.layers.moe import moe_forward
    from moeplan.specs import load_model

    d = torch.device("cuda")
    rows = []
    for name in ("qwen3-30b-a3b", "deepseek-v2-lite", "mixtral-8x7b", "qwen2-57b-a14b"):
        cfg = from_model_spec(load_model(name), "full", num_layers=1)
        (lw,) = to_device(init_model(cfg, seed=0), d, torch.bfloat16)
        for t in (64, 512, 4096, 16384):
            x = torch.randn(t, cfg.hidden_size, device=d, dtype=torch.bfloat16)
            fn = lambda x, w=lw.experts, c=cfg: moe_forward(rms(x), w, c)  # noqa: E731
            row = {
                "op": "moe_layer",
                "model": name,
                "tokens": t,
                "measured_s": median_time(fn, [(x,)], device=d, repeats=10),
            }
            try:
                row["graph_s"] = median_time(fn, [(x,)], device=d, repeats=10, graph=True)
            except Exception as err:  # a host sync in the layer makes capture fail: say so
                row["graph_error"] = repr(err)[:300]
            rows.append(row)
        for b, seq in ((1, 2048), (4, 2048), (1, 8192)):
            x = torch.randn(b, seq, cfg.hidden_size, device=d, dtype=torch.bfloat16)
            fn = lambda x, w=lw.attn, c=cfg: attention(rms(x), w, c)  # noqa: E731
            rows.append(
                {
                    "op": "attention",
                    "model": name,
                    "batch": b,
                    "seq": seq,
                    "heads": cfg.num_heads,
                    "hidden": cfg.hidden_size,
                    "measured_s": median_time(fn, [(x,)], device=d, repeats=5),
                }
            )
        lw = None
        torch.cuda.empty_cache()
    (out / "runtime.json").write_text(json.dumps(rows))
    return {"rows": len(rows)}


def step_quant(out: Path, res: dict[str, Any]) -> dict[str, Any]:
    """Weight-only int4 (tinygemm, group 128) and fp8 (``_scaled_mm``) GEMMs against bf16 at
    the same shapes: checks the cost model's byte-ratio (decode) and datasheet-rate (fp8)
    pricing of quantized checkpoints."""
    from moeplan.profiling.timing import median_time

    d = torch.device("cuda")
    rows: list[dict[str, Any]] = []
    for n, k in ((4096, 4096), (14336, 4096), (4096, 14336), (7168, 2048)):
        wb = torch.randn(k, n, device=d, dtype=torch.bfloat16)
        int4 = None
        try:
            q = torch.randint(0, 16, (n, k), dtype=torch.int32, device=d)
            packed = torch._convert_weight_to_int4pack(
                (q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8), 8
            )
            sz = torch.randn(k // 128, n, 2, dtype=torch.bfloat16, device=d)
            int4 = (packed, sz)
        except Exception as err:
            rows.append({"n": n, "k": k, "int4_error": repr(err)[:300]})
        fp8 = None
        try:
            w8 = torch.randn(n, k, device=d).to(torch.float8_e4m3fn)
            one = torch.ones((), device=d)
            fp8 = (w8, one)
        except Exception as err:
            rows.append({"n": n, "k": k, "fp8_error": repr(err)[:300]})
        for m in (1, 8, 32, 128, 512, 4096, 16384):
            x = torch.randn(m, k, device=d, dtype=torch.bfloat16)
            row: dict[str, Any] = {
                "m": m,
                "n": n,
                "k": k,
                "bf16_s": median_time(torch.mm, [(x, wb)], device=d, repeats=20),
            }
            if int4 is not None and m <= 512:
                try:
                    row["int4_s"] = median_time(
                        lambda x, q=int4: torch._weight_int4pack_mm(x, q[0], 128, q[1]),
                        [(x,)],
                        device=d,
                        repeats=20,
                    )
                except Exception as err:
                    row["int4_error"] = repr(err)[:300]
            if fp8 is not None:
                try:
                    x8 = x.to(torch.float8_e4m3fn)
                    row["fp8_s"] = median_time(
                        lambda a, f=fp8: torch._scaled_mm(
                            a, f[0].t(), f[1], f[1], out_dtype=torch.bfloat16
                        ),
                        [(x8,)],
                        device=d,
                        repeats=20,
                    )
                except Exception as err:
                    row["fp8_error"] = repr(err)[:300]
            rows.append(row)
    (out / "quant.json").write_text(json.dumps(rows))
    return {"rows": len(rows), "first": rows[:2]}


def step_wideep(out: Path, res: dict[str, Any]) -> dict[str, Any]:
    sys.path.insert(0, "bench")
    import gpu_stack

    def save(d: dict[str, Any]) -> None:
        (out / "wideep.json").write_text(json.dumps(d))

    data = gpu_stack.run_wideep(torch.device("cuda"), save=save)
    save(data)
    return {"rows": len(data["rows"]), "first": data["rows"][:2]}


def step_stack(out: Path, res: dict[str, Any]) -> dict[str, Any]:
    sys.path.insert(0, "bench")
    import gpu_stack

    free, total = torch.cuda.mem_get_info()
    # the KV grid fits beside the weights on a 141 GB card; an 80 GB card holds a quarter
    kv = gpu_stack.MAX_KV_TOKENS if total > 120 * 2**30 else gpu_stack.MAX_KV_TOKENS // 4

    def save(d: dict[str, Any]) -> None:
        (out / "stack.json").write_text(json.dumps(d | {"max_kv_tokens": kv}))

    data = gpu_stack.run_stack(torch.device("cuda"), max_kv_tokens=kv, save=save)
    save(data)
    return {"rows": len(data["rows"]), "init_s": data["init_s"], "compile": data["compile_error"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", default=",".join(STEPS))
    ap.add_argument("--profile-name", default=PROFILE_NAME[0], help="calibrate's profile name")
    a = ap.parse_args()
    PROFILE_NAME[0] = a.profile_name
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {}
    for name in a.steps.split(","):
        t0 = time.time()
        print(f"== {name}", flush=True)
        try:
            res[name] = globals()[f"step_{name}"](out, res)
        except Exception:
            res[name] = {"error": traceback.format_exc()[-3000:]}
        res[name]["step_seconds"] = round(time.time() - t0, 1)
        print(json.dumps(res[name], default=str)[:1500], flush=True)
        (out / "session.json").write_text(json.dumps(res, indent=1, default=str))
    os.sync()


if __name__ == "__main__":
    main()
