"""``moeplan bench``: a benchmark simulated as ``vllm bench serve`` (and
``python -m sglang.bench_serving``, which sends and measures the same way) runs it.

A bench run is finite: every prompt of ``--num-prompts`` is sent (:mod:`.bench_workload`:
the dataset's lengths, the send times, the concurrency cap) and served to its last token,
and the figures are the benchmark's over the whole run — the duration is the last
completion, as ``benchmark_duration`` is in ``vllm/benchmarks/serve.py`` (``benchmark``), so
a burst's TTFT wave and its longest requests are in it. That is not a steady-state probe:
serve-sim's rate searches measure a window of a long run; this one measures all of it.

The engine runs with its own defaults (or the launch command's settings): nothing is
searched. Copies of an instance (``--replicas``, a launch command's plain data parallelism)
take the prompts round-robin and each its share of the concurrency cap.

Decode-only iterations of more than 64 sequences are priced on the batch grid of
:mod:`moeplan.serve.iteration.batch_grid` (linear between batch sizes 1/32 apart), as the
capacity search prices them; prefill and mixed iterations exactly. On 1,000 prompts of
1,000 / 1,000 tokens (gpt-oss-120b, vLLM TP2, H100) that halves the run's CPU time and moves
its figures by at most 0.03 % (``tests/test_bench.py`` checks the grid against exact prices).

Definitions, as ``calculate_metrics`` in ``vllm/benchmarks/serve.py`` (read at the stored
``009e6d4a``): TTFT from the request's send to its first token; TPOT per request
``(e2e - ttft) / (output - 1)`` over requests of more than one output token (the first token
excluded); ITL every gap between two consecutive chunks of a request (one token per chunk,
or an MTP step's tokens); E2EL send to last token; means, medians, standard deviations and
percentiles (numpy's linear interpolation) over requests (ITL: over gaps); throughputs over
the duration; ``max_concurrent_requests`` the peak of requests in flight (half-open
intervals ``[send, finish)``); ``max_output_tokens_per_s`` ("Peak output token throughput")
the most chunks received in one second of the run, seconds counted from the first send
(``int(t - first send)``; every chunk of a request: its first token, one per decode step,
one at the end of a preempted request's recomputed prompt: :func:`chunk_times`) — one token
per chunk, so tokens, but for MTP, whose chunks carry a step's tokens (vLLM counts the
chunks its timestamps mark). The JSON keys are ``vllm bench serve --save-result``'s
(:data:`VLLM_KEYS`), and moeplan's own under ``moeplan``.

A run above the engine's CUDA-graph capture size says so
(:mod:`moeplan.serve.cuda_graphs`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from moeplan.backends import priced_engine
from moeplan.commands.bench_workload import (
    DATASETS,
    DEFAULT_NUM_PROMPTS,
    MAX_PROMPTS,
    Prompts,
    random_lengths,
    read_lengths,
    send_times,
    sharegpt_lengths,
)
from moeplan.commands.serve_inputs import ServeSimFlags
from moeplan.errors import require
from moeplan.search.job.outcome import graphs_line, host_line, sources_line
from moeplan.serve.cuda_graphs import graphs_record
from moeplan.serve.engine.config import SimResult
from moeplan.serve.host_record import host_record
from moeplan.serve.iteration.price_sources import layout_run_price_sources, pd_runs_price_sources
from moeplan.serve.workload.arrivals import Requests

#: the keys of a ``vllm bench serve --save-result`` file that moeplan predicts, in that
#: file's names (``vllm/benchmarks/serve.py``, ``benchmark``: ``result`` and
#: ``process_one_metric``'s ``mean_/median_/std_/pNN_`` keys, percentiles 99 by default)
METRICS = ("ttft", "tpot", "itl", "e2el")
VLLM_KEYS = (
    "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
    "request_throughput", "output_throughput", "total_token_throughput",
    "max_output_tokens_per_s", "max_concurrent_requests",
    *(f"{s}_{m}_ms" for m in METRICS for s in ("mean", "median", "std", "p99")),
)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class BenchSettings:
    """The benchmark client's settings, named as ``vllm bench serve``'s flags."""

    num_prompts: int | None = None  # None: the dataset file's rows, else vLLM's 1000
    request_rate: float = math.inf
    burstiness: float = 1.0
    max_concurrency: int | None = None
    seed: int = 0
    dataset_name: str = "random"
    dataset_path: str | None = None
    random_input_len: int = 1024
    random_output_len: int = 128
    random_range_ratio: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["request_rate"] = "inf" if math.isinf(self.request_rate) else self.request_rate
        return d


def prompts_of(s: BenchSettings) -> Prompts:
    """The prompts ``s`` sends (one line for a setting moeplan cannot express)."""
    require(
        s.dataset_name in DATASETS,
        f"--dataset-name ({s.dataset_name!r}) must be one of {', '.join(DATASETS)} (other "
        "prompts: --dataset-path of their lengths)",
    )
    n = s.num_prompts
    require(n is None or 1 <= n <= MAX_PROMPTS, f"--num-prompts ({n}) must be in 1..{MAX_PROMPTS}")
    if s.dataset_path is not None:
        return read_lengths(s.dataset_path, n)
    if s.dataset_name == "sharegpt":
        return sharegpt_lengths(n or DEFAULT_NUM_PROMPTS, s.seed)
    return random_lengths(
        n or DEFAULT_NUM_PROMPTS, s.random_input_len, s.random_output_len,
        s.random_range_ratio, s.seed,
    )  # fmt: skip


def check_settings(s: BenchSettings) -> None:
    """One line for a client setting out of range."""
    require(
        s.max_concurrency is None or s.max_concurrency >= 1,
        f"--max-concurrency ({s.max_concurrency}) must be >= 1",
    )
    require(
        s.request_rate > 0 and not math.isnan(s.request_rate),
        f"--request-rate ({s.request_rate}) must be positive or inf",
    )
    require(s.burstiness > 0, f"--burstiness ({s.burstiness}) must be positive")
    require(
        s.burstiness == 1.0 or not math.isinf(s.request_rate),
        f"--burstiness ({s.burstiness}) applies to a finite --request-rate (inf sends every "
        "prompt at t = 0)",
    )


def requests_of(p: Prompts, due: np.ndarray, max_concurrency: int | None) -> Requests:
    """The engine's request stream: sent at ``due``, or held by a cap of ``max_concurrency``
    requests in flight (a closed loop of that many clients whose requests are not sent
    before they are due: :attr:`Requests.due_s`)."""
    n = len(p.isl)
    zero = np.zeros(n, dtype=np.int64)
    if max_concurrency is None or max_concurrency >= n:
        return Requests(arrival_s=due, isl=p.isl, osl=p.osl, cached=zero)
    return Requests(
        arrival_s=np.zeros(n), isl=p.isl, osl=p.osl, cached=zero, closed=max_concurrency,
        due_s=due if bool(np.any(due > 0)) else None,
    )  # fmt: skip


def shares(n: int, replicas: int, cap: int | None) -> list[tuple[np.ndarray, int | None]]:
    """Round-robin: each copy's prompt indices and its part of the concurrency cap."""
    out = []
    for r in range(replicas):
        idx = np.arange(r, n, replicas)
        k = None if cap is None else max(1, cap // replicas + (1 if r < cap % replicas else 0))
        if len(idx):
            out.append((idx, k))
    return out


@dataclass(frozen=True)
class Run:
    """A finite run's per-request record (send order) and its inter-token gaps."""

    sent_s: np.ndarray
    first_s: np.ndarray
    finish_s: np.ndarray
    isl: np.ndarray
    osl: np.ndarray
    itl_s: np.ndarray
    itl_weight: np.ndarray
    preemptions: int
    chunk_s: np.ndarray  # when each chunk reached the client (:func:`chunk_times`)


def chunk_times(res: SimResult) -> np.ndarray:
    """When each chunk of ``res``'s requests reached the client: every first token, every
    token a prompt's completion delivered after it (``resumed_s``), and at each iteration's
    end one per decoding request (``iter_decode``); unordered."""
    first = res.first_token_s[np.isfinite(res.first_token_s)]
    return np.concatenate([first, res.resumed_s, np.repeat(res.iter_end_s, res.iter_decode)])


def peak_chunks_per_s(sent: np.ndarray, finish: np.ndarray, chunks: np.ndarray) -> float:
    """vLLM's "Peak output token throughput": the most chunks in one second-wide bucket,
    bucket ``int(t - first send)`` of ``ceil(last finish - first send) + 1`` buckets
    (``calculate_metrics``, vllm/benchmarks/serve.py at ``009e6d4a``)."""
    t0 = float(np.min(sent))
    n = int(np.ceil(float(np.max(finish)) - t0)) + 1
    b = np.floor(chunks - t0).astype(np.int64)  # int() of a non-negative offset
    b = b[(b >= 0) & (b < n)]
    return float(np.bincount(b, minlength=n).max()) if b.size else 0.0


def merge(parts: list[tuple[np.ndarray, SimResult]], n: int) -> Run:
    """The copies' runs as one record in send order."""
    sent, first, fin = np.zeros(n), np.zeros(n), np.zeros(n)
    isl, osl = np.zeros(n, np.int64), np.zeros(n, np.int64)
    for idx, res in parts:
        # a closed loop sends its requests in index order (arrival_s is when each was sent)
        sent[idx], first[idx], fin[idx] = res.arrival_s, res.first_token_s, res.finish_s
        isl[idx], osl[idx] = res.isl, res.osl
    require(bool(np.all(np.isfinite(fin))), "bench: a prompt was never served (simulator stopped)")
    return Run(
        sent_s=sent, first_s=first, finish_s=fin, isl=isl, osl=osl,
        itl_s=np.concatenate([r.itl_s for _, r in parts]),
        itl_weight=np.concatenate([r.itl_weight for _, r in parts]),
        preemptions=sum(r.preemptions for _, r in parts),
        chunk_s=np.concatenate([chunk_times(r) for _, r in parts]),
    )  # fmt: skip


def _stats(x: np.ndarray, name: str, w: np.ndarray | None = None) -> dict[str, float]:
    """vLLM's mean/median/std/p99 of ``x`` (seconds) in ms; ``w``: integer weights (each
    value counted that many times); an empty sample is 0, as ``np.mean(xs or 0)``."""
    if w is not None:
        x = np.repeat(x, w)
    if x.size == 0:
        x = np.zeros(1)
    ms = x * 1e3
    return {
        f"mean_{name}_ms": float(np.mean(ms)),
        f"median_{name}_ms": float(np.median(ms)),
        f"std_{name}_ms": float(np.std(ms)),
        f"p99_{name}_ms": float(np.percentile(ms, 99)),
    }


def peak_concurrency(sent: np.ndarray, finish: np.ndarray) -> int:
    """Most requests in flight at once over half-open ``[sent, finish)`` (a finish at the
    instant of a send frees its slot first, as vLLM's sweep orders them)."""
    t = np.concatenate([sent, finish])
    d = np.concatenate([np.ones(len(sent), np.int64), -np.ones(len(finish), np.int64)])
    order = np.lexsort((d, t))
    return int(np.max(np.cumsum(d[order])))


def vllm_metrics(run: Run) -> dict[str, Any]:
    """The run's figures under :data:`VLLM_KEYS` (module docstring for the definitions)."""
    ttft = run.first_s - run.sent_s
    e2e = run.finish_s - run.sent_s
    many = run.osl > 1
    tpot = (e2e[many] - ttft[many]) / (run.osl[many] - 1)
    dur = float(np.max(run.finish_s))
    tin, tout = int(run.isl.sum()), int(run.osl.sum())
    out: dict[str, Any] = {
        "duration": dur,
        "completed": len(run.isl),
        "failed": 0,
        "total_input_tokens": tin,
        "total_output_tokens": tout,
        "request_throughput": len(run.isl) / dur,
        "output_throughput": tout / dur,
        "total_token_throughput": (tin + tout) / dur,
        "max_output_tokens_per_s": peak_chunks_per_s(run.sent_s, run.finish_s, run.chunk_s),
        "max_concurrent_requests": peak_concurrency(run.sent_s, run.finish_s),
    }
    out.update(_stats(ttft, "ttft"))
    out.update(_stats(tpot, "tpot"))
    out.update(_stats(run.itl_s, "itl", run.itl_weight))
    out.update(_stats(e2e, "e2el"))
    return out


def simulate_bench(
    setup: Any, cm: Any, engine: str, p: Prompts, s: BenchSettings
) -> tuple[Run, dict[str, Any]]:
    """Serve ``p`` as ``s`` sends them on ``setup``'s deployment (a
    :class:`moeplan.commands.serve_inputs.ServeSimSetup`) with the engine's defaults or the
    given knobs: the run and its engine record."""
    from moeplan.serve import IterationModel
    from moeplan.serve.engine.run import simulate
    from moeplan.serve.iteration.batch_grid import GridEvaluator
    from moeplan.serve.iteration.instance_knobs import resolve_knobs
    from moeplan.serve.knobs import engine_config

    m, c, d = setup.model, setup.cluster, setup.deployment
    if d.pd is not None:
        return _simulate_pd(setup, cm, engine, p, s)
    lay = d.layout
    knobs = resolve_knobs(cm.engine, m, c, lay, **setup.knob_flags, version=cm.engine_version)
    cfg = engine_config(
        engine, m, c, lay, chunk_tokens=d.chunk_tokens, max_running=d.max_running,
        kv_scale=knobs.kv_scale, mtp=knobs.mtp, mem_fraction=knobs.mem_fraction,
        deepep=knobs.a2a == "deepep",
    )  # fmt: skip
    big = int(np.max(p.isl + p.osl))
    require(
        big <= cfg.kv_tokens_per_rank,
        f"prompt + output ({big} tokens) must fit one rank's KV pool "
        f"({cfg.kv_tokens_per_rank} tokens on {lay.label}): the engine would refuse it",
    )
    ev = GridEvaluator(IterationModel(m, c, cm, lay, setup.routing, knobs=knobs))
    n = len(p.isl)
    due = send_times(n, s.request_rate, s.burstiness, s.seed)
    parts = []
    for idx, k in shares(n, d.replicas, s.max_concurrency):
        sub = Prompts(p.isl[idx], p.osl[idx], p.source)
        parts.append((idx, simulate(requests_of(sub, due[idx], k), cfg, ev)))
    record = {
        "policy": cfg.policy,
        "chunk_tokens": cfg.chunk_tokens,
        "max_running": cfg.max_running,
        "kv_tokens": cfg.kv_tokens,
        # the window blocks a request holds besides its context (tokens of the pool's
        # per-token rate; 0: every layer costs per token)
        "kv_window_tokens_per_request": cfg.seq_kv,
        # the engine's memory fraction the pool was sized at (None: no engine rule)
        "mem_fraction": cfg.mem_fraction,
        "replicas": d.replicas,
        "knobs": knobs.to_dict(),
        "cuda_graphs": graphs_record(engine, m, c, lay, cfg, knobs, [r for _, r in parts]),
        "host": host_record(
            cm.engine, cm.engine_version, knobs, lay.attn_dp, [r for _, r in parts]
        ),
        "price_sources": layout_run_price_sources(
            m, c, cm, lay, knobs, setup.routing, *(r for _, r in parts)
        ),
    }
    return merge(parts, n), record


def parse_rate(text: str) -> float:
    """``--request-rate``: a positive number or ``inf``."""
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    require(v > 0, f"--request-rate ({text!r}) must be a positive number or inf")
    return v


#: ``vllm bench serve``'s client flags (its names and defaults: vllm/benchmarks/serve.py,
#: vllm/benchmarks/datasets/random.py)
CLIENT = (
    "num_prompts", "request_rate", "burstiness", "max_concurrency", "seed", "dataset_name",
    "dataset_path", "random_input_len", "random_output_len", "random_range_ratio",
)  # fmt: skip
CLIENT_PARAMS = {
    "num_prompts": (int | None, None, "Prompts sent (default 1000, or every row of --dataset-path)."),
    "request_rate": (str, "inf", "Requests/s, or inf: every prompt sent at t = 0."),
    "burstiness": (float, 1.0, "Gamma shape of the gaps at a finite rate (1: Poisson)."),
    "max_concurrency": (int | None, None, "Most requests in flight (the client holds the rest)."),
    "seed": (int, 0, "Seed of the lengths and the send times."),
    "dataset_name": (str, "random", "random, or sharegpt (the shipped lengths of vLLM's seed-0 ShareGPT sample)."),
    "dataset_path": (str | None, None, "CSV or JSONL of input_len,output_len per prompt."),
    "random_input_len": (int, 1024, "random: prompt tokens (mean)."),
    "random_output_len": (int, 128, "random: output tokens (mean)."),
    "random_range_ratio": (float, 0.0, "random: lengths uniform on [L(1-r), L(1+r)]."),
    "compare": (str | None, None, "A `vllm bench serve --save-result` JSON or "
                "`sglang.bench_serving --output-file` JSONL: its settings, predicted vs measured."),
    "search": (bool, False, "Run the benchmark on every TP/DP/EP/PP launch of --engine on one "
               "node and rank them (no --launch or layout flags)."),
    "search_gpus": (str | None, None, "--search: GPU counts of the server, comma-separated "
                    "(default: powers of two up to the node's GPUs)."),
}  # fmt: skip


#: ``serve-sim`` flags a benchmark does not take, at the values that leave them out
_NOT_BENCH = dict(
    rate=None, concurrency=None, think_ms=0.0, arrival="poisson", cv=1.0, isl=None, osl=None,
    isl_dist=None, osl_dist=None, prefix_hit=0.0, ttft_slo=2000.0, tpot_slo=100.0,
    slo_percentile=90.0, requests=DEFAULT_NUM_PROMPTS, seed=0, trace_out=None, phase=None,
    batch_per_gpu=None, tokens_per_gpu=None, context=None, jobs=1, weight_offload="auto",
)  # fmt: skip
#: the deployment flags ``bench`` shares with ``serve-sim`` (same names, same meaning): every
#: serve-sim flag but the request stream's, SLOs' and one phase's (:data:`_NOT_BENCH`)
DEPLOYMENT_FLAGS = tuple(f.name for f in fields(ServeSimFlags) if f.name not in _NOT_BENCH)


def deployment(
    values: dict[str, Any], launch: str | None, given: Any
) -> tuple[Any, Any, dict[str, Any] | None]:
    """The deployment of ``values`` (bench's deployment flags by name), read through a launch
    command when given: serve-sim's setup, its cost model and the launch record."""
    from moeplan.commands.serve_inputs import prepare
    from moeplan.kernel_tables import engine_cost_model

    launched = None
    if launch is not None:
        from moeplan.commands.launch_flags import apply_launch, launch_report

        values, ls = apply_launch(launch, values, given=given)
        launched = launch_report(launch, ls)
    f = ServeSimFlags(**{**_NOT_BENCH, **{k: values[k] for k in DEPLOYMENT_FLAGS}})
    setup = prepare(f)
    from moeplan.backends import simulated

    engines = simulated()
    require(f.engine in engines, f"--engine ({f.engine!r}) must be one of {', '.join(engines)}")
    require(
        f.cost_engine in ("engine", "none"),
        f"--cost-engine ({f.cost_engine!r}) must be 'engine' or 'none'",
    )
    cm = engine_cost_model(
        setup.cluster, f.profile, engine=priced_engine(f.cost_engine, f.engine),
        version=f.engine_version,
    )  # fmt: skip
    return setup, cm, launched


def bench_answer(
    values: dict[str, Any],
    s: BenchSettings,
    *,
    launch: str | None = None,
    given: Any = None,
    prompts: Prompts | None = None,
) -> dict[str, Any]:
    """``moeplan bench``'s JSON answer: the vLLM result keys, then ``moeplan``'s record of
    what was simulated (``prompts``: the lengths, else :func:`prompts_of`)."""
    from moeplan.kernel_tables import pricing

    check_settings(s)
    p = prompts if prompts is not None else prompts_of(s)
    setup, cm, launched = deployment(values, launch, given or (lambda _n: False))
    engine = launched["engine"] if launched else values["engine"]
    run, record = simulate_bench(setup, cm, engine, p, s)
    sources = record.pop("price_sources")
    out = vllm_metrics(run)
    d = setup.deployment
    out["num_prompts"] = len(p.isl)
    out["request_rate"] = "inf" if math.isinf(s.request_rate) else s.request_rate
    out["burstiness"] = s.burstiness
    out["max_concurrency"] = s.max_concurrency
    out["moeplan"] = {
        "kind": "simulated finite run: every prompt sent and served to its last token; "
        "duration = the last completion",
        "model": setup.model.name,
        "cluster": setup.cluster.name,
        "engine": engine,
        "engine_version": values.get("engine_version"),
        "layout": d.layout.label if d.pd is None else d.pd.label,
        "gpus": d.layout.gpus * d.replicas if d.pd is None else d.pd.gpus,
        "settings": s.to_dict(),
        "prompts": p.source,
        "scheduler": record,
        "preemptions": run.preemptions,
        "pricing": pricing(cm),
        "price_sources": sources,
        "launch": launched,
    }
    return out


def text_block(out: dict[str, Any]) -> str:
    """The result block ``vllm bench serve`` prints, with the predicted figures."""
    line = "{:<40} {:<10}".format
    num = "{:<40} {:<10.2f}".format
    mp = out["moeplan"]
    rows = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result (simulated) ", n=50, c="=")]
    rows.append(line("Successful requests:", out["completed"]))
    if out["max_concurrency"] is not None:
        rows.append(line("Maximum request concurrency:", out["max_concurrency"]))
    if out["request_rate"] != "inf":
        rows.append(num("Request rate configured (RPS):", out["request_rate"]))
    rows += [
        num("Benchmark duration (s):", out["duration"]),
        line("Total input tokens:", out["total_input_tokens"]),
        line("Total generated tokens:", out["total_output_tokens"]),
        num("Request throughput (req/s):", out["request_throughput"]),
        num("Output token throughput (tok/s):", out["output_throughput"]),
        num("Peak output token throughput (tok/s):", out["max_output_tokens_per_s"]),
        line("Peak concurrent requests:", out["max_concurrent_requests"]),
        num("Total token throughput (tok/s):", out["total_token_throughput"]),
    ]
    heads = {"ttft": ("TTFT", "Time to First Token"),
             "tpot": ("TPOT", "Time per Output Token (excl. 1st token)"),
             "itl": ("ITL", "Inter-token Latency"), "e2el": ("E2EL", "End-to-end Latency")}  # fmt: skip
    for m, (short, head) in heads.items():
        rows.append("{s:{c}^{n}}".format(s=head, n=50, c="-"))
        rows.append(num(f"Mean {short} (ms):", out[f"mean_{m}_ms"]))
        rows.append(num(f"Median {short} (ms):", out[f"median_{m}_ms"]))
        rows.append(num(f"P99 {short} (ms):", out[f"p99_{m}_ms"]))
    rows.append("=" * 50)
    rows.append(
        f"{mp['model']} on {mp['cluster']}: {mp['engine']} {mp['layout']}"
        f"{' x' + str(mp['scheduler']['replicas']) if mp['scheduler']['replicas'] > 1 else ''}; "
        f"prompts {mp['prompts']}; {mp['kind']}"
    )
    if mp["price_sources"]:
        rows.append(sources_line(mp["price_sources"], "the run's engine iterations"))
    graphs = graphs_line(mp["scheduler"].get("cuda_graphs"))
    if graphs:
        rows.append(graphs)
    host = host_line(mp["scheduler"].get("host"))
    if host:
        rows.append(host)
    pool = pool_line(mp["scheduler"])
    if pool:
        rows.append(pool)
    if mp["launch"]:
        for x in mp["launch"]["not_priced"]:
            rows.append(f"not priced: {x['flag']} ({x['why']})")
    return "\n".join(rows)


def pool_line(sched: dict[str, Any]) -> str | None:
    """The line stating one instance's KV pool and running cap as the engine sizes them
    (None for a run without one pool: P/D pools print their own)."""
    if "kv_tokens" not in sched:
        return None
    frac = sched.get("mem_fraction")
    at = f" at memory fraction {frac:g}" if frac is not None else ""
    w = sched.get("kv_window_tokens_per_request", 0)
    windows = f"; each request also holds {w:,} tokens' worth of sliding-window blocks" if w else ""
    return (
        f"KV pool: {sched['kv_tokens']:,} tokens per instance{at}{windows}; running cap "
        f"{sched['max_running']:,}"
    )


def _simulate_pd(
    setup: Any, cm: Any, engine: str, p: Prompts, s: BenchSettings
) -> tuple[Run, dict[str, Any]]:
    """:func:`simulate_bench` of a prefill/decode pair: each pool's scheduler as
    ``serve-sim --pd`` sizes it without SLO limits (:func:`moeplan.search.disagg.given.given_pools`),
    the prompts sent to the prefill pool as one open stream
    (:func:`moeplan.serve.pools.pd.simulate_pd`)."""
    from moeplan.search.disagg.given import given_pools
    from moeplan.search.disagg.pools import Context, make_candidate
    from moeplan.serve import SLO, LengthDist, ServeWorkload
    from moeplan.serve.deployment import require_launchable
    from moeplan.serve.iteration.instance_knobs import resolve_knobs
    from moeplan.serve.pools.pd import simulate_pd

    pd, n = setup.deployment.pd, len(p.isl)
    require(
        s.max_concurrency is None or s.max_concurrency >= n,
        f"--max-concurrency ({s.max_concurrency}) with --pd: the P/D pools are simulated "
        "under an open stream of sends; give no cap, or simulate one colocated instance",
    )
    require_launchable(engine, pd)
    flags = setup.knob_flags
    knobs = resolve_knobs(cm.engine, setup.model, setup.cluster, pd.prefill, version=cm.engine_version, mtp=flags["mtp"],
                          mtp_accept=flags["mtp_accept"])  # fmt: skip

    def dist(x: np.ndarray) -> LengthDist:
        lo, hi = int(x.min()), int(x.max())
        if lo == hi:
            return LengthDist(mean=lo)
        return LengthDist(kind="uniform", low=lo, high=hi, mean=max(1, round(float(x.mean()))))

    w = ServeWorkload(num_requests=n, rate=1.0, isl=dist(p.isl), osl=dist(p.osl))
    ctx = Context(model=setup.model, cluster=setup.cluster, cost=cm, workload=w, slo=SLO(),
                  engine=engine, mtp=knobs.mtp, mtp_accept=knobs.mtp_accept,
                  mem_fraction=knobs.mem_fraction)  # fmt: skip
    pre, dec = given_pools(ctx, pd)
    cand = make_candidate(ctx, pre, dec, pd.x, pd.y)
    due = send_times(n, s.request_rate, s.burstiness, s.seed)
    zero = np.zeros(n, dtype=np.int64)
    run = simulate_pd(Requests(arrival_s=due, isl=p.isl, osl=p.osl, cached=zero), cand.setup)
    res = run.result
    record = {
        "pd": pd.label,
        "prefill": {"chunk_tokens": pre.cfg.chunk_tokens, "max_running": pre.cfg.max_running},
        "decode": {"max_running": dec.cfg.max_running, "kv_tokens": dec.cfg.kv_tokens},
        "replicas": 1,
        "price_sources": pd_runs_price_sources(cand.setup, run, setup.model, setup.cluster, cm),
    }
    return merge([(np.arange(n), res)], n), record
