"""Write or check the manifest of the frozen kernel-table test fold.

The rule is :mod:`moeplan.cost.kerneldb.frozen_fold`; the manifest
(``src/moeplan/data/test_fold.json``) records it with, per frozen table, its rows, its
distinct shapes, its test-fold rows and shapes and the SHA-256 of its sorted test-fold shape
keys, so a later copy of a table that moves a row into or out of the fold is caught.

Run: ``PYTHONPATH=src python bench/freeze_test_fold.py ROOT`` checks every frozen table
under ``ROOT`` (a kernel-table root laid out ``gpu/op/engine/version/file.parquet``, such as
the shared data's ``measured/kernels``) against the manifest and prints the per-table counts;
``--write`` writes the manifest from ``ROOT`` instead (once, when the fold is frozen).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from moeplan.cost.kerneldb import frozen_fold
from moeplan.kernel_tables import frozen_test_rows, table_relpath

MANIFEST = Path(__file__).resolve().parents[1] / "src" / "moeplan" / "data" / "test_fold.json"


def table_entry(path: Path) -> dict:
    """The manifest entry of one frozen table."""
    table, test, keys = frozen_test_rows(path)
    fold = [k for k, t in zip(keys, test, strict=True) if t]
    return {
        "path": table_relpath(path),
        "rows": table.num_rows,
        "shapes": len(set(keys)),
        "test_rows": int(test.sum()),
        "test_shapes": len(set(fold)),
        "digest": frozen_fold.fold_digest(fold),
    }


def frozen_paths(root: Path) -> list[Path]:
    return [
        p
        for p in sorted(root.glob("*/*/*/*/*.parquet"))
        if frozen_fold.frozen_table(table_relpath(p))
    ]


def manifest(root: Path, frozen_on: str) -> dict:
    tables = [table_entry(p) for p in frozen_paths(root)]
    return {
        "what": "the frozen test fold of the kernel tables (moeplan.cost.kerneldb.frozen_fold)",
        "frozen_on": frozen_on,
        "rule": frozen_fold.RULE,
        "modulus": frozen_fold.MODULUS,
        "residue": frozen_fold.RESIDUE,
        "frozen_gpus": list(frozen_fold.FROZEN_GPUS),
        "frozen_versions": [list(v) for v in frozen_fold.FROZEN_VERSIONS],
        "developed": list(frozen_fold.DEVELOPED),
        "token_axes": sorted(frozen_fold.TOKEN_AXES),
        "load_columns": sorted(frozen_fold.LOAD_COLUMNS),
        "totals": {
            k: sum(t[k] for t in tables) for k in ("rows", "shapes", "test_rows", "test_shapes")
        }
        | {"tables": len(tables)},
        "tables": tables,
    }


def check(root: Path, recorded: dict) -> list[str]:
    """Differences between the frozen tables under ``root`` and the manifest."""
    by_path = {t["path"]: t for t in recorded["tables"]}
    bad = []
    for p in frozen_paths(root):
        got = table_entry(p)
        want = by_path.get(got["path"])
        if want is None:
            bad.append(f"{got['path']}: frozen by the rule, missing from the manifest")
        elif got != want:
            bad.append(f"{got['path']}: {got} != manifest {want}")
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--frozen-on", default="2026-12-01")
    a = ap.parse_args()
    if a.write:
        m = manifest(a.root, a.frozen_on)
        MANIFEST.write_text(json.dumps(m, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {MANIFEST.name}: {m['totals']}")
        return 0
    recorded = json.loads(MANIFEST.read_text(encoding="utf-8"))
    bad = check(a.root, recorded)
    for t in recorded["tables"]:
        print(f"{t['path']}: {t['test_rows']} of {t['rows']} rows, {t['test_shapes']} shapes")
    print(f"totals: {recorded['totals']}")
    print("\n".join(bad) if bad else "manifest matches the rule on every frozen table")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
