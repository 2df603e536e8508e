"""Decode attention and MLA kernel terms of the kernel database, pinned against the table rows
they model (NVIDIA's measured tables are the oracle; docs/benchmarks/kerneldb-attention.md).

- the residual field's grid coordinate ``b kv``: at one key, decode time is one function of
  the grid size, not of the batch or the query heads;
- TensorRT-LLM's XQA dispatch (XQA only where its blocks fill a quarter of the SMs, else
  masked MHA): the context at which one sequence's time *falls* although the context doubles
  is where the rule switches to XQA, and it moves with the GPU's SM count;
- the masked-MHA block cost relative to an XQA block;
- prefill blocks' latency: the same per wave on both GPUs (it transfers unscaled);
- vLLM's Triton MLA decode: programs of ``ceil(h/16)`` heads x 4 KV splits, paid per wave over
  the A100's 108 SMs; the one-head (non-grouped) kernel's per-key cost and residency; its
  ~300 us host-side floor, which the kernel's own time overlaps (max, not sum).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from moeplan.cost.kerneldb import device_for
from moeplan.cost.kerneldb.evaluate import variant_rows
from moeplan.cost.kerneldb.families import (
    FLASH_TILE_Q,
    FMHA_V2_TILE_Q,
    KERNEL_FAMILIES,
    MMHA_BLOCK_WORK,
    SM_COUNT_COLUMN,
    TRITON_MLA_BLOCK_H,
    TRITON_MLA_SPLITS,
    Features,
    _xqa_declines,
)
from moeplan.cost.kerneldb.fit import NEAR, Analytic
from moeplan.kernel_tables import kernel_db
from moeplan.specs import gpu_records, load_cluster

SMS = {
    "a100_sxm": gpu_records()["a100-80g"].sm_count,
    "h100_sxm": gpu_records()["h100-sxm"].sm_count,
}
BF16 = ("bfloat16", "bfloat16")


def _rows(gpu: str, engine: str, op: str, kernel: str) -> dict[str, np.ndarray]:
    cols, y = variant_rows(kernel_db(), gpu, engine, op, (kernel, *BF16))
    out = {c: np.asarray(v) for c, v in cols.items() if c != "kernel_source"}
    out["ctx"] = out["isl"].astype(float) + out.get("step", 0)
    out["y"] = y
    return out


def _dispersion(logy: np.ndarray, key: np.ndarray) -> float:
    """Mean standard deviation of ``logy`` within groups of equal ``key``."""
    return float(np.mean([np.std(logy[key == k]) for k in np.unique(key) if (key == k).sum() > 1]))


@pytest.mark.parametrize(
    ("gpu", "engine", "kernel"),
    [
        ("a100_sxm", "sglang", "flash_attention"),
        ("h100_sxm", "sglang", "fa3"),
        ("a100_sxm", "vllm", "vllm_flash_attn"),
        ("h100_sxm", "vllm", "vllm_flash_attn_fa3"),
        ("a100_sxm", "trtllm", "torch_flow"),
        ("h100_sxm", "trtllm", "torch_flow"),
    ],
)
def test_decode_time_at_one_key_follows_the_grid_size(gpu: str, engine: str, kernel: str) -> None:
    """Rows at the shortest context, groups of up to 16 query heads (TensorRT-LLM: its XQA
    rows): the log time varies far less among rows of equal ``b kv`` than among rows of equal
    batch or equal ``b h`` — the grid size is the coordinate in which they are smooth."""
    r = _rows(gpu, engine, "generation_attention", kernel)
    b, h, kv = r["batch_size"], r["num_heads"], r["num_key_value_heads"]
    sel = (r["ctx"] == r["ctx"].min()) & (r["head_dim"] == 128) & (r["window_size"] == 0)
    sel &= h / kv <= 16
    if engine == "trtllm":
        sel &= (h > kv) & ~_xqa_declines(
            {SM_COUNT_COLUMN: np.full(len(b), SMS[gpu])}, b * kv, r["ctx"]
        )
    logy = np.log(r["y"][sel])
    grid = _dispersion(logy, (b * kv)[sel])
    assert sel.sum() > 100
    assert grid < 0.5 * _dispersion(logy, b[sel])
    assert grid < 0.7 * _dispersion(logy, (b * h)[sel])


@pytest.mark.parametrize("gpu", ["a100_sxm", "h100_sxm"])
def test_trtllm_switches_to_xqa_where_its_blocks_fill_a_quarter_of_the_sms(gpu: str) -> None:
    """One sequence, 16 query heads on 1, 2, 4 or 8 KV heads: at every context where the rule
    gives some of them XQA and leaves the others to masked MHA, each XQA row — more KV heads,
    more bytes — is faster than every masked-MHA row (on each GPU at its own SM count)."""
    r = _rows(gpu, "trtllm", "generation_attention", "torch_flow")
    sms = {SM_COUNT_COLUMN: np.full(len(r["y"]), SMS[gpu])}
    declines = _xqa_declines(sms, r["batch_size"] * r["num_key_value_heads"], r["ctx"])
    line = (r["batch_size"] == 1) & (r["num_heads"] == 16) & (r["head_dim"] == 128)
    line &= (r["window_size"] == 0) & (r["num_key_value_heads"] < 16)
    split = 0
    for ctx in np.unique(r["ctx"][line]):
        at = line & (r["ctx"] == ctx)
        if declines[at].all() or not declines[at].any():
            continue
        split += 1
        assert r["y"][at & ~declines].max() < r["y"][at & declines].min(), ctx
    assert split >= 3


def test_xqa_threshold_moves_with_the_sm_count() -> None:
    """128 heads on 8 KV heads, one sequence of 512 keys: 32 blocks, x 4 = 128 >= A100's 108
    SMs (XQA) but < H100's 132 (masked MHA) — and the H100 runs it 1.5x slower than the A100."""
    t = {}
    for gpu in SMS:
        r = _rows(gpu, "trtllm", "generation_attention", "torch_flow")
        row = (r["batch_size"] == 1) & (r["num_heads"] == 128) & (r["num_key_value_heads"] == 8)
        row &= (r["ctx"] == 512) & (r["head_dim"] == 128) & (r["window_size"] == 0)
        declines = _xqa_declines(
            {SM_COUNT_COLUMN: np.array([SMS[gpu]])}, np.array([8.0]), np.array([512.0])
        )
        assert bool(declines[0]) == (gpu == "h100_sxm")
        t[gpu] = float(np.median(r["y"][row]))
    assert t["h100_sxm"] > 1.3 * t["a100_sxm"]


