"""Record the JSON a ``moeplan`` command prints as a figures record of the benchmark docs.

    python bench/record_cli.py NAME [--keep KEY,KEY,...] -- strategy --model deepseek-v3 ... --json

runs ``python -m moeplan ARGS`` and keeps its JSON answer in
``docs/benchmarks/data/NAME.json`` (kind ``bench``: one row per command, its ``args`` and its
``output``; a second command with other arguments adds a row, the same arguments replace
theirs), with the date and the load average. ``--keep`` keeps only the named keys of the
answer's objects, at any depth (the figures a doc cites, not every priced detail: a smaller
record also matches fewer numbers by chance). A doc block marked ``<!-- figures: NAME -->`` is
then checked against those answers (tests/doc_figures.py), so a figure of a deterministic
command changes by recording it again, not by hand.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "docs" / "benchmarks" / "data"


def kept(x, keys: set[str] | None):
    """``x`` with only the dict keys in ``keys`` (all when ``None``), at every depth."""
    if keys is None:
        return x
    if isinstance(x, dict):
        return {k: kept(v, keys) for k, v in x.items() if k in keys}
    if isinstance(x, list):
        return [kept(v, keys) for v in x]
    return x


def record(name: str, args: list[str], keep: list[str] | None = None) -> dict:
    """Run ``moeplan ARGS``, add its JSON answer (only the ``keep`` keys, when given) to the
    record ``NAME`` and return it."""
    done = subprocess.run(
        [sys.executable, "-m", "moeplan", *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"moeplan {' '.join(args)}: exit {done.returncode}: {done.stderr[-500:]}")
    output = kept(json.loads(done.stdout), set(keep) if keep else None)
    path = DATA / f"{name}.json"
    # a transcribed record of the same name (no rows) is replaced by the machine-written one
    rows = json.loads(path.read_text()).get("rows", []) if path.exists() else []
    row = {"args": args, **({"keep": keep} if keep else {}), "output": output}
    rows = [r for r in rows if r.get("args") != args] + [row]
    doc = {
        "command": f"python bench/record_cli.py {name} [--keep KEYS] -- ARGS (each row's)",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "kind": "bench",
        "load_average": round(os.getloadavg()[0], 2),
        "rows": rows,
    }
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return output


def main(argv: list[str]) -> int:
    keep = None
    if len(argv) > 2 and argv[1] == "--keep":
        keep, argv = argv[2].split(","), [argv[0], *argv[3:]]
    if len(argv) < 3 or argv[1] != "--":
        print(
            "usage: python bench/record_cli.py NAME [--keep KEYS] -- MOEPLAN_ARGS ...",
            file=sys.stderr,
        )
        return 2
    record(argv[0], argv[2:], keep)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
