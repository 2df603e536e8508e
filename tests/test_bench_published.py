"""bench/bench_published.py's sensitivity table: each published row priced again with every
unsourced step changed, the steps restored afterwards, and the table in
docs/benchmarks/published.md equal to what the bench prints."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from moeplan.cost import wideep
from moeplan.cost.kerneldb import KernelDB, fit
from moeplan.errors import MoeplanError
from moeplan.serve.iteration import phase

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import bench_published as bp  # noqa: E402


def _doc_rows() -> dict[str, list[float]]:
    text = (ROOT / "docs" / "benchmarks" / "published.md").read_text(encoding="utf-8")
    part = text.split("## Sensitivity to the unsourced steps", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in part.splitlines():
        line = re.sub(r"<!--.*?-->", "", line)
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == len(bp.SENSITIVITY) + 2 and cells[1][:1].isdigit():
            rows[cells[0]] = [float(c) for c in cells[1:]]
    return rows


def test_sensitivity_table_is_the_bench_output_and_restores_every_step():
    before = (wideep.TBO_RESERVED_SMS, phase.TBO_SLOWED, fit.LINK_FLOOR_EXPONENT)
    internode, kdb_predict = wideep.WideEP._internode, KernelDB.predict
    table = bp.sensitivity()
    assert KernelDB.predict is kdb_predict
    assert before == (wideep.TBO_RESERVED_SMS, phase.TBO_SLOWED, fit.LINK_FLOOR_EXPONENT)
    assert wideep.WideEP._internode is internode
    doc = _doc_rows()
    assert len(doc) == sum(1 for _, b, _ in table if b)  # refused rows have no ratio
    labels = [lab for lab, *_ in bp.SENSITIVITY]
    for d, base, alts in table:
        name = bp.label(d)
        if not base:
            assert name not in doc and bp.refusal(d), name
            continue
        assert [round(x, 3) for x in [base, *alts]] == doc[name], name
        moved = {lab for lab, a in zip(labels, alts, strict=True) if abs(a - base) > 1e-9}
        wide_nvlink = {lab for lab in labels if "NVLink ranks" in lab}
        unmeasured = {lab for lab in labels if "unmeasured" in lab}
        host = {lab for lab in labels if "host link" in lab}
        # the host link prices the weight offload's copies only: the GB200 NVFP4 prefill's
        assert not (moved & host) or d.offload, name
        moved -= host
        # DeepEP past 8 ranks inside an NVLink domain is the GB200 decode's alone (EP48 in one
        # rack); the H100 / H800 rows cross nodes past 8 and the GB200 prefill runs EP4
        assert bool(moved & wide_nvlink) == (d.phase == "decode" and d.cluster == "gb200-nvl72")
        # every H800 price is transferred from H100's tables; H100's and GB200's prefill
        # are measured
        if d.cluster == "h800-sxm-8":
            assert unmeasured <= moved, name
        moved -= wide_nvlink | unmeasured
        # decode has no SM reserve (SGLang's decode strategy sets no DeepGEMM cap) and its
        # inter-node low-latency kernels are DeepEP's published figures, no transferred model:
        # no other unsourced step moves it; every prefill row with two-batch overlap feels
        # the reserve and the transfer
        if d.phase == "decode" or not d.tbo:
            assert moved == set(), (name, moved)
            continue
        assert {lab for lab in labels if "TBO" in lab} <= moved
        assert {"link-floor exponent 0", "link-floor exponent 1"} <= moved


def test_gb200_decode_batch_fills_the_kv_cache():
    """The BF16-attention decode row's batch is the largest whose KV fits beside the
    weights (one more sequence does not fit), and fp8 KV holds the blog's 1,408."""
    bf16 = next(d for d in bp.DEPLOYMENTS if d.fill_kv)
    pm = bp._phase_model(bf16)
    n = bp.batch(bf16)
    pm.memory(n, bf16.context, n)
    with pytest.raises(MoeplanError):
        pm.memory(n + 1, bf16.context, n + 1)
    assert 1000 < n < 1408
