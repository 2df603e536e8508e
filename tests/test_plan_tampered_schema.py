"""A tampered ``plan.json`` is refused before use, by every reader, with one line naming the
field, its value and the rule (exit 2, nothing written).

The plans are real ones, written by ``moeplan pipeline``, ``moeplan dep`` and ``moeplan plan``;
each test changes one field. Through the library (:meth:`Plan.from_dict`, which every reader
calls, and :func:`check_plan_model`) for the many cases, through ``serve-sim --plan`` and
``run --plan`` for a few.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hypothesis_budget import examples
from moeplan.errors import MoeplanError
from moeplan.planners.plan import Plan
from moeplan.planners.plan_schema import (
    MAX_GPUS,
    MAX_LAYERS,
    MAX_MICRO_BATCHES,
    MAX_MTP,
    check_plan_model,
)
from moeplan.specs import load_model

MODEL = "deepseek-v2-lite"  # 27 decoder layers: a dense first layer, then MoE
COMMANDS = {
    "pipeline": ["pipeline", "--model", MODEL, "--cluster", "h100-sxm-8", "--pp", "2"],
    "dep": [
        "dep",
        "--model",
        MODEL,
        "--cluster",
        "findep-c",
        "--ag",
        "2",
        "--eg",
        "2",
        "--isl",
        "128",
    ],  # fmt: skip
    "served": [
        "plan",
        "--model",
        MODEL,
        "--cluster",
        "h100-sxm-8",
        "--requests",
        "50",
        "--families",
        "pipeline",
    ],  # fmt: skip
    "pd": ["plan", "--model", MODEL, "--cluster", "h100-sxm-8", "--requests", "100"],
}


def _moeplan(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "moeplan", *args],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=600,
    )  # fmt: skip


def _write(tmp: Path, name: str) -> dict[str, Any]:
    out = tmp / name
    r = _moeplan(*COMMANDS[name], "--out", str(out))
    assert r.returncode == 0, r.stderr
    return json.loads((out / "plan.json").read_text())


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("plans")
    return {name: _write(tmp, name) for name in ("pipeline", "dep", "served")}


@pytest.fixture(scope="module")
def pd_plan(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A plan whose winner is served as prefill and decode pools."""
    return _write(tmp_path_factory.mktemp("pd"), "pd")


def tamper(plan: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    """``plan`` with the field at ``path`` set to ``value`` (a deep copy)."""
    out = copy.deepcopy(plan)
    obj = out
    for key in path[:-1]:
        obj = obj[key]
    obj[path[-1]] = value
    return out


def where(path: tuple[Any, ...]) -> str:
    """The field's name as the error line writes it (``plan.layout.stages[0].modules[1]...``)."""
    text = "plan"
    for key in path:
        text += f"[{key}]" if isinstance(key, int) else f".{key}"
    return text


def refused(doc: dict[str, Any], field: str) -> str:
    with pytest.raises(MoeplanError) as info:
        Plan.from_dict(doc)
    msg = str(info.value)
    assert "\n" not in msg
    assert field in msg, msg
    return msg


LAYER = ("layout", "stages", 0, "modules", 0, "layer")
CASES = [  # (plan, field path, tampered value, the words of the rule)
    ("pipeline", LAYER, -1, "0..1023"),
    ("pipeline", LAYER, 10**12, "0..1023"),
    ("pipeline", ("layout", "world_size"), 64, "must equal pp x"),
    ("pipeline", ("details", "microbatches"), 10**12, f"1..{MAX_MICRO_BATCHES}"),
    ("pipeline", ("layout", "stages", 1, "start_module"), 3, "consecutive"),
    ("pipeline", ("layout", "stages", 0, "end_module"), 99, "start_module +"),
    ("pipeline", ("layout", "stages", 1, "modules", 2, "kind"), "conv", "attn, moe, mlp"),
    ("pipeline", ("layout", "stages", 1, "modules", 2, "tp"), 2, "tp*ep*dpmoe"),
    ("dep", ("layout", "world_size"), 64, "ag+eg"),
    ("dep", ("layout", "ag"), 2.0, "integer"),
    ("dep", ("layout", "eg"), [2], "integer"),
    ("served", ("layout", "world_size"), 64, "must equal pp x"),
    ("served", ("predicted", "serving", "knobs", "tbo"), [], "bool"),
    ("served", ("predicted", "serving", "knobs", "tbo"), 1, "bool"),
    ("served", ("predicted", "serving", "knobs", "a2a"), 7, "str"),
    ("served", ("predicted", "serving", "knobs", "mtp"), 10**12, f"0..{MAX_MTP}"),
    ("served", ("predicted", "serving", "serve_layout", "micro_batches"), 10**12, "0.."),
    ("served", ("predicted", "serving", "serve_layout", "attn_tp"), True, "integer"),
    ("served", ("predicted", "serving", "serve_layout", "gpus"), 2, "instance's GPUs"),
    ("served", ("predicted", "serving", "gpus"), -1, f"1..{MAX_GPUS}"),
    ("served", ("predicted", "serving", "gpus"), 64, "x replicas"),
    ("served", ("predicted", "serving", "replicas"), 0, f"1..{MAX_GPUS}"),
]


@pytest.mark.parametrize(("name", "path", "value", "rule"), CASES)
def test_a_tampered_field_is_one_line_naming_it(plans, name, path, value, rule):
    assert Plan.from_dict(plans[name]).family  # the untampered plan reads
    named = where(path[:-1]) if rule == "tp*ep*dpmoe" else where(path)  # a sum names its parts
    msg = refused(tamper(plans[name], path, value), named)
    assert rule in msg, msg
    assert repr(value) in msg or str(value) in msg, msg


def test_the_written_plans_read_and_fit_their_model(plans):
    model = load_model(MODEL)
    for doc in plans.values():
        check_plan_model(Plan.from_dict(doc), model)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("layout", "stages", 1, "modules", -1, "layer"), 27),  # past the model's last layer
        (("layout", "stages", 1, "modules", -1, "layer"), 25),  # layer 25 twice, 26 never
    ],
)
def test_pipeline_layers_must_cover_the_model_exactly(plans, path, value):
    plan = Plan.from_dict(tamper(plans["pipeline"], path, value))  # the schema allows it
    with pytest.raises(
        MoeplanError, match=r"plan\.layout\.stages\[1\]\.modules\[25\].*decoder layers"
    ) as info:
        check_plan_model(plan, load_model(MODEL))
    assert "\n" not in str(info.value)


