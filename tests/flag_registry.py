"""Every flag of every ``moeplan`` command with a probe that shows it is read: the flag's
value changes the command's ``--json`` answer (relative to the command's base question) or
the flag is refused with one line (exit 2) in the mode named. ``tests/test_flag_registry.py``
checks that every flag the Typer app declares is here (cheap) and sweeps a sample;
``bench/flag_sweep.py`` (``make fuzz``) sweeps them all.

A probe's arguments may hold ``{tmp}`` (a fresh folder per run) and ``{trace}`` (a routing
trace the sweep writes once with ``moeplan trace synth``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

#: Flags that choose how or where an answer is shown, not what it is: they cannot change
#: the answer's figures and need no probe.
EXEMPT = frozenset({"--jobs", "--quiet", "--json", "--out"})

#: Keys of an answer that vary from run to run (wall time, paths): left out of comparisons.
VOLATILE = frozenset(
    {"elapsed_s", "timings_s", "search_ms", "artifacts", "launch", "out", "trace", "path",
     "solve_s", "solve_ms", "warmup_ms", "wall_ms", "wall_s"}
)  # fmt: skip
#: Timing keys whose name is an answer elsewhere (``seconds`` of ``price_sources``), by path.
VOLATILE_PATHS = frozenset({("search", "disaggregated", "seconds")})


@dataclass(frozen=True)
class Probe:
    """``args`` added to the base question (or to ``base`` when given) must change the answer
    (at ``key``, a dotted path, when given; else anywhere outside :data:`VOLATILE`), or,
    with ``refused``, exit 2 with one line naming the flag; ``file``: the flag names an
    output file, which must then exist."""

    args: tuple[str, ...]
    key: str | None = None
    base: tuple[str, ...] | None = None
    refused: bool = False
    file: bool = False


def P(*args: str, key: str | None = None, base: tuple[str, ...] | None = None) -> Probe:
    return Probe(args, key=key, base=base)


def R(*args: str, base: tuple[str, ...] | None = None) -> Probe:
    return Probe(args, base=base, refused=True)


def F(*args: str, base: tuple[str, ...] | None = None) -> Probe:
    return Probe(args, base=base, file=True)


H100 = ("--cluster", "h100-sxm-8")
LITE = ("--model", "deepseek-v2-lite")
PHASE = ("serve-sim", *LITE, *H100, "--phase", "decode", "--batch-per-gpu", "8", "--context",
         "1024", "--json")  # fmt: skip
DP2 = (*PHASE, "--attn-dp", "2", "--moe-ep", "2")
TP2 = (*PHASE, "--attn-tp", "2", "--moe-ep", "2")
V3 = (*PHASE, "--model", "deepseek-v3", "--cluster", "h200-sxm-8", "--attn-dp", "8", "--moe-ep",
      "8")  # fmt: skip
PREFILL = ("serve-sim", *LITE, *H100, "--phase", "prefill", "--tokens-per-gpu", "4096",
           "--json")  # fmt: skip
SERVE = ("serve-sim", *LITE, *H100, "--rate", "2", "--requests", "50", "--isl", "512", "--osl",
         "32", "--json")  # fmt: skip
SERVE_SLO = tuple(a for a in SERVE if a not in ("--rate", "2"))  # the SLO-capacity search
PLAN = ("plan", *LITE, *H100, "--requests", "50", "--families", "strategy", "--out", "{tmp}/o",
        "--json")  # fmt: skip
#: a plan whose experts DeepEP runs (block FP8 on Hopper): the all-to-all knobs matter
PLAN_FP8 = ("plan", "--model", "qwen3-235b-a22b-2507-fp8", "--cluster", "h200-sxm-8", "--requests",
            "50", "--families", "strategy", "--no-placement", "--out", "{tmp}/o", "--json")  # fmt: skip
MOE = ("--hidden-size", "2048", "--inter-size", "1408", "--topk", "6", "--num-experts", "64")
COST_MOE = ("cost", "moe", *H100, "--num-tokens", "128", *MOE, "--json")
COST_ATT = ("cost", "context_attention", *H100, "--batch-size", "4", "--isl", "1024",
            "--num-heads", "16", "--num-key-value-heads", "16", "--head-dim", "128", "--json")  # fmt: skip
COST_AR = ("cost", "allreduce", *H100, "--message-size", "1048576", "--num-gpus", "8", "--json")
COST_DE = ("cost", "deepep_ll_dispatch", *H100, "--hidden-size", "2048", "--num-token", "128",
           "--num-topk", "6", "--num-experts", "64", "--json")  # fmt: skip

KERNELS = ("calibrate", "--kernels", "--op", "mhc", "--json")  # the smallest table
COST_DN = ("cost", "deepep_normal_dispatch", *COST_DE[2:-1], "--sms", "24", "--json")

BENCH = ("bench", *LITE, *H100, "--num-prompts", "20", "--random-input-len", "256",
         "--random-output-len", "16", "--json")  # fmt: skip
BENCH_DP2 = (*BENCH, "--attn-dp", "2", "--moe-ep", "2")
BENCH_TP2 = (*BENCH, "--attn-tp", "2", "--moe-ep", "2")
#: a block-FP8 model that DeepEP runs: the all-to-all knobs matter
BENCH_FP8 = (*BENCH, "--model", "deepseek-v3", "--cluster", "h200-sxm-8", "--attn-dp", "8",
             "--moe-ep", "8")  # fmt: skip
BENCH_SPREAD = (*BENCH, "--random-range-ratio", "0.5")  # lengths the seed draws

RECOMMEND = ("recommend", *LITE, *H100, "--rate", "2", "--requests", "50", "--isl", "512",
             "--osl", "32", "--json")  # fmt: skip

#: command (space-separated words) -> its base question and a probe per flag.
REGISTRY: dict[str, tuple[tuple[str, ...], dict[str, Probe]]] = {
    "inspect": (
        ("inspect", "deepseek-v2-lite", *H100, "--json"),
        {
            "--cluster": P("--cluster", "h200-sxm-8"),
            "--nodes": P("--nodes", "2"),
            "--racks": R("--racks", "2"),  # h100-sxm-8 is not a rack cluster
            "--gpus": P("--gpus", "4"),
            "--context": P("--context", "8192", key="context"),
        },
    ),
    "models": (("models", "--json"), {}),
    "clusters": (("clusters", "--json"), {}),
    "serve-sim": (
        PHASE,
        {
            "--model": P("--model", "qwen3-30b-a3b", key="model"),
            "--cluster": P("--cluster", "h200-sxm-8", key="cluster"),
            "--nodes": P("--nodes", "2", "--attn-dp", "16", "--moe-ep", "16"),
            "--racks": R("--racks", "2"),  # h100-sxm-8 is not a rack cluster
            "--plan": R("--plan", "{tmp}/missing-plan.json", "--attn-tp", "2"),
            "--pd": R("--pd", "1*attn-tp1:1*attn-tp1"),
            "--launch": P("--launch", "vllm serve deepseek-ai/DeepSeek-V2-Lite -tp 2"),
            "--attn-tp": P("--attn-tp", "2", "--attn-dp", "1", key="label", base=DP2),
            "--attn-dp": P("--attn-dp", "2", "--attn-tp", "1", key="label", base=TP2),
            "--moe-tp": P("--moe-tp", "2", "--moe-ep", "1", key="label", base=TP2),
            "--moe-ep": P(
                "--moe-ep",
                "2",
                "--moe-tp",
                "1",
                key="label",
                base=(*PHASE, "--attn-tp", "2", "--moe-tp", "2"),
            ),
            "--pp": R("--pp", "2"),  # --phase prices one stage
            "--micro-batches": R("--micro-batches", "4"),
            "--replicas": R("--replicas", "2"),
            "--rate": R("--rate", "3"),
            "--concurrency": R("--concurrency", "4"),
            "--think-ms": R("--think-ms", "5"),
            "--arrival": R("--arrival", "gamma"),
            "--cv": R("--cv", "2"),
            "--isl": R("--isl", "100"),
            "--osl": R("--osl", "64"),
            "--isl-dist": R("--isl-dist", "uniform:100:200"),
            "--osl-dist": R("--osl-dist", "uniform:10:20"),
            "--prefix-hit": R("--prefix-hit", "0.5"),
            "--ttft-slo": R("--ttft-slo", "500"),
            "--tpot-slo": R("--tpot-slo", "50"),
            "--slo-percentile": R("--slo-percentile", "50"),
            "--engine": P("--engine", "vllm", key="engine"),
            "--engine-version": P("--engine-version", "0.5.9", key="step_ms"),
            "--cost-engine": P("--cost-engine", "none"),
            "--chunk-tokens": R("--chunk-tokens", "512"),
            "--max-running": R("--max-running", "16"),
            "--mem-fraction": P("--mem-fraction", "0.6", key="engine.kv_tokens", base=SERVE),
            "--requests": R("--requests", "50"),
            "--seed": R("--seed", "5"),
            "--profile": R("--profile", "{tmp}/no-such-profile.json"),
            "--trace-out": R("--trace-out", "{tmp}/t.json"),
            "--phase": R("--phase", "prefill"),  # prefill needs --tokens-per-gpu
            "--batch-per-gpu": P("--batch-per-gpu", "16", key="step_ms"),
            "--tokens-per-gpu": P("--tokens-per-gpu", "8192", key="step_ms", base=PREFILL),
            "--context": P("--context", "4096", key="step_ms"),
            "--redundant-experts": P("--redundant-experts", "8", base=DP2),
            "--tbo": P("--tbo", base=V3),  # DeepEP runs block-FP8 experts, not BF16 ones
            # SGLang overlaps its host work by default: off, the step adds it
            "--overlap-schedule": P("--no-overlap-schedule", key="step_ms", base=PHASE),
            "--mtp": P("--mtp", "1", "--mtp-accept", "0.7", base=V3),
            "--mtp-accept": R("--mtp-accept", "0.5"),
            "--kv-dtype": P("--kv-dtype", "fp8", key="memory_gib_per_gpu"),
            "--a2a": P("--a2a", "nccl", base=V3),  # auto: DeepEP where it runs (block FP8)
            "--routing-trace": P("--routing-trace", "{trace}", key="routing"),
            "--routing": P("--routing", "balanced", key="knobs.routing", base=V3),
            # deepseek-v2-lite has 27 layers on an H100 with a PCIe host link: 9 of them offloaded
            "--weight-offload": P("--weight-offload", "3:1:1", key="knobs.weight_offload"),
        },
    ),
    "bench": (
        BENCH,
        {
            "--model": P("--model", "qwen3-30b-a3b", key="moeplan.model"),
            "--cluster": P("--cluster", "h200-sxm-8", key="moeplan.cluster"),
            "--nodes": R("--nodes", "0"),
            "--racks": R("--racks", "2"),  # h100-sxm-8 is not a rack cluster
            "--plan": R("--plan", "{tmp}/missing-plan.json"),
            "--pd": P("--pd", "1*attn-tp1:1*attn-tp1", key="moeplan.layout"),
            "--launch": P("--launch", "vllm serve deepseek-ai/DeepSeek-V2-Lite -tp 2"),
            "--attn-tp": P(
                "--attn-tp", "2", "--attn-dp", "1", key="moeplan.layout", base=BENCH_DP2
            ),
            "--attn-dp": P(
                "--attn-dp", "2", "--attn-tp", "1", key="moeplan.layout", base=BENCH_TP2
            ),
            "--moe-tp": P("--moe-tp", "2", "--moe-ep", "1", key="moeplan.layout", base=BENCH_TP2),
            "--moe-ep": P(
                "--moe-ep",
                "2",
                "--moe-tp",
                "1",
                key="moeplan.layout",
                base=(*BENCH, "--attn-tp", "2", "--moe-tp", "2"),
            ),  # fmt: skip
            "--pp": P("--pp", "2", key="moeplan.layout"),
            "--micro-batches": R("--micro-batches", "4"),
            "--replicas": P("--replicas", "2", key="moeplan.gpus"),
            "--engine": P("--engine", "vllm", key="moeplan.engine"),
            "--engine-version": P("--engine-version", "0.5.9", key="duration"),
            "--cost-engine": P("--cost-engine", "none", key="duration"),
            "--chunk-tokens": P("--chunk-tokens", "64", key="moeplan.scheduler"),
            "--max-running": P("--max-running", "2", key="moeplan.scheduler"),
            "--profile": R("--profile", "{tmp}/no-such-profile.json"),
            "--redundant-experts": P("--redundant-experts", "8", base=BENCH_DP2),
            "--tbo": P("--tbo", base=BENCH_FP8),
            "--overlap-schedule": P("--no-overlap-schedule", key="duration"),
            "--mtp": R("--mtp", "1"),  # DeepSeek-V2-Lite has no MTP layer
            "--mtp-accept": R("--mtp-accept", "0.5"),
            "--kv-dtype": P("--kv-dtype", "fp8", key="moeplan.scheduler"),
            "--mem-fraction": P("--mem-fraction", "0.6", key="moeplan.scheduler"),
            "--a2a": P("--a2a", "nccl", base=BENCH_FP8),
            "--routing-trace": P("--routing-trace", "{trace}", base=BENCH_DP2),
            "--routing": P("--routing", "balanced", base=BENCH_DP2),
            "--num-prompts": P("--num-prompts", "10", key="completed"),
            "--request-rate": P("--request-rate", "5", key="duration"),
            "--burstiness": R("--burstiness", "0.5"),  # a burst has no gaps
            "--max-concurrency": P("--max-concurrency", "2", key="max_concurrent_requests"),
            "--seed": P("--seed", "3", key="total_input_tokens", base=BENCH_SPREAD),
            "--dataset-name": P("--dataset-name", "sharegpt", key="total_input_tokens"),
            "--dataset-path": R("--dataset-path", "{tmp}/missing.csv"),
            "--random-input-len": P("--random-input-len", "128", key="total_input_tokens"),
            "--random-output-len": P("--random-output-len", "8", key="total_output_tokens"),
            "--random-range-ratio": P("--random-range-ratio", "0.5", key="total_input_tokens"),
            "--compare": R("--compare", "{tmp}/missing.json"),
            "--search": P("--search", "--search-gpus", "1"),
            "--search-gpus": R("--search-gpus", "2"),  # needs --search
        },
    ),
    "validate": (
        ("validate", "--limit", "1", "--json"),
        {
            "--limit": P("--limit", "2", key="runs"),
            "--plan": P("--plan", key="plan"),
            "--rows-out": F("--rows-out", "{tmp}/rows.csv"),
        },
    ),
    "recommend": (
        RECOMMEND,
        {
            "--model": P("--model", "qwen3-30b-a3b", key="model"),
            "--cluster": P("--cluster", "h200-sxm-8", key="cluster"),
            "--rate": P("--rate", "3", key="rate_rps"),
            "--ttft-slo": P("--ttft-slo", "500", key="slo"),
            "--tpot-slo": P("--tpot-slo", "20", key="slo"),
            "--slo-percentile": P("--slo-percentile", "50", key="slo"),
            "--isl": P("--isl", "1024", key="check"),
            "--osl": P("--osl", "64", key="check"),
            "--engine": P("--engine", "vllm", key="check"),
            "--requests": P("--requests", "100", key="check"),
        },
    ),
    "plan": (
        PLAN,
        {
            "--model": P("--model", "qwen3-30b-a3b", key="model"),
            # a path on the serving machine, written into the launch files
            # (tests/test_launch_deployment.py); a preset name is refused (no engine loads it)
            "--model-path": R("--model-path", "deepseek-v2-lite"),
            "--cluster": P("--cluster", "h200-sxm-8", key="cluster"),
            "--nodes": P("--nodes", "2"),
            "--racks": R("--racks", "2"),  # h100-sxm-8 is not a rack cluster
            "--layers": P("--layers", "4"),
            "--isl": P("--isl", "512", key="workload"),
            "--osl": P("--osl", "64", key="workload"),
            "--batch": P("--batch", "8"),
            "--rate": P("--rate", "2", key="workload"),
            "--concurrency": R("--concurrency", "4"),
            "--isl-dist": P("--isl-dist", "uniform:256:1024", key="workload"),
            "--osl-dist": P("--osl-dist", "uniform:16:128", key="workload"),
            "--ttft-slo": P("--ttft-slo", "500", key="slo"),
            "--tpot-slo": P("--tpot-slo", "30", key="slo"),
            "--slo-percentile": P("--slo-percentile", "50", key="slo"),
            "--objective": P("--objective", "latency", key="objective"),
            "--engine": P("--engine", "vllm"),
            "--engine-version": P("--engine-version", "0.5.9", key="pricing.engine_version"),
            "--cost-engine": P("--cost-engine", "none"),
            "--requests": P("--requests", "100", key="workload"),
            "--workload": R("--workload", "{tmp}/no-such-workload.json"),
            "--routing-trace": P("--routing-trace", "{trace}"),
            "--families": P("--families", "pipeline"),
            "--profile": R("--profile", "{tmp}/no-such-profile.json"),
            # 8 or 16 GPUs have only power-of-two divisors; on 24 any divisor is the default
            # and powers of two leave deepseek-v2-lite no strategy shape (refused)
            "--any-divisor": R("--powers-of-two", base=(*PLAN, "--nodes", "3")),
            "--placement": P(
                "--no-placement",
                "--routing-trace",
                "{trace}",
                base=(*PLAN, "--routing-trace", "{trace}"),
            ),
            "--seed": P(
                "--seed",
                "7",
                "--isl-dist",
                "uniform:256:1024",
                base=(*PLAN, "--isl-dist", "uniform:256:1024"),
            ),
            "--redundant-experts": R("--redundant-experts", "8"),  # not applied by the search
            "--tbo": P("--tbo", base=PLAN_FP8),
            "--mtp": R("--mtp", "1"),
            # read with --mtp only (a plan of deepseek-v3 with MTP is too long for the sweep)
            "--mtp-accept": R("--mtp-accept", "0.5"),
            "--kv-dtype": P("--kv-dtype", "fp8"),
            "--mem-fraction": P("--mem-fraction", "0.6"),
            "--a2a": P("--a2a", "nccl", base=PLAN_FP8),  # DeepEP runs block-FP8 experts
            "--routing": P("--routing", "balanced", base=PLAN_FP8),
        },
    ),
    "cost": (
        COST_MOE,
        {
            "--engine": P("--engine", "vllm"),
            "--engine-version": P("--engine-version", "0.5.9", key="rows"),
            "--cluster": P("--cluster", "h200-sxm-8"),
            "--gpu": P(
                "--gpu", "h200-sxm", base=("cost", "moe", "--gpu", "h100-sxm", *COST_MOE[4:])
            ),
            "--table": R("--table", "{tmp}/no-such-table.csv"),
            "--num-tokens": P("--num-tokens", "512"),
            "--hidden-size": P("--hidden-size", "4096"),
            "--inter-size": P("--inter-size", "2816"),
            "--topk": P("--topk", "8"),
            "--num-experts": P("--num-experts", "128"),
            "--moe-tp-size": P("--moe-tp-size", "2"),
            "--moe-ep-size": P("--moe-ep-size", "2"),
            "--distribution": P("--distribution", "power_law_1.2"),
            "--moe-dtype": P("--moe-dtype", "fp8"),
            "--batch-size": P("--batch-size", "8", base=COST_ATT),
            "--isl": P("--isl", "2048", base=COST_ATT),
            "--step": R("--step", "4"),
            "--num-heads": P("--num-heads", "32", base=COST_ATT),
            "--num-key-value-heads": P("--num-key-value-heads", "4", base=COST_ATT),
            "--head-dim": P("--head-dim", "64", base=COST_ATT),
            "--window-size": P("--window-size", "256", base=COST_ATT),
            "--attn-dtype": P("--attn-dtype", "fp8", base=COST_ATT),
            "--kv-cache-dtype": P("--kv-cache-dtype", "fp8", base=COST_ATT),
            "--mla-dtype": R("--mla-dtype", "fp8"),
            "--message-size": P("--message-size", "4194304", base=COST_AR),
            "--num-gpus": P("--num-gpus", "4", base=COST_AR),
            "--num-token": P("--num-token", "256", base=COST_DE),
            "--num-topk": P("--num-topk", "8", base=COST_DE),
            "--sms": P("--sms", "20", base=COST_DN),
            "--kernel-source": R("--kernel-source", "bogus"),
            "--gemm-type": R("--gemm-type", "fp8"),
            "--col": R("--col", "latency"),
            "--expert-counts": R("--expert-counts", "1,2,3"),
            "--redundant-experts": R("--redundant-experts", "8"),
            "--eplb": R("--eplb"),
        },
    ),
    "dep": (
        ("dep", *LITE, *H100, "--json"),
        {
            "--model": P("--model", "qwen3-30b-a3b"),
            "--cluster": P("--cluster", "h200-sxm-8"),
            "--isl": P("--isl", "512"),
            "--ag": P("--ag", "2", "--eg", "6"),
            "--eg": P(
                "--ag",
                "4",
                "--eg",
                "4",
                base=("dep", *LITE, *H100, "--ag", "4", "--eg", "2", "--json"),
            ),
            "--gpus": P("--gpus", "4"),
            "--layers": P("--layers", "4"),
            "--profile": R("--profile", "{tmp}/no-such-profile.json"),
            "--engine": P("--engine", "vllm"),
            "--engine-version": P("--engine-version", "0.5.9", key="pricing.engine_version"),
            "--max-batch": P("--max-batch", "16"),
            "--imbalance": P("--imbalance", "1.5"),
            "--verify": P("--verify"),
            "--timeline-layers": P(
                "--timeline-layers",
                "2",
                "--verify",
                base=("dep", *LITE, *H100, "--verify", "--json"),
            ),
        },
    ),
    "pipeline": (
        ("pipeline", *LITE, *H100, "--json"),
        {
            "--model": P("--model", "qwen3-30b-a3b"),
            "--cluster": P("--cluster", "h200-sxm-8"),
            "--pp": P("--pp", "2"),
            "--routing-profile": R("--routing-profile", "{tmp}/no-such-profile.json"),
            "--routing-trace": P("--routing-trace", "{trace}"),
            "--top-p": P(
                "--top-p", "0.5", base=("pipeline", *LITE, *H100, "--top-p", "0.9", "--json")
            ),
            "--isl": P("--isl", "512"),
            "--osl": P("--osl", "64"),
            "--batch": P("--batch", "8"),
            "--phase": P("--phase", "decode"),
            "--sync-pp": P("--sync-pp"),
            "--verify": P("--verify"),
            "--engine": P("--engine", "vllm"),
            "--engine-version": P("--engine-version", "0.5.9", key="pricing.engine_version"),
        },
    ),
    "place": (
        (
            "place",
            "--routing-trace",
            "{trace}",
            "--model",
            "deepseek-v2-lite",
            "--ep",
            "4",
            "--json",
        ),
        {
            "--routing-trace": R("--routing-trace", "{tmp}/no-such-trace.npz"),
            # the model must match the trace (26 MoE layers of 64 experts): another is refused
            "--model": R("--model", "qwen2-57b-a14b"),
            "--ep": P("--ep", "8"),
            "--mode": P("--mode", "tp"),
            "--baselines": P("--no-baselines"),
            "--cluster": P("--cluster", "h200-sxm-8"),
            "--step-tokens": P("--step-tokens", "1024"),
            "--redundant": P("--redundant", "4"),
            "--seed": P("--seed", "3"),
            "--engine": P("--engine", "vllm"),
            "--engine-version": P("--engine-version", "0.5.9", key="pricing.engine_version"),
            "--export-sglang": F("--export-sglang", "{tmp}/eplb.json"),
            "--tables": F("--tables", "{tmp}/tables.npz"),
            "--heatmap": F("--heatmap", "{tmp}/heat.png"),
        },
    ),
    "strategy": (
        ("strategy", *LITE, *H100, "--json"),
        {
            "--model": P("--model", "qwen3-30b-a3b"),
            "--cluster": P("--cluster", "h200-sxm-8"),
            "--isl": P("--isl", "512"),
            "--osl": P("--osl", "64"),
            "--batch": P("--batch", "8"),
            "--rate": P("--rate", "2"),
            "--nodes": P("--nodes", "2"),
            "--racks": R("--racks", "2"),  # h100-sxm-8 is not a rack cluster
            "--ttft-slo": P("--ttft-slo", "50"),
            "--itl-slo": P("--itl-slo", "5"),
            "--rank-by": P("--rank-by", "ttft"),
            "--expert-skew": P("--expert-skew", "1.0"),
            "--seed": P(
                "--seed",
                "3",
                "--expert-skew",
                "1.0",
                base=("strategy", *LITE, *H100, "--expert-skew", "1.0", "--json"),
            ),
            # one node has no smaller deployment; 8 or 16 GPUs have only power-of-two divisors
            "--all-sizes": P(
                "--all-sizes", base=("strategy", *LITE, *H100, "--nodes", "2", "--json")
            ),
            "--any-divisor": P(
                "--any-divisor",
                key="evaluated",
                base=("strategy", "--model", "kimi-k2", *H100, "--nodes", "3", "--json"),
            ),
            "--profile": R("--profile", "{tmp}/no-such-profile.json"),
            "--engine": P("--engine", "vllm"),
            "--engine-version": P("--engine-version", "0.5.9", key="pricing.engine_version"),
            "--top": P("--top", "2"),
            "--export": P("--export", "sglang", key="export"),
            # the checkpoint of the launch command: a path on the serving machine
            "--model-path": P(
                "--model-path",
                "/models/dsv2-lite",
                key="export",
                base=("strategy", *LITE, *H100, "--export", "sglang", "--json"),
            ),
            "--verify": P("--verify"),
        },
    ),
    "trace synth": (
        ("trace", "synth", "--out", "{tmp}/t.npz", "--requests", "64", "--json"),
        {
            "--model": P("--model", "qwen3-30b-a3b"),
            "--requests": P("--requests", "32"),
            "--seed": P("--seed", "3"),
            "--layers": P("--layers", "2"),
        },
    ),
    "trace import": (
        ("trace", "import", "{tmp}/no-such-dump", "--out", "{tmp}/t.npz", "--json"),
        {
            "--from": R("--from", "bogus"),
            "--num-experts": R("--num-experts", "0"),
        },
    ),
    "trace stats": (
        ("trace", "stats", "{trace}", "--json"),
        {
            "--ep": P("--ep", "4"),
            "--seed": P("--seed", "3"),
        },
    ),
    "calibrate": (
        ("calibrate", "--json"),
        {
            "--measured": P("--measured", "a100_sxm"),
            "--seed": P("--seed", "3"),
            "--device": R("--device", "bogus"),
            "--quick": R("--quick"),  # --device only (a measuring run)
            "--name": R("--name", "x"),
            "--kernels": P("--kernels"),
            "--op": R("--op", "bogus"),
            "--folds": P("--folds", "2", base=KERNELS),
            "--errors-out": F("--errors-out", "{tmp}/e.json", base=KERNELS),
            "--test-fold": P("--test-fold", base=KERNELS),  # the frozen B200 / GB200 fold
            "--rows-out": R("--rows-out", "{tmp}/r.json"),  # --device only (a measuring run)
        },
    ),
    "run": (
        ("run", "--plan", "{plan}", "--json"),
        {
            "--plan": R("--plan", "{tmp}/no-such-plan.json"),
            "--nproc": P("--nproc", "2"),
            "--model": R("--model", "{tmp}/no-such-model"),
            "--scale": P("--scale", "tiny"),
            "--tokens": P("--tokens", "256"),
            "--isl": P("--isl", "256"),
            "--weights": P("--weights", "random"),
            "--timeline": F("--timeline", "{tmp}/tl.json"),
            "--unfused": P("--unfused"),
            "--sync-send": P("--sync-send"),
            "--micro-batches": P("--micro-batches", "2"),
            "--timeout": R("--timeout", "0"),
            "--no-check": P("--no-check"),
        },
    ),
}

#: Commands the sweep leaves out, with why (they need what a CPU-only sweep has not).
NOT_SWEPT = {"run": "launches torch worker processes on a plan.json (bench/bench_runtime.py)"}


def all_flags() -> dict[str, list[str]]:
    """Every command of the Typer app (space-separated words) with its flags' first names."""
    import moeplan.cli as cli

    def walk(cmd, path):
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                yield from walk(sub, [*path, name])
        else:
            yield " ".join(path), cmd

    return {
        name: [p.opts[0] for p in cmd.params if p.param_type_name == "option"]
        for name, cmd in walk(cli._command(), [])
    }


