"""The engine's host (CPU) work per step: scheduling, input preparation, sampling and output
processing of every sequence an engine core runs in the step.

A serving engine's GPU kernels are only part of a step. Between two steps the engine core's
Python process schedules the next batch, prepares its inputs (positions, block tables,
slot mappings), and turns the sampled token ids into the requests' outputs; that work grows
with the sequences in the step. The kernel tables price none of it (they time kernels).

Price: :data:`HOST_S_PER_SEQ` seconds per sequence an engine core (one attention-DP rank:
each runs its own scheduler in vLLM and SGLang) has in the step. Source: vLLM's V1 engine
measured with a 256-sequence ShareGPT batch of Llama-2-7B leaves a gap of 5-6 ms between two
decode steps in which the GPU idles (vllm-project/vllm issue #10634, 2024-11-25, an Nsight
trace of ``AsyncLLM``): 5.5 ms / 256 sequences. Decisions, each a departure stated here:

- proportional to the sequences, with no fixed part: one published batch size cannot split a
  fixed part from a per-sequence one, and the per-sequence reading is the one that keeps a
  batch of one near free (CUDA-graph replay of a small step costs microseconds of launch);
- the same price for every engine, GPU host and release: no engine publishes its own figure
  per sequence (SGLang's v0.4 post says only that an unoptimised engine "can spend as much as
  half of its time on CPU overhead"); what differs per engine is whether it hides the work;
- prefill chunks count as sequences like decode ones (the per-sequence bookkeeping is the
  same; the prompt's tokenisation runs in the API server, another process).

Overlap (:func:`step_seconds`): an engine that schedules one step ahead — SGLang's overlap
scheduler (on by default since v0.4, ``--disable-overlap-schedule`` turns it off;
lmsys.org/blog/2024-12-04-sglang-v0-4), TensorRT-LLM's PyTorch overlap scheduler (on by
default, ``disable_overlap_scheduler``), vLLM's ``--async-scheduling`` (vllm-project/vllm PR
#19970, off by default in 0.11) — runs the host work of step n+1 while the GPU runs step n, so
a step takes the longer of the two; without it the two add. Held-out check: the lab's vLLM
0.11.0 runs with and without ``--async-scheduling`` (``moeplan validate``), never fitted.

Pure arithmetic: no I/O.
"""

from __future__ import annotations

#: host seconds per sequence an engine core runs in a step (module docstring: vLLM issue
#: #10634's 5-6 ms gap between decode steps at 256 sequences, its middle 5.5 ms / 256)
HOST_S_PER_SEQ = 5.5e-3 / 256
#: where :data:`HOST_S_PER_SEQ` comes from, for the answers that state it
HOST_SOURCE = (
    "vLLM V1's gap between decode steps, 5-6 ms at 256 sequences (vllm-project/vllm issue "
    "#10634), per sequence; the same for every engine (no engine publishes its own)"
)


def host_seconds(sequences: int) -> float:
    """Host work of one engine core for a step of ``sequences`` sequences."""
    return HOST_S_PER_SEQ * max(0, sequences)


def step_seconds(gpu_s: float, host_s: float, overlap: bool) -> float:
    """One step: the GPU's time and the host's, overlapped (the longer) or in series (both)."""
    return max(gpu_s, host_s) if overlap else gpu_s + host_s