@pytest.mark.parametrize("gpu", ["a100_sxm", "h100_sxm"])
def test_mmha_block_costs_a_quarter_of_an_xqa_block(gpu: str) -> None:
    """256 sequences at one key: time per masked-MHA block (one per query head; g = 1 and
    g > 32) over time per XQA block (one per KV head, kv = 8) is MMHA_BLOCK_WORK +- 20 %."""
    r = _rows(gpu, "trtllm", "generation_attention", "torch_flow")
    h, kv = r["num_heads"], r["num_key_value_heads"]
    sel = (r["batch_size"] == 256) & (r["ctx"] == r["ctx"].min()) & (r["head_dim"] == 128)
    xqa = np.median((r["y"] / (256 * kv))[sel & (kv == 8) & (h <= 64)])
    for mmha in (h == kv, h / kv > 32):
        ratio = np.median((r["y"] / (256 * h))[sel & mmha]) / xqa
        assert abs(ratio / MMHA_BLOCK_WORK - 1) < 0.2, ratio


@pytest.mark.parametrize(
    ("engine", "kernels", "tile"),
    [
        ("trtllm", ("torch_flow", "torch_flow"), FMHA_V2_TILE_Q),
        ("sglang", ("flash_attention", "fa3"), FLASH_TILE_Q),
    ],
)
@pytest.mark.parametrize("isl", [16, 32])
def test_prefill_block_latency_is_the_same_on_both_gpus(engine, kernels, tile, isl) -> None:
    """Short prefills (b h >= 2048 blocks): the time per block, times the GPU's SMs (the time
    per wave), is the same on A100 and H100 within 12 % — the H100 is faster per block by its
    SM count (1.22x), not by its HBM bandwidth (1.64x)."""
    wave = {}
    for gpu, kernel in zip(SMS, kernels, strict=True):
        r = _rows(gpu, engine, "context_attention", kernel)
        sel = (r["isl"] == isl) & (r["head_dim"] == 128) & (r["window_size"] == 0)
        blocks = (r["batch_size"] * r["num_heads"] * np.ceil(isl / tile))[sel]
        big = blocks >= 2048
        assert big.sum() > 50
        wave[gpu] = np.polyfit(blocks[big], r["y"][sel][big], 1)[0] * SMS[gpu]
    assert abs(wave["a100_sxm"] / wave["h100_sxm"] - 1) < 0.12, wave


