"""Leave-one-GPU-out transfer errors of the Blackwell kernel tables: the error stated beside a
price transferred from B200's or GB200's tables to a GPU without tables (B300, GB300).

    .venv/bin/python bench/blackwell_transfer.py            # writes the shipped file + Markdown
    .venv/bin/python bench/blackwell_transfer.py --check    # recomputes, compares, writes nothing

Three transfers, every development row of the destination priced from the source GPU's
variant of the same dtype as the database transfers (:func:`moeplan.cost.kerneldb.
evaluate_test.transfer_scored`): B200 -> GB200 and GB200 -> B200 (the same SM100 kernels on
another Blackwell part: the proxy for B200 -> B300 and GB200 -> GB300, which have no tables)
and H100 -> B200 (across a generation, reported). The test-fold rows are in no table the
database holds. Writes ``src/moeplan/data/gpu_transfer.json``: per transfer, engine (and
``all``), operation and dtype (``transfers``) and pooled over dtypes (``pooled``), median
and 90th percentile of ``|priced / measured - 1|``; the ``stated`` rows (per engine and operation, and pooled over engines) are what
:class:`~moeplan.cost.kerneldb.KernelDB` attaches to a price transferred from the reference
GPU (:data:`STATED`). ``--check`` exits 1 when the shipped file differs from a recomputation
by more than 1e-3 in any figure.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from moeplan.cost.kerneldb.evaluate_test import cells, transfer_scored
from moeplan.kernel_tables import gpu_transfer_path, kernel_db

#: (source, destination) table GPUs
PAIRS = (("b200_sxm", "gb200"), ("gb200", "b200_sxm"), ("h100_sxm", "b200_sxm"))
#: reference GPU -> the transfer whose error is stated beside its transferred prices
STATED = {"b200_sxm": ("b200_sxm", "gb200"), "gb200": ("gb200", "b200_sxm")}
OUT = Path(__file__).resolve().parents[1] / "src" / "moeplan" / "data" / gpu_transfer_path().name


def compute(ops: list[str] | None = None) -> dict[str, object]:
    db = kernel_db()
    transfers, pooled, stated = [], [], []
    for src, dst in PAIRS:
        scored = transfer_scored(db, src, dst, ops)
        measured_as = f"{src} -> {dst}"
        for c in cells(scored):
            transfers.append({"transfer": measured_as, **_row(c)})
        over = cells(replace(s, dtype=np.full(len(s.err), "all")) for s in scored)
        pooled += [{"transfer": measured_as, **_row(c)} for c in over]
        for ref, pair in STATED.items():
            if pair == (src, dst):
                stated += [{"reference": ref, "measured_as": measured_as, **_row(c)}
                           for c in over]  # fmt: skip
    return {
        "what": "|priced / measured - 1| of every development row of the destination table GPU "
        "priced from the source GPU's variant of the same dtype (the database's transfer); "
        "'stated' is attached to prices transferred from 'reference' to a GPU without tables",
        "command": "python bench/blackwell_transfer.py",
        "transfers": transfers,
        "pooled": pooled,
        "stated": stated,
    }


def _row(c) -> dict[str, object]:
    return {"engine": c.engine, "op": c.op, "dtype": c.dtype, "rows": c.rows,
            "shapes": c.shapes, "median": c.median, "p90": c.p90}  # fmt: skip


def markdown(data: dict) -> str:
    out = ["| transfer | op | dtype | rows | median | p90 |", "|---|---|---|---|---|---|"]
    for r in data["pooled"] + data["transfers"]:
        if r["engine"] == "all":
            out.append(f"| {r['transfer']} | {r['op']} | {r['dtype']} | {r['rows']:,} "
                       f"| {100 * r['median']:.1f}% | {100 * r['p90']:.1f}% |")  # fmt: skip
    return "\n".join(out)


def _figures(data: dict) -> list[tuple]:
    return [
        (tuple(str(r.get(c)) for c in ("transfer", "reference", "engine", "op", "dtype")),
         r["median"], r["p90"])
        for k in ("transfers", "pooled", "stated") for r in data[k]
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the shipped file")
    ap.add_argument("--op", action="append", help="only these operations (not with --check)")
    args = ap.parse_args(argv)
    data = compute(args.op)
    if args.check:
        shipped = json.loads(OUT.read_text(encoding="utf-8"))
        a, b = _figures(data), _figures(shipped)
        bad = len(a) != len(b) or any(
            x[0] != y[0] or abs(x[1] - y[1]) > 1e-3 or abs(x[2] - y[2]) > 1e-3
            for x, y in zip(a, b, strict=False)
        )
        print("gpu_transfer.json " + ("differs" if bad else "agrees"))
        return 1 if bad else 0
    OUT.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(markdown(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
