"""Leave-one-engine-version-out transfer errors of the kernel tables, on H100 (the one GPU
with several releases of one engine's tables): the error ``--engine-version`` states beside
a price read from another release's table (:mod:`moeplan.cost.kerneldb.version_transfer`).

    .venv/bin/python bench/version_transfer.py            # writes the shipped file + Markdown
    .venv/bin/python bench/version_transfer.py --check    # recomputes, compares, writes nothing

Writes ``src/moeplan/data/version_transfer.json`` (per left-out release, per engine and
operation, per operation pooled over engines) and prints the Markdown tables of
``docs/benchmarks/version_transfer.md``. ``--check`` exits 1 when the shipped file differs from
a recomputation by more than 1e-3 in any figure.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from moeplan.cost.kerneldb.version_transfer import TransferRow, leave_one_version_out, pooled
from moeplan.kernel_tables import FILES, _read, table_devices, table_versions

GPU = "h100_sxm"
OUT = Path(__file__).resolve().parents[1] / "src" / "moeplan" / "data" / "version_transfer.json"


def compute(gpu: str = GPU) -> dict[str, object]:
    """Every engine's own multi-release tables on ``gpu``, each release left out in turn."""
    device = table_devices()[gpu]
    rows: list[TransferRow] = []
    for (g, engine, name), paths in sorted(table_versions().items()):
        if g != gpu or len(paths) < 2 or name.startswith("wideep_deepep"):
            continue
        for op, rename, lat, scale in FILES[name]:
            tables = {v: _read(p, op, rename, lat, scale, gpu, engine, v) for v, p in paths.items()}
            rows += leave_one_version_out(tables, device)
    by_engine, by_op = [], []
    for engine, op in sorted({(r.engine, r.op) for r in rows}):
        agg = pooled(r for r in rows if (r.engine, r.op) == (engine, op))
        by_engine.append({"engine": engine, "op": op, **agg})
    for op in sorted({r.op for r in rows}):
        by_op.append({"op": op, **pooled(r for r in rows if r.op == op)})
    return {
        "gpu": gpu,
        "what": "|priced / measured - 1| of every row of a left-out engine release, priced "
        "from the table moeplan.backends.versions.table_for picks among the other releases",
        "command": "python bench/version_transfer.py",
        "transfers": [r.to_dict() for r in rows],
        "by_engine": by_engine,
        "by_op": by_op,
    }


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def markdown(data: dict) -> str:
    out = [
        "| engine | op | left out | priced with | how | rows | median | p90 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in data["transfers"]:
        out.append(
            f"| {r['engine']} | {r['op']} | {r['left_out']} | {r['priced_with']} | {r['how']} "
            f"| {r['rows']:,} | {_pct(r['median'])} | {_pct(r['p90'])} |"
        )
    out += ["", "| op | engines pooled | rows | median | p90 |", "|---|---|---|---|---|"]
    for r in data["by_op"]:
        engines = sorted({p.split()[0] for p in r["pairs"]})
        out.append(
            f"| {r['op']} | {', '.join(engines)} | {r['rows']:,} | {_pct(r['median'])} "
            f"| {_pct(r['p90'])} |"
        )
    return "\n".join(out)


def _figures(data: dict) -> list[tuple]:
    return [
        (k, tuple(r.get(c) for c in ("engine", "op", "left_out")), r["median"], r["p90"])
        for k in ("transfers", "by_engine", "by_op")
        for r in data[k]
    ]


def _differ(x: tuple, y: tuple) -> bool:
    """Two figures rows differ: another transfer, or a figure moved by more than 1e-3."""
    return x[:2] != y[:2] or any(
        (p is None) != (q is None) or (p is not None and abs(p - q) > 1e-3)
        for p, q in zip(x[2:], y[2:], strict=True)
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the shipped file")
    args = ap.parse_args(argv)
    data = compute()
    if args.check:
        shipped = json.loads(OUT.read_text(encoding="utf-8"))
        a, b = _figures(data), _figures(shipped)
        bad = len(a) != len(b) or any(_differ(x, y) for x, y in zip(a, b, strict=False))
        print("version_transfer.json " + ("differs" if bad else "agrees"))
        return 1 if bad else 0
    OUT.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(markdown(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