def _mla_decode(h: int, ctx: float) -> tuple[np.ndarray, np.ndarray]:
    r = _rows("a100_sxm", "vllm", "generation_mla", "vllm_triton_mla")
    line = (r["num_heads"] == h) & (r["ctx"] == ctx)
    order = np.argsort(r["batch_size"][line])
    return r["batch_size"][line][order], r["y"][line][order]


@pytest.mark.parametrize("h", [2, 16, 32, 64, 128])
def test_triton_mla_decode_waves_over_the_sms(h: int) -> None:
    """A100 vLLM MLA decode, 32,768 keys: flat in the batch while its ``b ceil(h/16) 4``
    programs fit the 108 SMs, then ~2x at the first batch that needs a second wave."""
    b, t = _mla_decode(h, 32768.0)
    programs = b * np.ceil(h / TRITON_MLA_BLOCK_H) * TRITON_MLA_SPLITS
    one = programs <= SMS["a100_sxm"]
    assert one.sum() >= 2 and (~one).any()
    first = t[one]
    assert first.max() < 1.2 * first.min()
    assert t[one.sum()] > 1.7 * first.max()


def test_triton_mla_decode_one_head_runs_the_non_grouped_kernel() -> None:
    """h = 1 over h = 2, one wave (b <= 16), 32k-64k keys: 4.7x +- 15 % a key (vLLM's
    non-grouped kernel); its programs stay one wave up to twice the grouped kernel's batch
    (b 32), two at b 64. The model keeps no factor for it (it would be read from the very rows
    a held-out h = 1 is scored on): the path is a residual-field coordinate of its own."""
    per_key, resident = 4.7, 2.0  # read off the A100 rows below
    for ctx in (32768.0, 65536.0):
        b1, t1 = _mla_decode(1, ctx)
        b2, t2 = _mla_decode(2, ctx)
        both = np.intersect1d(b1[b1 <= 16], b2)
        ratio = t1[np.isin(b1, both)] / t2[np.isin(b2, both)]
        assert len(ratio) >= 4 and np.all(np.abs(ratio / per_key - 1) < 0.15), ratio
    b, t = _mla_decode(1, 65536.0)
    waves = np.ceil(b * TRITON_MLA_SPLITS / resident / SMS["a100_sxm"])
    assert t[waves == 1].max() < 1.25 * t[waves == 1].min()
    assert t[waves == 2].min() > 1.7 * t[waves == 1].max()
    cols = {
        "batch_size": np.array([4.0, 4.0]),
        "num_heads": np.array([1.0, 2.0]),
        "isl": np.array([32768.0, 32768.0]),
        "step": np.zeros(2),
        "kernel_source": np.array(["vllm_triton_mla"] * 2),
        "kv_cache_dtype": np.array(["bfloat16"] * 2),
        "mla_dtype": np.array(["bfloat16"] * 2),
    }
    path = KERNEL_FAMILIES["generation_mla"].features(cols).coords[:, -1]
    assert path[0] - path[1] >= NEAR  # no h = 2 row is a neighbour of an h = 1 query


