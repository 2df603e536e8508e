"""A query of many rows answers each row exactly as that row asked alone (oracle: the row on
its own), over every branch of the per-row decision — measured row, shape line, line end
carried on, residual field, bare model, datasheet floor — and over mixed dtype variants;
``seconds_many`` gives the same seconds. The search's shared cost-model memo answers as the
model it wraps and asks it once per distinct question."""

from __future__ import annotations

import math

import numpy as np
import pytest

from moeplan.cost.kerneldb import KernelDB, device_for
from moeplan.cost.kerneldb.db import peak_time
from moeplan.cost.kerneldb.families import KERNEL_FAMILIES
from moeplan.cost.kerneldb.normalize import normalize
from moeplan.cost.kerneldb.variant import row_keys
from moeplan.kernel_tables import engine_cost_model, kernel_db
from moeplan.search.job.memo_cost import MemoCost, memo_cost
from moeplan.specs import load_cluster, load_model

H100 = device_for(load_cluster("h100-sxm-8"))
H800 = device_for(load_cluster("h800-sxm-8"))  # no tables of its own: transferred rows


@pytest.fixture(scope="module")
def db() -> KernelDB:
    return kernel_db()


def _rows(db: KernelDB, op: str, n: int, seed: int) -> dict[str, np.ndarray]:
    """``n`` table rows of ``op`` (H100, SGLang), most moved along a token axis or a shape
    axis by factors that land between, past and far beyond the measured values."""
    t = db.tables[("h100_sxm", "sglang", op)]
    fam = KERNEL_FAMILIES[op]
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(t.latency), size=n, replace=False)
    cols = {c: np.asarray(t.columns[c])[idx].copy() for c in fam.columns}
    sizes = [c for c in ("hidden_size", "inter_size", "head_dim") if c in fam.shape_cols]
    axes = list(fam.x_cols) + sizes  # a size moved off the table: a shape it never measured
    factor = rng.choice([1.0, 1.0, 1.37, 0.61, 3.3, 40.0], size=n)
    axis = rng.choice(axes, size=n)
    for i in range(n):
        a = cols[axis[i]]
        cols[axis[i]] = a.astype(float) if a.dtype.kind != "f" else a
        cols[axis[i]][i] = max(1.0, round(float(cols[axis[i]][i]) * factor[i]))
    return cols


def _by_hand(db: KernelDB, op: str, row: dict[str, np.ndarray]) -> tuple[float, str]:
    """One row priced on H100 by the documented decision, written out one branch at a time
    (the variant's exact rows, its shape lines, the residual field, the model, the floor)."""
    fam = KERNEL_FAMILIES[op]
    cols, _ = normalize(fam, row)
    want = {c: str(cols[c][0]) for c in fam.variant_cols if c in cols}
    vm = db.variant("h100_sxm", "sglang", op, db.choose("h100_sxm", "sglang", op, want))
    key = row_keys(cols, fam.shape_cols + fam.x_cols, 1)[0]
    f = vm.featurize(cols)
    base = float(vm.model.predict(f, H100, fam.link)[0])
    peak = float(peak_time(f, H100, fam.link)[0])
    line = vm._lines.get(key[:-1])
    x = math.log2(max(key[-1], 1e-9))
    if key in vm.exact:
        s, src = vm.exact[key], "measured"
    elif line is not None and len(line[0]) >= 2 and line[0][0] <= x <= line[0][-1]:
        s, src = base * math.exp(float(np.interp(x, *line))), "interpolated"
    elif line is not None:
        s, src = base * math.exp(line[1][0] if x < line[0][0] else line[1][-1]), "transferred"
    else:
        corr, _, inside = vm.field.query(f.coords)
        s, src = (base * math.exp(corr[0]), "interpolated") if inside[0] else (base, "transferred")
    if s < peak:  # the floor prices it, whatever priced the row before
        s, src = peak, "roofline"
    return s, src


