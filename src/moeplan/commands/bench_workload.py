"""``moeplan bench``'s request stream: the prompts and the times they are sent, drawn as
``vllm bench serve`` draws them.

- ``random`` (vLLM ``vllm/benchmarks/datasets/random.py``, ``RandomDataset.get_sampling_params``,
  read at the repository's stored ``237145ea``): prompt lengths uniform on the integers
  ``[floor(L (1 - r)), ceil(L (1 + r))]`` and output lengths on ``[max(1, floor(O (1 - r))),
  max(1, ceil(O (1 + r)))]`` (``L = --random-input-len``, ``O = --random-output-len``,
  ``r = --random-range-ratio`` in ``[0, 1)``), drawn with ``numpy.random.default_rng(seed)``,
  inputs first. vLLM subtracts the tokenizer's special tokens from ``L`` first; moeplan has no
  tokenizer and takes that count as 0 (one or two tokens of thousands).
- ``sharegpt``: no public per-request token-length trace of ShareGPT_V3_unfiltered_cleaned_split
  is shipped with moeplan, and its lengths depend on the model's tokenizer, so a ShareGPT run
  is given by its lengths: ``--dataset-path`` of the prompt/output lengths the benchmark sent,
  or, in ``moeplan validate``, a report's stated mean lengths (fixed).
- ``--dataset-path FILE``: a CSV (header ``input_len,output_len``) or JSON Lines (objects with
  ``input_len`` and ``output_len``) of whole, positive token counts; the first
  ``--num-prompts`` rows are sent in file order (all of them without ``--num-prompts``).

Arrivals (vLLM ``vllm/benchmarks/serve.py``, ``get_request``): ``--request-rate inf`` sends
every prompt at t = 0; a finite rate draws gaps from a gamma distribution of shape
``burstiness`` and scale ``1 / (rate * burstiness)`` (``burstiness`` 1: Poisson), accumulates
them and rescales the times so the last prompt is sent at ``num_prompts / rate``. A
``--max-concurrency K`` holds a prompt until one of K slots is free (an ``asyncio.Semaphore``
around each request), so it is sent at the later of its due time and a free slot.

Pure: file reading aside (:func:`read_lengths`), no I/O.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from moeplan.errors import MoeplanError, require

DATASETS = ("random", "sharegpt")
#: vLLM's defaults (vllm/benchmarks/datasets/random.py, RandomDataset.DEFAULT_*; serve.py
#: ``--num-prompts`` default 1000, ``--seed`` default 0)
DEFAULT_INPUT_LEN, DEFAULT_OUTPUT_LEN, DEFAULT_RANGE_RATIO = 1024, 128, 0.0
DEFAULT_NUM_PROMPTS = 1000
MAX_PROMPTS = 200_000  # serve-sim's bound on simulated requests


@dataclass(frozen=True)
class Prompts:
    """The prompts of a run, in send order: prompt and output tokens, and the source."""

    isl: np.ndarray
    osl: np.ndarray
    source: str


def random_lengths(
    n: int, input_len: int, output_len: int, range_ratio: float, seed: int
) -> Prompts:
    """vLLM's ``random`` dataset lengths (module docstring)."""
    require(
        0.0 <= range_ratio < 1.0,
        f"--random-range-ratio ({range_ratio}) must be in [0, 1) (as vLLM requires)",
    )
    require(input_len >= 1, f"--random-input-len ({input_len}) must be >= 1")
    require(output_len >= 1, f"--random-output-len ({output_len}) must be >= 1")
    lo, hi = math.floor(input_len * (1 - range_ratio)), math.ceil(input_len * (1 + range_ratio))
    require(
        lo >= 1,
        f"--random-input-len ({input_len}) with --random-range-ratio ({range_ratio}) can "
        "draw an empty prompt",
    )
    olo = max(1, math.floor(output_len * (1 - range_ratio)))
    ohi = max(1, math.ceil(output_len * (1 + range_ratio)))
    rng = np.random.default_rng(seed)
    isl = rng.integers(lo, hi + 1, size=n)
    osl = rng.integers(olo, ohi + 1, size=n)
    src = f"random: input U[{lo}, {hi}], output U[{olo}, {ohi}] (vLLM RandomDataset)"
    return Prompts(isl.astype(np.int64), osl.astype(np.int64), src)


