"""The server side of every measured lab run is a deployment ``serve-sim`` accepts.

The 126 single-node runs of ``moeplan/data/benchmarks/lab_a100_h100_moe.csv`` name their engine,
release and launch command; each is simulated with ``serve-sim --launch CMD --engine-version V``
on the run's GPU. Oracle: the lab's own columns (it ran, so the engine accepted it), except the
rows whose stated layout cannot hold the checkpoint — refused with the memory rule, and listed
here with the arithmetic (:data:`IMPOSSIBLE`) — and the rows the engine ran with a kernel no
table prices, refused with the capability rule (:data:`UNPRICED`). The whole sweep is ``-m slow``; ``make test``
keeps one run per (engine, model, GPU)."""

from __future__ import annotations

import csv
import json
from importlib import resources

import pytest

from cli_run import run_main

CLUSTER = {"A100": "a100-sxm-8", "H100": "h100-sxm-8"}
#: rows whose stated layout cannot hold the weights: GLM-4.5-Air in bf16 is 106.85B
#: parameters = 199 GiB of weights (``moeplan inspect glm-4.5-air``), more than two 80 GB
#: H100s hold; the report's TP2 rows on 2 GPUs must have run another checkpoint or GPU
IMPOSSIBLE = {"glm-4.5-air/h100#05", "glm-4.5-air/h100#06"}
#: rows the engine ran with a kernel moeplan does not price, refused with the capability
#: rule (moeplan.backends.sglang_caps): SGLang serves gpt-oss's MXFP4 experts on SM80 A100s
#: without the SM90/SM100 MoE kernels its tables measure (layers/quantization/mxfp4.py
#: ``_swizzle_mxfp4``), and no table prices the path it falls back to
UNPRICED = {"gpt-oss-120b/a100#02", "gpt-oss-20b/a100#02"}


def _rows() -> list[dict[str, str]]:
    path = resources.files("moeplan").joinpath("data", "benchmarks", "lab_a100_h100_moe.csv")
    with path.open() as f:
        return list(csv.DictReader(f))


def _args(r: dict[str, str]) -> list[str]:
    return [
        "serve-sim", "--launch", r["serve_flags"], "--model", r["model"], "--cluster", CLUSTER[r["gpu"]],
        "--engine-version", r["engine_version"], "--concurrency", "8", "--requests", "16",
        "--isl", "512", "--osl", "32", "--jobs", "1", "--json",
    ]  # fmt: skip


def _sample() -> list[dict[str, str]]:
    seen: dict[tuple[str, str, str], dict[str, str]] = {}
    for r in _rows():
        seen.setdefault((r["engine"], r["model"], r["gpu"]), r)
    return list(seen.values()) + [r for r in _rows() if r["case_id"] in IMPOSSIBLE | UNPRICED]


def _check(capsys, r: dict[str, str]) -> None:
    code, out, err = run_main(capsys, *_args(r))
    if r["case_id"] in IMPOSSIBLE:
        assert code == 2 and "GiB" in err, (r["case_id"], err)
        return
    if r["case_id"] in UNPRICED:
        assert code == 2 and "mxfp4" in err and "SM80" in err, (r["case_id"], err)
        return
    assert code == 0, (r["case_id"], err)
    answer = json.loads(out)
    assert answer["engine"]["name"] == r["engine"], r["case_id"]
    assert answer["gpus"] * answer.get("replicas", 1) == int(r["gpus"]), r["case_id"]


@pytest.mark.parametrize("row", _sample(), ids=lambda r: r["case_id"])
def test_one_lab_run_per_engine_model_and_gpu(capsys, row):
    _check(capsys, row)


@pytest.mark.slow
@pytest.mark.parametrize("row", _rows(), ids=lambda r: r["case_id"])
def test_every_lab_run(capsys, row):
    _check(capsys, row)