@pytest.mark.parametrize("op", ["moe", "generation_attention", "context_attention"])
def test_rows_follow_the_documented_decision(db: KernelDB, op: str) -> None:
    cols = _rows(db, op, 40, seed=11)
    got = db.predict_many(op, H100, "sglang", cols)
    for i, p in enumerate(got):
        s, src = _by_hand(db, op, {c: v[i : i + 1] for c, v in cols.items()})
        assert p.source == src
        assert p.seconds == pytest.approx(s, rel=1e-12)  # the same formula, other op order


@pytest.mark.parametrize("op", ["moe", "generation_attention", "context_attention"])
@pytest.mark.parametrize("device", [H100, H800], ids=["table-gpu", "transferred"])
def test_many_rows_equal_each_row_alone(db: KernelDB, op: str, device) -> None:
    cols = _rows(db, op, 60, seed=3)
    many = db.predict_many(op, device, "sglang", cols)
    alone = [
        db.predict_many(op, device, "sglang", {c: v[i : i + 1] for c, v in cols.items()})[0]
        for i in range(60)
    ]
    assert many == alone  # seconds, source, errors and detail, bit for bit
    secs = db.seconds_many(op, device, "sglang", cols)
    assert secs.tolist() == [p.seconds for p in alone]
    if device is H100:  # the rows reach the decision's branches, or the test proves little
        assert {"measured", "interpolated", "transferred"} <= {p.source for p in alone}
        assert any(";" in p.detail for p in alone)  # a carried or raised row's note


def test_rows_of_two_variants_in_one_query(db: KernelDB) -> None:
    cols = _rows(db, "moe", 40, seed=5)
    dtypes = np.asarray(cols["moe_dtype"]).astype(object)
    dtypes[::2] = "fp8_block" if dtypes[0] != "fp8_block" else "bfloat16"
    cols["moe_dtype"] = dtypes.astype(str)
    many = db.predict_many("moe", H100, "sglang", cols)
    alone = [
        db.predict_many("moe", H100, "sglang", {c: v[i : i + 1] for c, v in cols.items()})[0]
        for i in range(40)
    ]
    assert many == alone
    assert len({p.detail.split(";")[0] for p in alone}) >= 2  # two variants' tables answered


def test_memo_cost_answers_as_the_model_once_per_question() -> None:
    cluster, model = load_cluster("h100-sxm-8"), load_model("qwen3-30b-a3b")
    bare = engine_cost_model(cluster, None, engine="sglang")
    memo = memo_cost(bare)
    assert isinstance(memo, MemoCost) and memo_cost(memo) is memo
    calls = []
    real = bare.expert_ffn

    def counted(*a, **k):  # type: ignore[no-untyped-def]
        calls.append(a)
        return real(*a, **k)

    bare.expert_ffn = counted  # type: ignore[method-assign]
    for tokens in (3.5, 17.0, 3.5, 17.0, 3.5):
        assert memo.expert_ffn(model, tokens, 16, 2) == real(model, tokens, 16, 2)
    assert len(calls) == 2  # one call per distinct argument tuple
    assert memo.attention_core(model, 7, 1, 900, tp=2) == bare.attention_core(model, 7, 1, 900, 2)
    assert memo.engine == bare.engine  # plain attributes pass through


def test_a_dtype_column_resolves_each_rows_alias(db):
    # the aliases (families.DTYPE_ALIASES: bf16 -> bfloat16) per row, whatever the mix
    op, c = next((op, c) for (g, e, op) in db.tables if g == "h100_sxm" and e == "sglang"
                 for c in KERNEL_FAMILIES[op].columns if c.endswith("dtype"))  # fmt: skip
    row = _rows(db, op, 5, 0)
    row[c] = np.array(["bf16", "fp8", "bfloat16", "bf16", "fp16"])
    cols, n = normalize(KERNEL_FAMILIES[op], row)
    assert n == 5 and cols[c].tolist() == ["bfloat16", "fp8", "bfloat16", "bfloat16", "float16"]
