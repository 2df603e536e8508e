"""Record the JSON a ``moeplan`` command prints as a figures record of the benchmark docs.

    python bench/record_cli.py NAME -- strategy --model deepseek-v3 --cluster mixserve-910b --json

runs ``python -m moeplan ARGS`` and keeps its JSON answer in
``docs/benchmarks/data/NAME.json`` (kind ``bench``: one row per command, its ``args`` and its
``output``; a second command with other arguments adds a row, the same arguments replace
theirs), with the date and the load average. A doc block marked ``<!-- figures: NAME -->`` is
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


def record(name: str, args: list[str]) -> dict:
    """Run ``moeplan ARGS``, add its JSON answer to the record ``NAME`` and return it."""
    done = subprocess.run(
        [sys.executable, "-m", "moeplan", *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"moeplan {' '.join(args)}: exit {done.returncode}: {done.stderr[-500:]}")
    output = json.loads(done.stdout)
    path = DATA / f"{name}.json"
    rows = json.loads(path.read_text())["rows"] if path.exists() else []
    rows = [r for r in rows if r.get("args") != args] + [{"args": args, "output": output}]
    doc = {
        "command": f"python bench/record_cli.py {name} -- ARGS (each row's args)",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "kind": "bench",
        "load_average": round(os.getloadavg()[0], 2),
        "rows": rows,
    }
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return output


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python bench/record_cli.py NAME -- MOEPLAN_ARGS ...", file=sys.stderr)
        return 2
    record(argv[0], argv[2:])
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
