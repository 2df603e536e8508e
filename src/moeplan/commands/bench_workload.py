"""``moeplan bench``'s request stream: the prompts and the times they are sent, drawn as
``vllm bench serve`` draws them.

- ``random`` (vLLM ``vllm/benchmarks/datasets/random.py``, ``RandomDataset.get_sampling_params``,
  read at the repository's stored ``237145ea``): prompt lengths uniform on the integers
  ``[floor(L (1 - r)), ceil(L (1 + r))]`` and output lengths on ``[max(1, floor(O (1 - r))),
  max(1, ceil(O (1 + r)))]`` (``L = --random-input-len``, ``O = --random-output-len``,
  ``r = --random-range-ratio`` in ``[0, 1)``), drawn with ``numpy.random.default_rng(seed)``,
  inputs first. vLLM subtracts the tokenizer's special tokens from ``L`` first; moeplan has no
  tokenizer and takes that count as 0 (one or two tokens of thousands).
- ``sharegpt`` (vLLM ``vllm/benchmarks/datasets/sharegpt.py``, ``ShareGPTDataset``, and
  ``utils.py`` ``is_valid_sequence``, read at the stored ``237145ea``): vLLM reads
  ShareGPT_V3_unfiltered_cleaned_split.json, keeps conversations of two or more turns,
  shuffles them with ``random.seed(seed)``, and sends the first ``--num-prompts`` whose
  first turn (the prompt) and second turn (its token count is the output length) pass the
  filter: prompt and output >= 4 tokens, prompt <= 1024, prompt + output <= 2048. moeplan has
  neither the file nor the model's tokenizer, so it ships that sample's token lengths
  (:data:`SHAREGPT_FILE`, :func:`sharegpt_lengths`): the first 16,384 pairs vLLM's own
  sampling code draws with seed 0, counted with Llama-3.1's tokenizer (github.com/JonnyKong/
  vidur ``data/processed_traces/sharegpt_v3_filtered.csv`` at ``941a76c3``, MIT; its generator
  is a copy of vLLM's ``sample_sharegpt_requests``; the data file's README gives the steps).
  With ``--seed 0`` (vLLM's default) a run of ``n`` prompts sends the file's first ``n`` rows
  in file order, the very requests vLLM sends (its first 1,000: mean 215 / 198 tokens, the lab
  runs measure 214-218 / 187-200). Another seed shuffles other conversations to the front,
  which moeplan cannot know: it draws ``n`` rows by a permutation of the file seeded with
  ``numpy.random.default_rng(seed)`` (the same distribution, other requests). More prompts
  than the file holds are drawn again with replacement (vLLM's ``maybe_oversample_requests``
  does so only past the whole dataset's ~50,000 valid pairs: a stated departure). Given a
  run's measured mean lengths (``moeplan validate``: the report's ``mean_in``/``mean_out``,
  its total tokens over its prompts), each drawn length is scaled by the ratio of that mean
  to the drawn prompts' mean (whole tokens, at least 1), so the run's token totals are the
  report's (the model's own tokenizer, and replies that end early at the end-of-sequence
  token): the sample gives the requests and the spread of their lengths (the long replies
  that set a burst's duration, the short ones whose TPOT a prefill stall inflates), the run
  its own reported totals; nothing is fitted to a measured speed. Assumption: the model's
  tokenizer counts each conversation in proportion to Llama-3.1's. ``--dataset-path`` with the
  run's own lengths removes it.
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
import io
import json
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from moeplan.errors import MoeplanError, require

DATASETS = ("random", "sharegpt")
#: vLLM's defaults (vllm/benchmarks/datasets/random.py, RandomDataset.DEFAULT_*; serve.py
#: ``--num-prompts`` default 1000, ``--seed`` default 0)
DEFAULT_INPUT_LEN, DEFAULT_OUTPUT_LEN, DEFAULT_RANGE_RATIO = 1024, 128, 0.0
DEFAULT_NUM_PROMPTS = 1000
MAX_PROMPTS = 200_000  # serve-sim's bound on simulated requests
#: the shipped lengths of vLLM's ShareGPT sample (module docstring: source, licence, filter)
SHAREGPT_FILE = "sharegpt_v3_sample.csv"
#: vLLM's ShareGPT filter (vllm/benchmarks/datasets/utils.py, is_valid_sequence defaults,
#: read at 237145ea): min_len, max_prompt_len, max_total_len
SHAREGPT_MIN, SHAREGPT_MAX_PROMPT, SHAREGPT_MAX_TOTAL = 4, 1024, 2048


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


def sharegpt_trace() -> tuple[np.ndarray, np.ndarray]:
    """The shipped ShareGPT (prompt, output) token lengths, in file order."""
    path = resources.files("moeplan").joinpath("data", "benchmarks", SHAREGPT_FILE)
    a = np.loadtxt(io.StringIO(path.read_text()), delimiter=",", skiprows=1, dtype=np.int64)
    isl, osl = a[:, 0], a[:, 1]
    require(
        bool(np.all(np.minimum(isl, osl) >= SHAREGPT_MIN) and np.all(isl <= SHAREGPT_MAX_PROMPT)
             and np.all(isl + osl <= SHAREGPT_MAX_TOTAL)),
        f"{SHAREGPT_FILE} holds a pair outside vLLM's ShareGPT filter",
    )  # fmt: skip
    return isl, osl


def sharegpt_lengths(n: int, seed: int, means: tuple[float, float] | None = None) -> Prompts:
    """``n`` prompts of vLLM's ``sharegpt`` dataset from the shipped sample (module
    docstring): seed 0 sends the file's first ``n`` rows, as vLLM does; ``means``: a run's
    measured mean (prompt, output) lengths, to which the drawn lengths are scaled."""
    ti, to = sharegpt_trace()
    order = np.arange(len(ti)) if seed == 0 else np.random.default_rng(seed).permutation(len(ti))
    if n > len(order):  # past the sample: drawn again with replacement
        extra = np.random.default_rng(seed + 1).integers(0, len(ti), n - len(order))
        order = np.concatenate([order, extra])
    isl, osl = ti[order[:n]], to[order[:n]]
    how = "vLLM's seed-0 order" if seed == 0 else f"a permutation seeded {seed}"
    if n > len(ti):
        how += f"; the {n - len(ti)} past the sample drawn again with replacement"
    src = f"sharegpt: {n} prompts of the {len(ti)} shipped pairs of vLLM's sample ({how})"
    if means is not None:
        mi, mo = means
        require(mi >= 1 and mo >= 1, f"sharegpt mean lengths ({mi}, {mo}) must be >= 1 token")
        si, so = mi / float(isl.mean()), mo / float(osl.mean())
        isl = np.maximum(1, np.rint(isl * si)).astype(np.int64)
        osl = np.maximum(1, np.rint(osl * so)).astype(np.int64)
        src += f", lengths scaled x{si:.2f} / x{so:.2f} to the run's means {mi:g} / {mo:g}"
    # a burst ends with its longest requests: say how long the drawn tail is
    src += f"; longest output {int(osl.max())} tokens, median {int(np.median(osl))}"
    return Prompts(isl, osl, src)


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
