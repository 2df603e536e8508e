"""Wide expert parallelism (cost/wideep.py, cost/a2a.py) against measured rows, DeepEP's
published figures and closed forms."""

from __future__ import annotations

import functools
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from moeplan.cost import CostModel
from moeplan.cost.a2a import moe_backend
from moeplan.cost.kerneldb import KERNEL_FAMILIES, KernelDB
from moeplan.cost.kerneldb.evaluate import FOLDS, LOAD_COLS
from moeplan.cost.kerneldb.variant import LazyTables, row_keys
from moeplan.errors import MoeplanError
from moeplan.kernel_tables import (
    engine_cost_model,
    kernels_dir,
    read_errors,
    table_devices,
    table_loaders,
)
from moeplan.specs import load_cluster, load_model

DSV3 = load_model("deepseek-v3")
TABLE = kernels_dir() / "h100_sxm" / "moe" / "sglang" / "0.5.10"


@pytest.fixture(scope="module")
def cm():
    return engine_cost_model(load_cluster("h100-sxm-8", 12), engine="sglang")


def _rows(name: str) -> list[dict]:
    t = pq.read_table(TABLE / name).to_pylist()
    return [r for r in t if r["distribution"] == "uniform"]


@pytest.mark.parametrize("phase", ["context", "generation"])
def test_gemm_matches_the_measured_balanced_rows(cm, phase):
    """A rank's own balanced load (explicit pairs T k on (E)/ep experts) is priced within 15 %
    of the uniform-routing row measured at the same tokens and EP (median over the table).
    These rows built the database (training rows: median 0.3-0.7 %); the held-out figure is
    test_gemm_median_on_heldout_rows / test_gemm_p90_on_heldout_rows."""
    errs = []
    for r in _rows(f"wideep_{phase}_moe_perf.parquet"):
        ep, n = r["moe_ep_size"], r["num_tokens"]
        if n / ep < 1:
            continue
        got = cm.wide_ep.moe(DSV3, n / ep, ep, phase=phase, batch_spread=False).gemm
        errs.append(abs(got / (r["latency"] * 1e-3) - 1))
    assert np.median(errs) < 0.15, np.median(errs)


def test_imbalance_and_redundant_experts_move_the_price(cm):
    w = cm.wide_ep
    base = w.moe(DSV3, 4096, 32, phase="context")
    hot = w.moe(DSV3, 4096, 32, imbalance=1.3, phase="context")
    assert hot.gemm > base.gemm and hot.dispatch > base.dispatch and hot.combine > base.combine
    with pytest.raises(MoeplanError, match="must divide"):
        w.moe(DSV3, 256, 72, phase="generation")  # 256 experts over 72 ranks
    assert w.moe(DSV3, 256, 72, redundant=32, phase="generation").gemm > 0


def test_low_latency_internode_is_deepeps_published_figures(cm):
    """DeepEP README (tests/data/deepep_published_bandwidth.json): H800 + CX7 400 Gb/s, 128
    tokens per rank, top-8 of 256, LL dispatch / combine latency at EP16..256, random routing
    (the batch spread): the inter-node price is those figures (cost/deepep_ll.py)."""
    pub = json.loads(
        (Path(__file__).parent / "data" / "deepep_published_bandwidth.json").read_text()
    )
    h800 = engine_cost_model(load_cluster("h800-sxm-8", 32), engine="sglang").wide_ep
    for ep, disp_us, _, comb_us, _ in pub["v1_low_latency_h800"]["rows"]:
        if ep <= 8:
            continue
        got = h800.moe(DSV3, 128, ep, phase="generation")
        assert got.dispatch == pytest.approx(disp_us * 1e-6, rel=1e-3), ep
        assert got.combine == pytest.approx(comb_us * 1e-6, rel=1e-3), ep