def _moeplan(args: list[str], timeout: float) -> tuple[int, str, str]:
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[1] / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    try:
        r = subprocess.run([sys.executable, "-m", "moeplan", *args], capture_output=True,
                           text=True, timeout=timeout, env=env)  # fmt: skip
    except subprocess.TimeoutExpired:
        return -1, "", f"timed out after {timeout:.0f} s"
    return r.returncode, r.stdout, r.stderr


def _strip(x, path: tuple[str, ...] = ()):
    if isinstance(x, dict):
        return {k: _strip(v, (*path, k)) for k, v in x.items()
                if k not in VOLATILE and (*path, k) not in VOLATILE_PATHS}  # fmt: skip
    if isinstance(x, list):
        return [_strip(v, path) for v in x]
    return x


def _at(x, key: str | None):
    for part in (key or "").split(".") if key else ():
        x = x.get(part) if isinstance(x, dict) else None
    return x


def make_trace(folder: Path, timeout: float = 120) -> str:
    """A small routing trace for ``{trace}`` (deepseek-v2-lite, 64 requests)."""
    path = folder / "trace.npz"
    if not path.exists():
        code, _, err = _moeplan(["trace", "synth", "--out", str(path), "--requests", "64",
                                 "--quiet"], timeout)  # fmt: skip
        assert code == 0, err
    return str(path)


