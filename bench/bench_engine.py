"""The serving engine's event loop on the runs one ``moeplan plan`` question makes.

Corpus: the plan question below is run once in this process with every engine run recorded
(its requests, scheduler, evaluator, fast-forward flag, horizon and stop predicate: the
general loop's runs and those of the unpreempted engines that ran to their end, so a run that
fell back to the general loop counts once); nothing is stored on disk. The
evaluators come out of the plan warm (their memos filled), so the timings below are the
engine's own loop plus memo look-ups.

Reference (same run), ``--reference``: ``general`` (the default) runs every run of the corpus
through the general event loop (``Engine(...).run()``, the engine the unpreempted engines fall
back to when a run comes to preempt), so the ratio is what :func:`simulate`'s dispatch to the
unpreempted engines saves; a git revision loads that revision's ``serve/engine/run.py`` from
``git show`` into its own module (only revisions whose engine imports resolve against this
tree). Every run of the corpus is replayed through both; each ``SimResult`` field must be
equal bit for bit (arrays compared with ``numpy.array_equal``, NaN equal to NaN), else the
bench fails. ``ratio`` = reference seconds / current seconds (> 1: faster).

    PYTHONPATH=src python bench/bench_engine.py [--reference REV] [--repeat N] [--by-kind]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import io
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np

from moeplan.serve.engine import run as engine_mod

QUESTION = [
    "plan", "--model", "qwen3-30b-a3b", "--cluster", "h100-sxm-8", "--isl", "1024",
    "--osl", "256", "--ttft-slo", "2000", "--tpot-slo", "50", "--requests", "500",
    "--no-placement", "--json", "--jobs", "1",
]  # fmt: skip
REFERENCE_REV = "general"  # the general event loop on every run (see the module docstring)


def record_corpus() -> list[tuple]:
    """Run the plan question once; every engine's inputs, in the order they ran."""
    from moeplan.cli import main
    from moeplan.serve.engine.unpreempted import UnpreemptedEngine

    corpus: list[tuple] = []
    run, fast_run = engine_mod.Engine.run, UnpreemptedEngine.run

    def recording(self):  # type: ignore[no-untyped-def]
        res = (fast_run if isinstance(self, UnpreemptedEngine) else run)(self)
        corpus.append((self.r, self.cfg, self.evaluate, self.fast, self.horizon, self.stop))
        return res

    engine_mod.Engine.run = recording  # type: ignore[method-assign]
    UnpreemptedEngine.run = recording  # type: ignore[method-assign]
    argv = sys.argv
    try:
        with (
            tempfile.TemporaryDirectory() as out,
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.suppress(SystemExit),
        ):
            sys.argv = ["moeplan", *QUESTION, "--out", out]
            main()
    finally:
        engine_mod.Engine.run = run  # type: ignore[method-assign]
        UnpreemptedEngine.run = fast_run  # type: ignore[method-assign]
        sys.argv = argv
    return corpus