def test_low_latency_internode_scales_with_bytes_and_link(cm):
    """Bandwidth-bound at the published batch: half the tokens, half the time; half the RDMA
    bandwidth per GPU, twice it; one token per rank is the measured intra-node kernel's
    price of that token (the floor), never less."""
    c = load_cluster("h800-sxm-8", 16)
    w = engine_cost_model(c, engine="sglang").wide_ep
    full = w.moe(DSV3, 128, 128, phase="generation", batch_spread=False)
    half = w.moe(DSV3, 64, 128, phase="generation", batch_spread=False)
    assert half.dispatch == pytest.approx(full.dispatch / 2, rel=1e-9)
    assert half.combine == pytest.approx(full.combine / 2, rel=1e-9)
    slow = replace(c, inter=replace(c.inter, bw=c.inter.bw / 2))
    ws = engine_cost_model(slow, engine="sglang").wide_ep
    assert ws.moe(DSV3, 128, 128, phase="generation", batch_spread=False).dispatch == (
        pytest.approx(2 * full.dispatch, rel=1e-9)
    )
    one = w.moe(DSV3, 1, 128, phase="generation", batch_spread=False)
    intra = w.moe(DSV3, 1, 8, phase="generation", batch_spread=False)
    assert one.dispatch == pytest.approx(intra.dispatch, rel=1e-9)


def test_one_decision_for_price_and_flags():
    """auto = DeepEP wherever it runs; deepep where it cannot is one line; nccl is nccl."""
    h100, a100 = load_cluster("h100-sxm-8", 4), load_cluster("a100-sxm-8", 4)
    assert moe_backend("auto", "sglang", DSV3, h100, 1, 32) == "deepep"
    assert moe_backend("auto", "sglang", DSV3, h100, 2, 16) == "nccl"  # MoE TP
    assert moe_backend("auto", "trtllm", DSV3, h100, 1, 32) == "nccl"
    assert moe_backend("auto", "sglang", DSV3, a100, 1, 32) == "nccl"
    assert moe_backend("nccl", "sglang", DSV3, h100, 1, 32) == "nccl"
    with pytest.raises(MoeplanError, match="SM90"):
        moe_backend("deepep", "sglang", DSV3, a100, 1, 32)
    gpt = load_model("gpt-oss-120b")
    with pytest.raises(MoeplanError, match="no DeepEP MoE path"):
        moe_backend("deepep", "sglang", gpt, h100, 1, 32)


def test_export_follows_the_decision():
    from moeplan.export.constraints import Target, check_sglang
    from moeplan.export.sglang import sglang_args
    from moeplan.planners.layout import Layout
    from moeplan.serve.iteration.instance_knobs import InstanceKnobs

    c = load_cluster("h100-sxm-8", 4)
    t = Target.of(DSV3, c)
    s = Layout(attn_tp=1, attn_dp=32, moe_tp=1, moe_ep=32, pp=1)
    kn = InstanceKnobs(a2a="deepep", tbo=True, mtp=2, mtp_accept=0.8, kv_dtype="fp8")
    args = sglang_args(s, model_path="m", target=t, num_nodes=4, knobs=kn, redundant_experts=32)
    f = " ".join(args.args)
    assert "--moe-a2a-backend deepep" in f and "--enable-two-batch-overlap" in f
    assert "--speculative-num-steps 2" in f and "--speculative-num-draft-tokens 3" in f
    assert "--kv-cache-dtype fp8_e4m3" in f and "--ep-num-redundant-experts 32" in f
    assert not check_sglang(args.args, t, gpus_used=32)
    plain = sglang_args(s, model_path="m", target=t, num_nodes=4, knobs=InstanceKnobs())
    assert "deepep" not in " ".join(plain.args)  # --a2a nccl: the fused MoE, no DeepEP flag


