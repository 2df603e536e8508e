"""Keep what a command prints as an ``output`` record of the benchmark docs.

    python bench/record_output.py NAME -- python bench/bench_dep.py --report
    python bench/record_output.py NAME -- python -m moeplan calibrate --kernels --json

runs the command from the repository root, saves its standard output verbatim to
``docs/benchmarks/data/out/NAME.json`` (when it is one JSON document) or ``NAME.txt`` (printed
text), and writes the record ``docs/benchmarks/data/NAME.json`` (kind ``output``: this command,
the date, the load average and that file). Standard error passes through. A command that
fails writes nothing. A doc block marked ``<!-- figures: NAME -->`` is then checked against
the saved output (tests/doc_figures.py), so its figures change by running the command again,
not by hand.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "benchmarks" / "data"


def record(name: str, command: list[str]) -> Path:
    """Run ``command``, save its output and the record ``NAME``; the saved file's path."""
    run = [sys.executable, *command[1:]] if command[0] == "python" else command
    done = subprocess.run(run, cwd=ROOT, stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{shlex.join(command)}: exit {done.returncode}; nothing written")
    try:
        json.loads(done.stdout)
        suffix = ".json"
    except ValueError:
        suffix = ".txt"
    out = DATA / "out" / f"{name}{suffix}"
    out.parent.mkdir(parents=True, exist_ok=True)
    for stale in out.parent.glob(f"{name}.*"):
        stale.unlink()
    out.write_text(done.stdout, encoding="utf-8")
    doc = {
        "command": f"python bench/record_output.py {name} -- {shlex.join(command)}",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "kind": "output",
        "load_average": round(os.getloadavg()[0], 2),
        "file": str(out.relative_to(ROOT)),
    }
    (DATA / f"{name}.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python bench/record_output.py NAME -- COMMAND ...", file=sys.stderr)
        return 2
    record(argv[0], argv[2:])  # "python" runs as this interpreter
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
