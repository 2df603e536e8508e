"""Acceptance fuzz: malformed inputs through the real CLI entry points, in process.

Every case must end with exit 0 (the mutation happened to be valid) or 2 with exactly one
stderr line, never an exception escaping ``main`` (a traceback), and within a per-case limit
(a SIGALRM raises :class:`_Hang`). Bounded: ~180 cases at the full example counts
(``make test-slow``), a quarter of them in ``make test``. The
larger subprocess run is ``make fuzz`` (``bench/fuzz_all.py``). ``run --plan`` is fuzzed up to
the point where it would start processes (``spawn_world`` is replaced by an exit), because
that is where a tampered plan.json is read and validated.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch
import typer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hypothesis_budget import examples
from moeplan.cli import main
from moeplan.specs.presets import model_config
from moeplan.traces.format import to_long
from moeplan.traces.synthetic import uniform_trace

CASE_LIMIT_S = 20
PRESETS = ("deepseek-v2-lite", "qwen3-30b-a3b", "mixtral-8x7b", "gpt-oss-120b")
BASE = {p: model_config(p) for p in PRESETS}
TRACE = uniform_trace(num_requests=8, length=4, num_layers=26, num_experts=64, top_k=6)
FUZZ = settings(
    derandomize=True, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

VALUES = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=3),
    st.booleans(),
    st.none(),
    st.lists(st.integers(min_value=-3, max_value=70000), max_size=3),
    st.dictionaries(st.sampled_from(["a", "world_size", "ma"]), st.integers(-2, 3), max_size=2),
)


class _Hang(BaseException):  # noqa: N818 - a time limit, not an error
    pass


def _alarm(signum, frame):
    raise _Hang


@contextmanager
def _limit(seconds: float) -> Iterator[None]:
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _check(capsys, argv: list[str]) -> int:
    """Run one CLI case; assert the issue-17 contract; return the exit code."""
    capsys.readouterr()
    code = 0
    try:
        with _limit(CASE_LIMIT_S):
            main(argv)
    except SystemExit as ex:
        code = int(ex.code or 0)
    except _Hang:
        pytest.fail(f"hang: moeplan {' '.join(argv)} ran past {CASE_LIMIT_S} s")
    err = capsys.readouterr().err.strip().splitlines()
    assert code in (0, 2), (argv, code, err)
    if code:
        assert len(err) == 1 and err[0].startswith("moeplan: error: "), (argv, err)
    return code


@settings(FUZZ, max_examples=examples(40))
@given(preset=st.sampled_from(PRESETS), data=st.data(), value=VALUES)
def test_fuzz_inspect_json(tmp_path, capsys, preset, data, value):
    cfg = dict(BASE[preset])
    key = data.draw(st.sampled_from(sorted(cfg) + ["mlp_only_layers"]))
    cfg[key] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    if _check(capsys, ["inspect", str(path), "--json"]) == 0:
        assert json.loads(capsys.readouterr().out or "{}") is not None


def _mutated_trace(tmp_path: Path, data: st.DataObject) -> Path:
    cols = {k: np.array(v) for k, v in to_long(TRACE).items()}
    cols["num_experts"] = np.array(64)
    column = data.draw(st.sampled_from(sorted(cols)))
    how = data.draw(st.sampled_from(["value", "dtype", "truncate", "drop"]))
    a = cols[column]
    if how == "value":
        b = a.astype(np.int64).reshape(-1)
        b[data.draw(st.integers(0, b.size - 1))] = data.draw(
            st.integers(min_value=-(2**63), max_value=2**63 - 1)
        )
        cols[column] = b.reshape(a.shape)
    elif how == "dtype":
        with np.errstate(all="ignore"):
            cols[column] = a.astype(data.draw(st.sampled_from(["f8", "?", "U2", "u8", "i1"])))
    elif how == "truncate" and a.ndim:
        cols[column] = a[: data.draw(st.integers(0, len(a) - 1))]
    else:
        cols.pop(column)
    path = tmp_path / "t.npz"
    np.savez(path, **cols)
    return path


@settings(FUZZ, max_examples=examples(40))
@given(data=st.data())
def test_fuzz_trace_stats(tmp_path, capsys, data):
    path = _mutated_trace(tmp_path, data)
    ep = data.draw(st.sampled_from(["8", "0", "-1", "64", "65"]))
    _check(capsys, ["trace", "stats", str(path), "--ep", ep, "--json"])


@settings(FUZZ, max_examples=6)
@given(data=st.data())
def test_fuzz_place(tmp_path, capsys, data):
    path = _mutated_trace(tmp_path, data)
    _check(
        capsys,
        [
            "place",
            "--trace",
            str(path),
            "--model",
            "deepseek-v2-lite",
            "--ep",
            "8",
            "--no-baselines",
            "--json",
        ],
    )


_REC = {
    "input_ids": [1, 2, 3],
    "positions": [0, 1, 2],
    "extend_seq_lens": [3],
    "topk_ids_of_layer": torch.tensor([[[0, 1], [2, 3], [4, 5]]] * 2),
}


@settings(FUZZ, max_examples=examples(40))
@given(
    key=st.sampled_from(
        [
            "input_ids",
            "positions",
            "extend_seq_lens",
            "topk_ids_of_layer",
            "records",
            "last_physical_to_logical_map",
        ]
    ),
    value=st.one_of(
        VALUES,
        st.builds(
            torch.tensor,
            st.lists(st.integers(min_value=-(2**40), max_value=2**40), min_size=1, max_size=3),
        ),
    ),
    stat=st.booleans(),
)
def test_fuzz_trace_import(tmp_path, capsys, key, value, stat):
    if stat:
        dump = {"logical_count": value if key == "records" else torch.ones((2, 3, 8))}
        out, kind = tmp_path / "load.json", "sglang-stat"
    else:
        rec = dict(_REC)
        dump = {"records": [rec]}
        if key in rec:
            rec[key] = value
        else:
            dump[key] = value
        out, kind = tmp_path / "t.npz", "sglang-per-token"
    path = tmp_path / "expert_distribution_recorder_0.pt"
    torch.save(dump, path)
    _check(capsys, ["trace", "import", str(path), "--from", kind, "--out", str(out)])


PLAN = {
    "schema": "moeplan.plan/1",
    "family": "dep",
    "layout": {"world_size": 2, "ag": 1, "eg": 1},
    "details": {"ma": 2, "r1": 2, "r2": 2, "order": "ASAS"},
}


@settings(FUZZ, max_examples=examples(50))
@given(
    where=st.sampled_from(["", "layout", "details"]),
    data=st.data(),
    value=VALUES,
    timeout=st.sampled_from(["5", "nan", "inf", "0", "-1", "1e12"]),
)
def test_fuzz_run_tampered_plan(tmp_path, capsys, monkeypatch, where, data, value, timeout):
    import moeplan.runtime.spawn as spawn

    def no_spawn(*args, **kwargs):
        raise typer.Exit(0)  # the plan passed every check: that is all this fuzz covers

    monkeypatch.setattr(spawn, "spawn_world", no_spawn)
    doc = json.loads(json.dumps(PLAN))
    target = doc if not where else doc[where]
    key = data.draw(st.sampled_from(sorted(target) + ["model", "seq_len"]))
    target[key] = value
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    _check(capsys, ["run", "--plan", str(path), "--no-check", "--timeout", timeout])