def test_a_pipeline_plan_of_another_model_is_refused(plans):
    with pytest.raises(MoeplanError, match=r"decoder layers"):
        check_plan_model(Plan.from_dict(plans["pipeline"]), load_model("qwen3-30b-a3b"))


NOT_AN_INT = st.one_of(
    st.booleans(),
    st.floats(allow_nan=False),
    st.text(max_size=3),
    st.lists(st.integers(), max_size=2),
    st.none(),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=1),
)
INT_FIELDS = [  # (plan, path, lowest valid value, highest valid value)
    ("pipeline", ("layout", "world_size"), 1, MAX_GPUS),
    ("pipeline", ("layout", "pp"), 1, MAX_GPUS),
    ("pipeline", LAYER, 0, MAX_LAYERS - 1),
    ("pipeline", ("layout", "stages", 0, "modules", 1, "dpmoe"), 1, MAX_GPUS),
    ("pipeline", ("details", "microbatches"), 1, MAX_MICRO_BATCHES),
    ("dep", ("layout", "ag"), 1, MAX_GPUS),
    ("served", ("predicted", "serving", "replicas"), 1, MAX_GPUS),
    ("served", ("predicted", "serving", "serve_layout", "moe_ep"), 1, MAX_GPUS),
]


@pytest.mark.parametrize(("name", "path", "lo", "hi"), INT_FIELDS)
@settings(max_examples=examples(40), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_an_integer_field_of_another_type_or_out_of_range_is_refused(plans, name, path, lo, hi,
                                                                     data):  # fmt: skip
    value = data.draw(
        st.one_of(NOT_AN_INT, st.integers(max_value=lo - 1), st.integers(min_value=hi + 1))
    )
    refused(tamper(plans[name], path, value), where(path))


@settings(max_examples=examples(40), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.one_of(st.integers(), st.text(max_size=3), st.lists(st.booleans(), max_size=2),
                       st.none(), st.floats(allow_nan=False)))  # fmt: skip
def test_a_knob_tbo_that_is_not_a_boolean_is_refused(plans, value):
    path = ("predicted", "serving", "knobs", "tbo")
    refused(tamper(plans["served"], path, value), where(path))


@pytest.mark.slow  # a full `moeplan plan` of every family (about 20 s)
@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("details", "disaggregation", "gpus"), -1),
        (("details", "disaggregation", "gpus"), 64),
        (("predicted", "serving", "gpus"), -1),
        (("details", "disaggregation", "decode", "knobs", "tbo"), []),
        (("details", "disaggregation", "prefill", "instances"), 0),
        (("details", "disaggregation", "prefill", "micro_batches"), 10**12),
    ],
)
def test_a_tampered_pd_plan_is_refused(pd_plan, path, value):
    assert Plan.from_dict(pd_plan).details["disaggregation"]["kind"] == "pd"
    refused(tamper(pd_plan, path, value), where(path))


def _one_line_exit_2(r: subprocess.CompletedProcess[str], field: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert field in lines[0], lines[0]


@pytest.mark.parametrize(
    ("name", "path", "value"),
    [
        ("pipeline", LAYER, -1),
        ("served", ("layout", "world_size"), 64),
        ("served", ("predicted", "serving", "knobs", "tbo"), []),
    ],
)
def test_serve_sim_refuses_a_tampered_plan(plans, tmp_path, name, path, value):
    bad = tmp_path / "plan.json"
    bad.write_text(json.dumps(tamper(plans[name], path, value)))
    trace = tmp_path / "trace.json"
    r = _moeplan("serve-sim", "--plan", str(bad), "--requests", "40", "--trace-out", str(trace))
    _one_line_exit_2(r, where(path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]  # nothing written


@pytest.mark.parametrize(
    ("name", "path", "value"),
    [
        ("pipeline", ("details", "microbatches"), 10**12),
        ("served", ("predicted", "serving", "gpus"), -1),
        ("dep", ("layout", "world_size"), 64),
    ],
)
def test_run_refuses_a_tampered_plan_before_any_process(plans, tmp_path, name, path, value):
    bad = tmp_path / "plan.json"
    bad.write_text(json.dumps(tamper(plans[name], path, value)))
    trace = tmp_path / "timeline.json"
    r = _moeplan("run", "--plan", str(bad), "--timeline", str(trace))
    _one_line_exit_2(r, where(path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]  # nothing written


def test_the_mtp_bound_is_the_instance_knobs_bound():
    from moeplan.serve.iteration import instance_knobs

    assert MAX_MTP == instance_knobs.MAX_MTP