def check(
    command: str, flag: str, trace: str, timeout: float = 300, answers: dict | None = None
) -> str | None:
    """None when ``flag`` of ``command`` is read (its probe changes the answer, is refused
    with one line, or writes its file), else why not. ``answers``, when given, keeps each
    base question's answer so that a sweep runs it once."""
    base_args, probes = REGISTRY[command]
    probe = probes[flag]
    with tempfile.TemporaryDirectory() as tmp:

        def fill(args):
            return [a.replace("{tmp}", tmp).replace("{trace}", trace) for a in args]

        base = fill(probe.base or base_args)
        if probe.refused:
            code, out, err = _moeplan(base + fill(probe.args), timeout)
            lines = err.strip().splitlines()
            if code == 2 and len(lines) == 1 and out == "":
                return None
            return f"not refused with one line: exit {code}, {err.strip()[-200:]!r}"
        if probe.file:
            code, _, err = _moeplan(base + fill(probe.args), timeout)
            target = Path(fill(probe.args)[1])
            if code == 0 and target.exists():
                return None
            return f"exit {code}, file written: {target.exists()}, {err.strip()[-200:]!r}"
        key = tuple(x.replace(tmp, "{tmp}") for x in base)
        if answers is not None and key in answers:
            code, a, err = answers[key]
        else:
            code, a, err = _moeplan(base, timeout)
            if answers is not None:
                answers[key] = (code, a, err)
        if code != 0:
            return f"base question fails: exit {code}, {err.strip()[-200:]!r}"
        with tempfile.TemporaryDirectory() as tmp2:
            again = [x.replace(tmp, tmp2) for x in base + fill(probe.args)]
            code, b, err = _moeplan(again, timeout)
        if code != 0:
            return f"probe fails: exit {code}, {err.strip()[-200:]!r}"
        va, vb = _at(_strip(json.loads(a)), probe.key), _at(_strip(json.loads(b)), probe.key)
        if va == vb:
            return f"answer unchanged{' at ' + probe.key if probe.key else ''}: ignored"
        return None
