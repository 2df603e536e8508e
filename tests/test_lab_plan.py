"""``moeplan validate --plan``: moeplan's pick for a comparison group's question.

Oracles: every launch of :func:`launch_space` read back by the engine's own launch grammar
equals a brute-force enumeration of the degrees that engine's flags state (no layout twice,
none missing); the pick of a two-run question is the largest of separate ``moeplan bench``
runs of every candidate launch (exhaustive); the verdict rules on hand-made rankings."""

from __future__ import annotations

import csv
import io
import itertools

import pytest

from moeplan.commands.bench import DEPLOYMENT_FLAGS, bench_answer
from moeplan.commands.lab_plan import launch_space, plan_answer, verdict
from moeplan.commands.launch_flags import apply_launch
from moeplan.commands.validate import bench_inputs, read_rows, shipped_csv, validate_answer
from moeplan.errors import MoeplanError


def _degrees(cmd: str) -> tuple[int, ...]:
    v, _ = apply_launch(cmd, {k: None for k in DEPLOYMENT_FLAGS}, lambda _n: False)
    return tuple(v[k] or 1 for k in ("attn_tp", "attn_dp", "moe_tp", "moe_ep", "pp", "replicas"))


def _brute(engine: str, g: int) -> set[tuple[int, ...]]:
    """Every (attn TP, attn DP, MoE TP, MoE EP, PP, copies) on ``g`` GPUs the engine's flags
    state, from the rules alone."""
    out = set()
    r = range(1, g + 1)
    for at, ad, mt, me, pp, cp in itertools.product(r, r, r, r, r, r):
        w = at * ad
        if w * pp * cp != g or mt * me != w:
            continue
        if engine == "vllm":  # -tp x -dp, MoE all TP or all EP
            ok = cp == 1 and (me == 1 or mt == 1)
        elif engine == "sglang":  # --tp-size per stage; copies only without a pipeline
            ok = cp == 1 or (pp == 1 and ad == 1)
        else:  # TensorRT-LLM: no attention DP, no copies
            ok = ad == 1 and cp == 1
        if ok:
            out.add((at, ad, mt, me, pp, cp))
    return out


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
def test_launch_space_is_every_layout_the_engine_states(engine, gpus):
    cmds = launch_space(engine, "openai/gpt-oss-120b", gpus)
    got = [_degrees(c) for c in cmds]
    assert len(got) == len(set(got))  # no layout twice
    assert set(got) == _brute(engine, gpus)


def test_launch_space_bad_input_is_one_line():
    with pytest.raises(MoeplanError, match="engine"):
        launch_space("tgi", "openai/gpt-oss-120b", 2)
    with pytest.raises(MoeplanError, match="gpus"):
        launch_space("vllm", "openai/gpt-oss-120b", 0)


def _two_run_csv(tmp_path, prompts: int) -> str:
    rows = {r["case_id"]: r for r in read_rows(None)}
    with shipped_csv().open() as f:
        fields = csv.DictReader(f).fieldnames
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore")  # the lab's columns
    w.writeheader()
    for c in ("gpt-oss-120b/h100#05", "gpt-oss-120b/h100#07"):  # -tp 2 and -pp 2, one group
        w.writerow({**rows[c], "num_prompts": str(prompts)})
    path = tmp_path / "two.csv"
    path.write_text(buf.getvalue())
    return str(path)


def test_the_pick_is_the_best_of_every_candidate_benched_alone(tmp_path):
    path = _two_run_csv(tmp_path, 40)
    out = validate_answer(path, jobs=1)
    (q,) = plan_answer(path, out, jobs=1)
    rows = read_rows(path)
    measured_best = max(rows, key=lambda r: float(r["total_tok_s"]))
    # 2 runs + the 5 launches of vLLM on 2 GPUs, of which -tp 2 and -pp 2 are the runs'
    assert q["candidates"] == 5 and q["measured_runs"] == 2 and q["refused"] == 0
    values, s, p = bench_inputs(measured_best)
    alone, flags = {}, {}
    for cmd in launch_space("vllm", "openai/gpt-oss-120b", 2):
        a = bench_answer(dict(values), s, launch=cmd, prompts=p)
        alone[a["moeplan"]["layout"]] = a["total_token_throughput"]
        flags[a["moeplan"]["layout"]] = a["moeplan"]["scheduler"]["cuda_graphs"]["flagged"]
    for r in rows:  # a run is priced with its own flags on its own prompts
        v, s2, p2 = bench_inputs(r)
        a = bench_answer(v, s2, launch=r["serve_flags"], prompts=p2)
        alone[a["moeplan"]["layout"]] = a["total_token_throughput"]
        flags[a["moeplan"]["layout"]] = a["moeplan"]["scheduler"]["cuda_graphs"]["flagged"]
    ranked = {c["layout"]: c["predicted"] for c in q["ranking"]}
    assert ranked.keys() == alone.keys()
    assert {c["layout"]: c["outside_graphs"] for c in q["ranking"]} == flags
    for k, v in alone.items():
        assert ranked[k] == pytest.approx(v, rel=1e-9)
    assert q["pick"]["predicted"] == pytest.approx(max(alone.values()), rel=1e-9)
    assert q["measured_best"]["case_id"] == measured_best["case_id"]
    assert q["verdict"] in ("agrees", "disagrees", "tie", "unverified")
    if q["pick"]["case_id"] is None:
        assert q["verdict"] == "unverified" and q["pick"]["measured"] is None
        assert q["measured_best"]["measured"] == float(measured_best["total_tok_s"])


