"""bench/bench_published.py's sensitivity table: each published row priced again with every
unsourced step changed, the steps restored afterwards, and the table in
docs/benchmarks/published.md equal to what the bench prints."""

from __future__ import annotations

import sys
from pathlib import Path

from moeplan.cost import wideep
from moeplan.cost.kerneldb import fit
from moeplan.serve.iteration import phase

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import bench_published as bp  # noqa: E402


def _doc_rows() -> dict[str, list[float]]:
    text = (ROOT / "docs" / "benchmarks" / "published.md").read_text(encoding="utf-8")
    part = text.split("## Sensitivity to the unsourced steps", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in part.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == len(bp.SENSITIVITY) + 2 and cells[1][:1].isdigit():
            rows[cells[0]] = [float(c) for c in cells[1:]]
    return rows


def test_sensitivity_table_is_the_bench_output_and_restores_every_step():
    before = (wideep.TBO_RESERVED_SMS, phase.TBO_SLOWED, fit.LINK_FLOOR_EXPONENT)
    internode = wideep.WideEP._internode
    table = bp.sensitivity()
    assert before == (wideep.TBO_RESERVED_SMS, phase.TBO_SLOWED, fit.LINK_FLOOR_EXPONENT)
    assert wideep.WideEP._internode is internode
    doc = _doc_rows()
    assert len(doc) == len(bp.DEPLOYMENTS)
    labels = [lab for lab, *_ in bp.SENSITIVITY]
    for d, base, alts in table:
        name = f"{d.source} {d.phase} {d.context}" + (
            " perfect EPLB" if "perfect" in d.note else ""
        )
        assert [round(x, 3) for x in [base, *alts]] == doc[name], name
        moved = {lab for lab, a in zip(labels, alts, strict=True) if abs(a - base) > 1e-9}
        # decode has no SM reserve (SGLang's decode strategy sets no DeepGEMM cap) and its
        # inter-node low-latency kernels are DeepEP's published figures, no transferred model:
        # no unsourced step moves it; every prefill row feels the reserve and the transfer
        if d.phase == "decode":
            assert moved == set(), (name, moved)
            continue
        assert {lab for lab in labels if "TBO" in lab} <= moved
        assert {"link-floor exponent 0", "link-floor exponent 1"} <= moved
