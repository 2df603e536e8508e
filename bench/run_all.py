"""Run every ``bench/bench_*.py`` and print one table.

A benchmark module that defines ``run() -> list[dict]`` (callable without arguments) is run;
each dict has ``name`` (what was measured), ``value`` and ``unit``, and — because this
machine is shared and noisy — a ``reference`` measured in the same run and ``ratio`` (value
/ reference or the speedup, as the row's ``note`` says), plus optional ``target`` text. A
module without one is a standalone benchmark (it installs a peer, sweeps for an hour, or
takes its own arguments): the table names it with the command that runs it. Run one file
alone with ``python bench/bench_x.py``; run all with ``make bench``.

``--record`` also writes each benchmark's rows to ``docs/benchmarks/data/<bench>.json`` with
the command, the date and the load average: the figures the docs quote from it are checked
against that file (tests/test_docs_benchmarks.py), so a figure is changed by rerunning its
benchmark, not by hand.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    # registered as imported: dataclasses and pickled functions look their module up there
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def _runnable(run: object) -> bool:
    """A ``run()`` callable without arguments."""
    if not callable(run):
        return False
    params = inspect.signature(run).parameters.values()
    return all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
               for p in params)  # fmt: skip


def record(folder: Path, bench: str, rows: list[dict]) -> None:
    """One benchmark's rows with what produced them (command, UTC date, load average)."""
    folder.mkdir(parents=True, exist_ok=True)
    doc = {
        "command": f"python bench/run_all.py --record {bench}",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "kind": "bench",
        "load_average": round(os.getloadavg()[0], 2),
        "rows": rows,
    }
    (folder / f"{bench}.json").write_text(json.dumps(doc, indent=1) + "\n")


def main(argv: list[str]) -> int:
    here = Path(__file__).parent
    recording = "--record" in argv
    only = {a for a in argv if a != "--record"}
    rows: list[dict] = []
    failed: list[str] = []
    for path in sorted(here.glob("bench_*.py")):
        if only and path.stem not in only:
            continue
        t0 = time.perf_counter()
        try:
            run = getattr(_load(path), "run", None)
            if not _runnable(run):
                rows.append({"bench": path.stem, "name": "standalone benchmark (not run here)",
                             "note": f"python bench/{path.name} (its docstring says how)"})  # fmt: skip
                continue
            got = run()
        except Exception as err:  # one broken benchmark does not hide the others' rows
            failed.append(path.stem)
            rows.append({"bench": path.stem, "name": "FAILED",
                         "note": f"{type(err).__name__}: {err}"[:300]})  # fmt: skip
            continue
        for row in got:
            rows.append({"bench": path.stem, **row})
        if recording:
            record(here.parent / "docs" / "benchmarks" / "data", path.stem, got)
        print(f"{path.stem}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    table = Table(title="moeplan benchmarks")
    for col in ("bench", "name", "value", "unit", "reference", "ratio", "target", "note"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            *(
                _fmt(r.get(c, ""))
                for c in ("bench", "name", "value", "unit", "reference", "ratio", "target", "note")
            )
        )
    Console(width=200).print(table)
    out = here.parent / "out" / "bench.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(rows, indent=1))
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
