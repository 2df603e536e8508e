"""``moeplan dep`` end to end: JSON contract, files, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from moeplan.cli import main
from moeplan.cost import cost_model_for
from moeplan.planners import dep
from moeplan.specs import load_cluster, load_model

BASE = [
    "dep",
    "--model",
    "deepseek-v2",
    "--cluster",
    "findep-a",
    "--isl",
    "2048",
    "--layers",
    "3",
    "--max-batch",
    "8",
]


def _run_json(capsys, args):
    main([*args, "--json"])
    return json.loads(capsys.readouterr().out)


def test_json_has_the_documented_keys(capsys):
    d = _run_json(capsys, [*BASE, "--ag", "3", "--eg", "5", "--verify"])
    assert set(d["config"]) >= {"ma", "r1", "r2", "me", "order", "ag", "eg"}
    assert (d["config"]["ag"], d["config"]["eg"]) == (3, 5)
    for k in ("pppipe", "naive"):
        assert set(d["baselines"][k]) >= {"config", "throughput_tokens_per_s"}
    assert d["speedup_vs_pppipe"] == pytest.approx(
        d["throughput_tokens_per_s"] / d["baselines"]["pppipe"]["throughput_tokens_per_s"]
    )
    assert d["solve_ms"] > 0
    assert set(d["bruteforce"]) >= {"throughput_tokens_per_s", "ms"}
    assert 0.0 <= d["gap_vs_bruteforce"] <= 0.01
    assert d["cpsat"]["status"] in ("OPTIMAL", "FEASIBLE")


def test_gpu_budget_searches_splits(capsys):
    d = _run_json(capsys, [*BASE, "--gpus", "6"])
    assert d["config"]["ag"] + d["config"]["eg"] == 6


def test_human_output_and_files(capsys, tmp_path):
    out_dir = tmp_path / "dep"
    html, trace, plan = (out_dir / n for n in ("gantt.html", "timeline.json", "plan.json"))
    main([*BASE, "--ag", "3", "--eg", "5", "--out", str(out_dir)])
    out = capsys.readouterr().out
    assert "speedup" in out and "PPPipe" in out and "where the time goes" in out
    assert "plotly" in html.read_text().lower()
    events = json.loads(trace.read_text())["traceEvents"]
    procs = sorted(e["args"]["name"] for e in events if e["name"] == "process_name")
    assert len(procs) == 2 and procs[0].startswith("FinDEP") and procs[1].startswith("PPPipe")
    p = json.loads(plan.read_text())
    assert (
        p["family"] == "dep" and p["layout"]["ag"] + p["layout"]["eg"] == p["layout"]["world_size"]
    )
    assert sorted(x.name for x in out_dir.iterdir()) == ["gantt.html", "plan.json", "timeline.json"]


@pytest.mark.parametrize(
    "extra,needle",
    [
        (["--ag", "5", "--eg", "5"], "ag + eg (5 + 5 = 10) must be <= the cluster's GPUs (8)"),
        (["--ag", "3", "--eg", "5", "--isl", "0"], "isl (0) must be > 0"),
        (["--ag", "3"], "--ag and --eg must be given together"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(extra, needle):
    args = [a for a in BASE if a not in ("--isl", "2048")] if "--isl" in extra else BASE
    proc = subprocess.run(
        [sys.executable, "-m", "moeplan", *args, *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr


def test_model_that_does_not_fit_exits_2():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "moeplan",
            "dep",
            "--model",
            "deepseek-v3",
            "--cluster",
            "findep-b",
            "--isl",
            "1024",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "does not fit" in proc.stderr


def test_plan_dict_and_traces_for_moeplan_plan():
    cl = load_cluster("findep-c")
    r = dep.plan_dep(
        load_model("qwen3-235b-a22b"),
        cl,
        cost_model_for(cl),
        seq_len=1024,
        ag=4,
        eg=4,
        layers=2,
        batch=4,
    )
    p = dep.to_plan(r).to_dict()
    assert p["schema"] == "moeplan.plan/1" and p["layout"] == {"world_size": 8, "ag": 4, "eg": 4}
    assert set(p["details"]) >= {"ma", "r1", "r2", "me", "order"}
    assert p["predicted"]["throughput_tokens_per_s"] == pytest.approx(r.findep.throughput)
    tr = dep.chrome_traces(r)
    spans = tr["otherData"]["makespan_s"]
    assert len(spans) == 2
    assert sorted(spans.values()) == pytest.approx(sorted([r.findep.makespan, r.pppipe.makespan]))