@pytest.mark.parametrize("phase", ["context", "generation"])
def test_shared_expert_from_the_wide_ep_mlp_rows(cm, phase):
    """The shared expert on the wide-EP path is SGLang's measured MLP module at its rows
    (wideep_*_mlp_perf, DeepSeek-V3's 7168 x 2048 fp8_block), between rows within the
    neighbours' span; other shapes have no table (None)."""
    mlp = kernels_dir() / "h100_sxm" / "mlp" / "sglang" / "0.5.6.post2"
    rows = sorted(
        (r["num_token"], r["avg_ms"] * 1e-3)
        for r in pq.read_table(mlp / f"wideep_{phase}_mlp_perf.parquet").to_pylist()
    )
    decode = phase == "generation"
    for n, t in rows:
        assert cm.wide_shared_expert(DSV3, n, decode) == pytest.approx(t, rel=1e-6)
    for (n0, t0), (n1, t1) in zip(rows[8:], rows[9:], strict=False):  # the linear regime
        mid = cm.wide_shared_expert(DSV3, (n0 + n1) // 2, decode)
        assert min(t0, t1) <= mid <= max(t0, t1)
    assert cm.wide_shared_expert(load_model("qwen3-30b-a3b"), 4096, decode) is None


@functools.cache
def _heldout_gemm(phase: str) -> tuple[np.ndarray, np.ndarray]:
    """Errors and EP sizes of the wide-EP grouped GEMM price (the path ``serve-sim
    --phase`` takes: a rank's own balanced load as explicit pairs on ``(E + R) / ep`` experts)
    on the uniform rows of SGLang's H100 table (at least one token per rank), each row
    predicted by a database built without its shape: the kernel database's cross-validation
    folds (``evaluate.FOLDS`` folds of whole shapes, the seeded assignment of
    ``evaluate.heldout_shapes``; every load of a shape leaves with it)."""
    op = f"wideep_{phase}_moe"
    key = ("h100_sxm", "sglang", op)
    loaders = table_loaders()
    full = loaders[key]()
    fam = KERNEL_FAMILIES[op]
    cols = {c: np.asarray(v) for c, v in full.columns.items()}
    names = tuple(c for c in fam.shape_cols if c not in LOAD_COLS)
    shapes = row_keys(cols, names, len(full.latency))
    uniq = sorted(set(shapes))
    rng = np.random.default_rng([0, len(uniq)])
    fold_of = dict(zip(uniq, rng.permutation(len(uniq)) % FOLDS, strict=True))
    fold = np.array([fold_of[s] for s in shapes])
    uniform = cols["distribution"].astype(str) == "uniform"
    errs, eps = [], []
    for fo in range(FOLDS):
        test = fold == fo
        train = replace(
            full, columns={c: v[~test] for c, v in cols.items()}, latency=full.latency[~test]
        )
        db = KernelDB(
            LazyTables({**loaders, key: lambda t=train: t}), table_devices(), read_errors()
        )
        cm = CostModel(load_cluster("h100-sxm-8", 12), engine="sglang", kernels=db)
        for i in np.flatnonzero(test & uniform):
            ep, n = int(cols["moe_ep_size"][i]), float(cols["num_tokens"][i])
            if n / ep < 1:
                continue
            got = cm.wide_ep.moe(DSV3, n / ep, ep, phase=phase, batch_spread=False).gemm
            errs.append(abs(got / full.latency[i] - 1))
            eps.append(ep)
    return np.asarray(errs), np.asarray(eps)


@pytest.mark.parametrize("phase", ["context", "generation"])
def test_gemm_median_on_heldout_rows(phase):
    """The kernel bar's median (<= 10 %) on held-out rows of the pricing path: 4.9 % (77
    rows, prefill) and 3.6 % (56 rows, decode)."""
    errs, _ = _heldout_gemm(phase)
    assert len(errs) > 50
    assert np.median(errs) <= 0.10, np.median(errs)


P90_MISSED = (
    "bar missed: held-out p90 114 % (prefill, 77 rows) and 142 % (decode, 56 rows); the misses "
    "are held-out EP sizes at the table's edges, priced by extrapolation (prefill EP2 median "
    "517 %, EP4 / EP256 21 / 20 %; decode EP256 median 79 %, and EP4 / EP8 rows of 1-2 tokens "
    "per rank up to 5.0x)"
)


@pytest.mark.xfail(strict=True, reason=P90_MISSED)
@pytest.mark.parametrize("phase", ["context", "generation"])
def test_gemm_p90_on_heldout_rows(phase):
    """The kernel bar's p90 (<= 25 %) on held-out rows of the pricing path."""
    errs, _ = _heldout_gemm(phase)
    assert np.percentile(errs, 90) <= 0.25, np.percentile(errs, 90)