def load_reference(rev: str):  # type: ignore[no-untyped-def]
    """The reference engine: ``general`` (the general event loop on every run, as a module
    with a ``simulate``), else the engine module at git revision ``rev``, imported under its
    own name."""
    if rev == "general":

        def simulate(reqs, cfg, ev, *, fast_forward=True, horizon_s=None, stop=None):  # type: ignore[no-untyped-def]  # noqa: E501
            return engine_mod.Engine(reqs, cfg, ev, fast_forward, horizon_s, stop).run()

        return types.SimpleNamespace(simulate=simulate)
    root = Path(__file__).resolve().parents[1]
    src = subprocess.run(
        ["git", "show", f"{rev}:src/moeplan/serve/engine/run.py"],
        cwd=root, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    path = Path(tempfile.mkdtemp()) / "reference_engine.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("reference_engine", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _horizon(h: float) -> float | None:
    return None if h == float("inf") else h


def replay(mod, corpus: list[tuple]) -> tuple[float, list]:  # type: ignore[no-untyped-def]
    """Seconds to run the whole corpus through ``mod``'s engine, and the results."""
    out = []
    t0 = time.process_time()
    for reqs, cfg, ev, fast, horizon, stop in corpus:
        out.append(mod.simulate(reqs, cfg, ev, fast_forward=fast, horizon_s=_horizon(horizon),
                                stop=stop))  # fmt: skip
    return time.process_time() - t0, out


def same(a, b) -> str | None:  # type: ignore[no-untyped-def]
    """The first field where two SimResults differ (None: identical bit for bit)."""
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            if x.dtype != y.dtype or not np.array_equal(x, y, equal_nan=x.dtype.kind == "f"):
                return f.name
        elif x != y or type(x) is not type(y):
            return f.name
    return None


def measure(reference: str, repeat: int) -> dict:
    """Record the corpus, time both engines on it (best of ``repeat`` interleaved passes) and
    compare their results."""
    ref = load_reference(reference)
    t0 = time.process_time()
    corpus = record_corpus()
    record_s = time.process_time() - t0
    t_ref = t_new = float("inf")
    for _ in range(repeat):  # interleaved: load on the box hits both alike
        s, res_ref = replay(ref, corpus)
        t_ref = min(t_ref, s)
        s, res_new = replay(engine_mod, corpus)
        t_new = min(t_new, s)
    bad = [
        (i, f) for i, (a, b) in enumerate(zip(res_ref, res_new, strict=True)) if (f := same(a, b))
    ]
    return {
        "runs": len(corpus),
        "prefill_only": sum(bool(np.all(c[0].osl == 1)) for c in corpus),
        "requests": sum(len(c[0]) for c in corpus),
        "iterations": sum(len(r.iter_start_s) for r in res_new),
        "record_s": record_s,
        "reference_s": t_ref,
        "current_s": t_new,
        "bad": bad,
    }


def kind(run: tuple) -> str:
    """A run's kind: a prefill-only pool, else its evaluator's class (P/D decode pools:
    DecodeStepEvaluator; attention-FFN: AFDIteration; colocated: GridEvaluator), with
    ``+stop`` when it has a stop predicate."""
    if bool(np.all(run[0].osl == 1)):
        return "prefill-only"
    return type(run[2]).__name__ + ("+stop" if run[5] is not None else "")


def by_kind(reference: str, repeat: int) -> None:
    """Print both engines' CPU seconds per kind of run (best of ``repeat`` passes each)."""
    ref, kinds = load_reference(reference), {}  # type: ignore[var-annotated]
    for c in record_corpus():
        kinds.setdefault(kind(c), []).append(c)
    for k, runs in kinds.items():
        t_ref = t_new = float("inf")
        for _ in range(repeat):  # interleaved, as in measure()
            t_ref = min(t_ref, replay(ref, runs)[0])
            t_new = min(t_new, replay(engine_mod, runs)[0])
        print(f"{k}: {len(runs)} runs, reference {t_ref:.2f} s, current {t_new:.2f} s, "
              f"ratio {t_ref / t_new:.2f}x")  # fmt: skip


def run() -> list[dict]:
    """The ``bench/run_all.py`` row: engine CPU seconds over the corpus vs the reference."""
    m = measure(REFERENCE_REV, 3)
    same_runs = m["runs"] - len(m["bad"])
    return [{
        "name": f"engine over the plan question's {m['runs']} runs ({m['iterations']} iterations)",
        "value": m["current_s"], "unit": "s CPU", "reference": m["reference_s"],
        "ratio": m["reference_s"] / m["current_s"], "target": "identical results",
        "note": f"reference = the engine run by {REFERENCE_REV!r}; ratio = speed-up; "
                f"{same_runs}/{m['runs']} runs identical",
    }]  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference", default=REFERENCE_REV, help="git revision of the reference")
    ap.add_argument("--repeat", type=int, default=3, help="timed passes (best is reported)")
    ap.add_argument("--by-kind", action="store_true", help="times per kind of run instead")
    args = ap.parse_args()
    if args.by_kind:
        by_kind(args.reference, args.repeat)
        return 0
    m = measure(args.reference, args.repeat)
    iters, t_ref, t_new, bad = m["iterations"], m["reference_s"], m["current_s"], m["bad"]
    print(f"corpus: {m['runs']} engine runs recorded in {m['record_s']:.1f} s CPU")
    print(
        f"runs {m['runs']} ({m['prefill_only']} prefill-only), requests {m['requests']}, "
        f"iterations {iters} (fast-forwarded steps expanded)"
    )
    print(f"reference ({args.reference}): {t_ref:.2f} s CPU, {iters / t_ref:,.0f} iterations/s")
    print(f"current: {t_new:.2f} s CPU, {iters / t_new:,.0f} iterations/s")
    print(f"ratio reference/current: {t_ref / t_new:.2f}x (best of {args.repeat} passes each)")
    print(f"results identical bit for bit: {m['runs'] - len(bad)} / {m['runs']} runs")
    for i, f in bad[:10]:
        print(f"  run {i}: field {f} differs")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