def test_triton_mla_decode_floor_overlaps_the_kernel() -> None:
    """A100 vLLM MLA decode, 1-4 sequences of 2-32 heads: the kernel's time at 8k and 16k keys,
    extrapolated linearly from the 32k-128k rows (where the floor is negligible), and the
    floor (median at <= 1,024 keys): the measured time is their maximum (+-20 %), not their
    sum (<= 0.65 of it) — the floor is host time the kernel runs under."""
    r = _rows("a100_sxm", "vllm", "generation_mla", "vllm_triton_mla")
    lines = 0
    for h in (2, 4, 8, 16, 32):
        for b in (1, 2, 4):
            line = (r["num_heads"] == h) & (r["batch_size"] == b)
            long = line & (r["ctx"] >= 32768)
            if long.sum() < 2:
                continue
            lines += 1
            floor = np.median(r["y"][line & (r["ctx"] <= 1024)])
            slope, at0 = np.polyfit(r["ctx"][long], r["y"][long], 1)
            for ctx in (8192.0, 16384.0):
                y = r["y"][line & (r["ctx"] == ctx)]
                kernel = at0 + slope * ctx
                assert len(y) == 1
                assert 0.85 < y[0] / max(floor, kernel) < 1.2, (h, b, ctx)
                assert y[0] / (floor + kernel) < 0.65, (h, b, ctx)
    assert lines >= 10


def _synthetic(n: int = 300) -> Features:
    rng = np.random.default_rng(3)
    return Features(
        flops=10 ** rng.uniform(6, 12, n),
        nbytes=10 ** rng.uniform(4, 10, n),
        work=10 ** rng.uniform(0, 4, n),
        fp8=np.zeros(n, bool),
        tokens=np.ones(n),
        coords=np.zeros((n, 1)),
    )


def test_floor_in_the_norm_is_the_p_norm_of_floor_and_kernel() -> None:
    """Closed form: floor a, memory time m alone: (a^p + m^p)^(1/p), not a + m; a model
    without the option is unchanged (floor + norm); the fit recovers a synthetic one."""
    h100 = device_for(load_cluster("h100-sxm-8"))
    f = _synthetic()
    m = f.nbytes / (0.8 * h100.mem_bw)
    c = f.flops / (0.5 * h100.flops_bf16)
    base = dict(floor=3e-4, per_work=0.0, flops_eff=0.5, bw_eff=0.8, overlap=3.0)
    inside = Analytic(**base, floor_in_norm=True).predict(f, h100, False)
    assert np.allclose(inside, (3e-4**3 + m**3 + c**3) ** (1 / 3), rtol=1e-12)
    added = Analytic(**base).predict(f, h100, False)
    assert np.allclose(added, 3e-4 + (m**3 + c**3) ** (1 / 3), rtol=1e-12)
    truth = Analytic(**{**base, "per_work": 5e-8}, floor_in_norm=True)
    y = truth.predict(f, h100, False)
    got = Analytic.fit(f, y, h100, False, floor_in_norm=True)
    assert got.floor_in_norm and got.floor == pytest.approx(3e-4, rel=0.02)
    assert np.max(np.abs(got.predict(f, h100, False) / y - 1)) < 1e-3


def test_wave_latency_moves_to_another_gpu_unscaled() -> None:
    """scaled(): per-work cost x the bandwidth ratio by default, unchanged with scale_work
    off; the floor x the SM clock ratio either way; the other fields kept."""
    a100 = device_for(load_cluster("a100-sxm-8"))
    h100 = device_for(load_cluster("h100-sxm-8"))
    r = a100.mem_bw / h100.mem_bw
    m = Analytic(floor=1e-5, per_work=2e-6, flops_eff=0.4, bw_eff=0.7, overlap=2.0)
    assert m.scaled(a100, h100, False).per_work == pytest.approx(2e-6 * r)
    kept = replace(m, scale_work=False, floor_in_norm=True).scaled(a100, h100, False)
    assert kept.per_work == 2e-6 and kept.floor == pytest.approx(1e-5 * 1410 / 1980)
    assert kept.floor_in_norm and not kept.scale_work and kept.overlap == 2.0
