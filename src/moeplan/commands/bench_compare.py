"""``moeplan bench --compare RESULT``: a measured benchmark result read, its run simulated
with the run's own settings, and predicted against measured per metric.

Formats (told apart by their content, one line for anything else):

- ``vllm bench serve --save-result`` JSON (``vllm/benchmarks/serve.py``, ``main`` writes
  ``result_json``: ``num_prompts``, ``request_rate`` ("inf" or a number), ``burstiness``,
  ``max_concurrency``, and the metrics of ``benchmark``, with ``input_lens`` / ``output_lens``
  per request): the prompts are the lengths it sent, in its order.
- ``python -m sglang.bench_serving --output-file`` JSON Lines (one object per run appended;
  the last line is read; ``python/sglang/bench_serving.py``, ``benchmark``'s ``result``):
  ``request_rate``, ``max_concurrency``, ``random_input_len`` / ``random_output_len`` /
  ``random_range_ratio``, ``completed``, and the metrics, E2E named ``e2e_latency`` and the
  total throughput as ``input_throughput + output_throughput``. SGLang draws random lengths
  uniform on ``[max(1, int(L r)), L]`` (its ``sample_random_requests``), not vLLM's rule.

A setting the file states and the command line also gives must agree (one line naming
both). The error of a metric is ``predicted / measured - 1``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from moeplan.commands.bench import VLLM_KEYS
from moeplan.commands.bench_workload import Prompts
from moeplan.errors import MoeplanError, require

#: the metrics compared, in the order printed
COMPARED = (
    "duration", "request_throughput", "output_throughput", "max_output_tokens_per_s",
    "total_token_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms",
    "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "p99_itl_ms", "mean_e2el_ms",
    "median_e2el_ms", "p99_e2el_ms",
)  # fmt: skip
#: the result formats read (a benchmark client's, not an engine's)
VLLM_RESULT, SGLANG_RESULT = "vllm bench serve", "sglang.bench_serving"
#: SGLang's names of vLLM's keys (python/sglang/bench_serving.py, ``result``)
SGLANG_NAMES = {f"{s}_e2el_ms": f"{s}_e2e_latency_ms" for s in ("mean", "median", "std", "p99")}


@dataclass(frozen=True)
class Measured:
    """A measured result: its format, its metrics under vLLM's keys and the prompts it sent
    (None: drawn from its dataset settings)."""

    fmt: str
    path: str
    metrics: dict[str, float]
    prompts: Prompts | None


def _load(path: str) -> tuple[str, dict[str, Any]]:
    """The result object of ``path``: the whole file as one JSON object, else its last
    JSON Lines object."""
    p = Path(path)
    require(p.is_file(), f"--compare ({path}) must be a readable file")
    text = p.read_text(encoding="utf-8", errors="replace").strip()
    require(bool(text), f"--compare ({path}) is empty")
    try:
        return "json", _obj(json.loads(text), path)
    except json.JSONDecodeError:
        pass
    lines = [x for x in text.splitlines() if x.strip()]
    try:
        return "jsonl", _obj(json.loads(lines[-1]), path)
    except json.JSONDecodeError:
        raise MoeplanError(
            f"--compare ({path}) is neither a vllm bench serve --save-result JSON nor a "
            "sglang.bench_serving --output-file JSONL"
        ) from None


def _obj(x: Any, path: str) -> dict[str, Any]:
    require(isinstance(x, dict), f"--compare ({path}) must hold a JSON object")
    return x


def _rate(v: Any, path: str) -> float:
    if isinstance(v, str) and v.strip().lower() in ("inf", "infinity"):
        return math.inf
    try:
        r = float(v)
    except (TypeError, ValueError):
        raise MoeplanError(
            f"--compare ({path}) request_rate ({v!r}) must be a number or inf"
        ) from None
    require(r > 0, f"--compare ({path}) request_rate ({v!r}) must be positive or inf")
    return r


def read_result(path: str, client: dict[str, Any], given: Any) -> tuple[Measured, dict[str, Any]]:
    """The measured result of ``path`` and the client settings of its run (``client``: the
    bench flags; a flag typed on the command line must agree with the file)."""
    _, obj = _load(path)
    if "mean_e2e_latency_ms" in obj:
        fmt = SGLANG_RESULT
    elif "mean_e2el_ms" in obj or "input_lens" in obj:
        fmt = VLLM_RESULT
    else:
        raise MoeplanError(
            f"--compare ({path}) is an unknown result format: neither mean_e2el_ms (vllm "
            "bench serve --save-result) nor mean_e2e_latency_ms (sglang.bench_serving) is there"
        )
    found = {k for k in ("duration", "mean_ttft_ms", "output_throughput") if k in obj}
    require(
        "duration" in obj,
        f"--compare ({path}) lacks the field duration: not a benchmark result "
        f"(format read as {fmt}; fields found: {', '.join(sorted(found)) or 'none'})",
    )
    out = dict(client)
    stated: dict[str, Any] = {"request_rate": _rate(obj.get("request_rate", "inf"), path)}
    if obj.get("max_concurrency") is not None:
        stated["max_concurrency"] = int(obj["max_concurrency"])
    if fmt == VLLM_RESULT:
        if obj.get("burstiness") is not None:
            stated["burstiness"] = float(obj["burstiness"])
        n = obj.get("num_prompts", obj.get("completed"))
    else:
        n = obj.get("completed")
        for k in ("random_input_len", "random_output_len", "random_range_ratio"):
            if obj.get(k) is not None:
                stated[k] = obj[k]
    require(n is not None, f"--compare ({path}) lacks the field num_prompts (or completed)")
    stated["num_prompts"] = int(n)
    for k, v in stated.items():
        if given(k) and client[k] != v:
            raise MoeplanError(
                f"--{k.replace('_', '-')} ({client[k]}) disagrees with --compare ({path}) "
                f"{k} ({v}); give one of them"
            )
        out[k] = v
    prompts = _sent(obj, path, stated["num_prompts"]) if fmt == VLLM_RESULT else None
    if fmt == SGLANG_RESULT:
        prompts = _sglang_random(out, path)
    metrics = {}
    for k in VLLM_KEYS:
        src = SGLANG_NAMES.get(k, k) if fmt == SGLANG_RESULT else k
        if isinstance(obj.get(src), int | float):
            metrics[k] = float(obj[src])
    if fmt == SGLANG_RESULT and "input_throughput" in obj and "output_throughput" in obj:
        metrics["total_token_throughput"] = float(obj["input_throughput"]) + float(
            obj["output_throughput"]
        )
    return Measured(fmt, path, metrics, prompts), out


def _sent(obj: dict[str, Any], path: str, n: int) -> Prompts | None:
    """The lengths a vLLM result sent (``input_lens``, ``output_lens``), if it kept them."""
    a, b = obj.get("input_lens"), obj.get("output_lens")
    if a is None and b is None:
        return None
    require(
        isinstance(a, list) and isinstance(b, list) and len(a) == len(b) == n,
        f"--compare ({path}) input_lens and output_lens must be lists of num_prompts ({n}) lengths",
    )
    for name, xs in (("input_lens", a), ("output_lens", b)):
        for i, x in enumerate(xs):
            require(
                isinstance(x, int) and x >= 1,
                f"--compare ({path}) {name}[{i}] ({x!r}) must be a whole number >= 1",
            )
    return Prompts(
        np.asarray(a, np.int64), np.asarray(b, np.int64), f"{len(a)} prompts of {Path(path).name}"
    )


def _sglang_random(client: dict[str, Any], path: str) -> Prompts:
    """SGLang's random lengths (module docstring), seeded as the bench's ``--seed``."""
    n, r = client["num_prompts"], float(client["random_range_ratio"])
    li, lo = int(client["random_input_len"]), int(client["random_output_len"])
    require(0 <= r <= 1, f"--compare ({path}) random_range_ratio ({r}) must be in [0, 1]")
    rng = np.random.default_rng(client["seed"])
    isl = rng.integers(max(1, int(li * r)), li + 1, size=n)
    osl = rng.integers(max(1, int(lo * r)), lo + 1, size=n)
    src = f"random (SGLang rule): input U[{max(1, int(li * r))}, {li}], output U[{max(1, int(lo * r))}, {lo}]"
    return Prompts(isl.astype(np.int64), osl.astype(np.int64), src)


def errors(pred: dict[str, Any], meas: dict[str, float]) -> dict[str, dict[str, float | None]]:
    """Per metric of :data:`COMPARED` the file holds: predicted, measured, error."""
    out = {}
    for k in COMPARED:
        if k in meas:
            p, m = float(pred[k]), meas[k]
            out[k] = {"predicted": p, "measured": m, "error": p / m - 1 if m > 0 else None}
    return out


def compare_answer(out: dict[str, Any], m: Measured) -> dict[str, Any]:
    """bench's answer with the measured figures and the error per metric."""
    res = dict(out)
    res["moeplan"] = {**out["moeplan"], "compare": {"file": m.path, "format": m.fmt,
                                                     "metrics": errors(out, m.metrics)}}  # fmt: skip
    return res


def compare_text(out: dict[str, Any]) -> str:
    """Predicted vs measured, one metric a line."""
    c = out["moeplan"]["compare"]
    rows = [f"{'metric':<26}{'predicted':>14}{'measured':>14}{'error':>9}"]
    for k, v in c["metrics"].items():
        e = "" if v["error"] is None else f"{v['error']:+.1%}"
        rows.append(f"{k:<26}{v['predicted']:>14.2f}{v['measured']:>14.2f}{e:>9}")
    mp = out["moeplan"]
    rows.append(
        f"{c['format']} result {c['file']}: {out['num_prompts']} prompts, request rate "
        f"{out['request_rate']}, max concurrency {out['max_concurrency']}; {mp['model']} on "
        f"{mp['cluster']}, {mp['engine']} {mp['layout']} (simulated)"
    )
    return "\n".join(rows)