def _member(case, layout, gpus=2):
    row = {"case_id": case, "engine": "vllm", "engine_version": "0.11.0", "model": "m",
           "serve_flags": f"vllm serve m # {case}"}  # fmt: skip
    return row, {"layout": layout, "gpus": gpus}


def _ask(measured: dict[str, float], predicted: dict[str, float], priced: list[dict]):
    members, by_id = [], {}
    layouts = {"a": "L1", "b": "L2", "c": "L2"}
    for case in measured:
        row, x = _member(case, layouts[case])
        members.append(row)
        by_id[case] = {**x, "predicted": {"total_tok_s": predicted[case]}}
    best = max(measured, key=measured.get)
    group = {"doc": "d", "dataset": "random", "isl": "1", "osl": "1", "num_prompts": "2",
             "half": "test", "measured_best": best}  # fmt: skip
    return verdict(group, members, by_id, lambda r: measured[r["case_id"]], priced)


def _gen(layout, tok, ran=True, outside=False):
    if not ran:
        return {"launch": "x", "ran": False, "reason": "weights do not fit"}
    return {"launch": f"vllm serve m # {layout}", "ran": True, "engine": "vllm",
            "engine_version": "0.11.0", "model": "m", "layout": layout, "gpus": 2,
            "total_tok_s": tok, "outside_graphs": outside}  # fmt: skip


def test_verdicts():
    meas = {"a": 100.0, "b": 90.0}
    q = _ask(meas, {"a": 50.0, "b": 40.0}, [_gen("L1", 55.0), _gen("L3", 45.0)])
    assert q["verdict"] == "agrees" and q["candidates"] == 3  # L1 generated is run a
    q = _ask(meas, {"a": 40.0, "b": 50.0}, [])
    assert q["verdict"] == "disagrees" and q["pick"]["measured"] == 90.0
    q = _ask(meas, {"a": 40.0, "b": 50.0}, [_gen("L3", 60.0), _gen("L3", 70.0), _gen("", 0, False)])
    assert q["verdict"] == "unverified" and q["candidates"] == 3 and q["refused"] == 1
    assert q["pick"]["predicted"] == 60.0 and q["pick"]["measured"] is None
    assert q["measured_best"]["measured"] == 100.0 and q["measured_best"]["predicted"] == 40.0
    assert q["pick_over_best_predicted"] == pytest.approx(1.5)
    q = _ask({"a": 80.0, "b": 90.0, "c": 100.0}, {"a": 10.0, "b": 50.0, "c": 50.0}, [])
    assert q["verdict"] == "tie"  # b and c: the same deployment, flags not priced


def test_a_pick_run_outside_cuda_graphs_says_so():
    """The pick's run above the engine's CUDA-graph capture size is marked in the answer,
    counted per half and named optimistic on its line; a pick within is not."""
    from moeplan.commands.lab_plan import plan_text

    q = _ask({"a": 100.0, "b": 90.0}, {"a": 50.0, "b": 40.0}, [_gen("L3", 60.0, outside=True)])
    assert q["pick"]["outside_graphs"] is True
    text = plan_text([q])
    assert "  picks run outside CUDA graphs (priced optimistic): 1" in text
    assert any("(outside CUDA graphs: optimistic)" in line for line in text)
    q = _ask({"a": 100.0, "b": 90.0}, {"a": 50.0, "b": 40.0}, [_gen("L3", 60.0)])
    assert q["pick"]["outside_graphs"] is False
    assert not any("(outside CUDA graphs" in line for line in plan_text([q]))


def test_layout_kind():
    from moeplan.commands.lab_plan import layout_kind

    assert layout_kind("attn TP4xDP1 / MoE TP1xEP4") == "tp/ep"
    assert layout_kind("attn TP1xDP8 / MoE TP1xEP8") == "attention DP"
    assert layout_kind("attn TP1xDP2 / MoE TP2xEP1 / PP2x2mb") == "pipeline"


def test_a_repeat_of_the_measured_best_launch_agrees():
    members = [
        {
            "case_id": c,
            "engine": "vllm",
            "engine_version": "0.11.0",
            "model": "m",
            "serve_flags": "vllm serve m  --async-scheduling",
        }  # fmt: skip
        for c in ("a", "b")
    ]
    members[1]["serve_flags"] = "vllm serve m --async-scheduling"  # same words, other spacing
    by_id = {"a": {"layout": "L1", "gpus": 1, "predicted": {"total_tok_s": 10.0}},
             "b": {"layout": "L1", "gpus": 1, "predicted": {"total_tok_s": 10.1}}}  # fmt: skip
    group = {"doc": "d", "dataset": "sharegpt", "isl": "", "osl": "", "num_prompts": "2",
             "half": "dev", "measured_best": "a"}  # fmt: skip
    q = verdict(group, members, by_id, lambda r: {"a": 5.0, "b": 4.9}[r["case_id"]], [])
    assert q["pick"]["case_id"] == "b" and q["verdict"] == "agrees"