def fixed_lengths(n: int, isl: int, osl: int, source: str) -> Prompts:
    """``n`` prompts of ``isl`` tokens asking ``osl`` tokens each."""
    require(isl >= 1 and osl >= 1, f"lengths ({isl}, {osl}) must be >= 1 token each")
    return Prompts(np.full(n, isl, np.int64), np.full(n, osl, np.int64), source)


def _whole(value: object, field: str, where: str) -> int:
    """A token count of a dataset file: a whole number >= 1 (one line otherwise)."""
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise MoeplanError(f"{where} {field} ({value!r}) must be a whole number") from None
    require(
        math.isfinite(v) and v == int(v),
        f"{where} {field} ({value!r}) must be a whole number of tokens",
    )
    require(v >= 1, f"{where} {field} ({value!r}) must be >= 1 token")
    return int(v)


def read_lengths(path: str, n: int | None) -> Prompts:
    """The prompt/output lengths of a CSV or JSON Lines file (module docstring); the first
    ``n`` rows (every row: ``n`` None)."""
    p = Path(path)
    require(p.is_file(), f"--dataset-path ({path}) must be a readable file")
    rows: list[tuple[int, int]] = []
    text = p.read_text(encoding="utf-8", errors="replace")
    if p.suffix.lower() in (".jsonl", ".json") or text.lstrip().startswith("{"):
        for i, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            where = f"--dataset-path ({path}) line {i}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                raise MoeplanError(f"{where} must be one JSON object") from None
            require(isinstance(obj, dict), f"{where} must be one JSON object")
            for k in ("input_len", "output_len"):
                require(k in obj, f"{where} lacks the field {k}")
            rows.append((_whole(obj["input_len"], "input_len", where),
                         _whole(obj["output_len"], "output_len", where)))  # fmt: skip
    else:
        reader = csv.DictReader(text.splitlines())
        for k in ("input_len", "output_len"):
            require(k in (reader.fieldnames or ()), f"--dataset-path ({path}) lacks the column {k}")
        for i, r in enumerate(reader, 2):
            where = f"--dataset-path ({path}) row {i}"
            rows.append((_whole(r["input_len"], "input_len", where),
                         _whole(r["output_len"], "output_len", where)))  # fmt: skip
    require(bool(rows), f"--dataset-path ({path}) holds no prompt")
    if n is not None:
        require(
            n <= len(rows),
            f"--num-prompts ({n}) exceeds the {len(rows)} prompts of --dataset-path ({path})",
        )
        rows = rows[:n]
    a = np.asarray(rows, dtype=np.int64)
    return Prompts(a[:, 0], a[:, 1], f"file {p.name}: {len(rows)} prompts")


def send_times(n: int, rate: float, burstiness: float, seed: int) -> np.ndarray:
    """When each prompt is due (s from the run's start): vLLM's ``get_request`` (module
    docstring); ``numpy.random.RandomState(seed)`` stands for vLLM's ``np.random.seed``."""
    require(rate > 0, f"--request-rate ({rate}) must be positive or inf")
    require(burstiness > 0, f"--burstiness ({burstiness}) must be positive")
    if math.isinf(rate):
        return np.zeros(n)
    if math.isinf(burstiness):
        gaps = np.full(n, 1.0 / rate)
    else:
        gaps = np.random.RandomState(seed).gamma(burstiness, 1.0 / (rate * burstiness), size=n)
    t = np.cumsum(gaps)
    return t * ((n / rate) / t[-1])
