"""The committed question grid (``bench/questions.json``): its questions as ``moeplan plan``
arguments, the sample ``make test`` runs and the whole grid the ``-m slow`` tests run."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

import pytest

GRID_FILE = Path(__file__).resolve().parent.parent / "bench" / "questions.json"
GRID = json.loads(GRID_FILE.read_text())
QUESTIONS: dict[str, dict] = {q["name"]: q for q in GRID["questions"]}
SAMPLE: list[str] = GRID["sample"]


def slo_ms(q: dict) -> tuple[float, float]:
    """The question's TTFT and TPOT SLOs in ms."""
    s = GRID["slo_sets"][q["slo"]]
    return float(s["ttft_ms"]), float(s["tpot_ms"])


def plan_args(q: dict, *, ttft_ms: float | None = None, tpot_ms: float | None = None) -> list[str]:
    """``moeplan plan`` arguments of question ``q`` (SLOs replaced when given)."""
    ttft, tpot = slo_ms(q)
    return [
        "--model", q["model"], "--cluster", q["cluster"], "--nodes", str(q["nodes"]),
        "--isl", str(q["isl"]), "--osl", str(q["osl"]), "--requests", str(q["requests"]),
        "--ttft-slo", f"{ttft_ms if ttft_ms is not None else ttft:g}",
        "--tpot-slo", f"{tpot_ms if tpot_ms is not None else tpot:g}",
    ]  # fmt: skip


def params() -> list:
    """The grid as pytest parameters: the sample as it is, the rest marked slow."""
    return [
        pytest.param(name, id=name, marks=() if name in SAMPLE else pytest.mark.slow)
        for name in QUESTIONS
    ]


def moeplan(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "moeplan", *args], capture_output=True, text=True, timeout=timeout
    )


def plan(name: str, out: Path, **slo: float) -> dict:
    """``moeplan plan --json`` of grid question ``name`` writing its artifacts to ``out``."""
    p = moeplan("plan", *plan_args(QUESTIONS[name], **slo), "--no-placement", "--quiet",
                "--json", "--out", str(out))  # fmt: skip
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@cache
def planned(name: str) -> tuple[dict, Path]:
    """Grid question ``name`` planned once per test process (its JSON and artifact folder):
    the tests of one question share the run."""
    out = Path(tempfile.mkdtemp(prefix="moeplan-grid-")) / "o"
    return plan(name, out), out
