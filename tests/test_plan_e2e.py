"""``moeplan plan`` end to end: artifacts exist and parse, plan.json feeds the runtime mesh."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from html import escape
from pathlib import Path

import pytest

from moeplan.cost import cost_model_for
from moeplan.planners.plan import Plan
from moeplan.planners.rank import TIE, Candidate, plan
from moeplan.runtime.mesh import mesh_from_plan
from moeplan.specs import Workload, load_cluster, load_model


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "moeplan", *args], capture_output=True, text=True, timeout=280
    )


CASES = [
    ("deepseek-v2", "findep-a", ["--layers", "8"]),
    ("qwen3-235b-a22b", "smidt-a40", []),
]


@pytest.fixture(scope="module", params=CASES, ids=[c[1] for c in CASES])
def planned(request, tmp_path_factory):
    model, cluster, extra = request.param
    out = tmp_path_factory.mktemp(cluster)
    p = run(
        "plan",
        "--model",
        model,
        "--cluster",
        cluster,
        *extra,
        "--out",
        str(out),
        "--requests",
        "200",
        "--json",
        "--quiet",
    )  # 200 measured requests: a quick run
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout), out


def test_every_artifact_exists_and_parses(planned):
    out, folder = planned
    for name in ("plan.json", "timeline.json"):
        json.loads((folder / name).read_text())
    html = (folder / "report.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "Plotly.newPlot" in html
    assert not re.search(r"<(script|link)[^>]+(src|href)=\"https?:", html)  # works offline
    for sh in ("sglang/launch.sh", "sglang/stop.sh", "vllm/launch.sh", "vllm/stop.sh"):
        path = folder / "launch" / sh
        assert os.access(path, os.X_OK)
        assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
    assert set(out["artifacts"]) >= {"plan", "report", "timeline", "sglang", "vllm", "launch"}
    for kind in ("launch", "sglang", "vllm", "plan", "report"):  # the final paths, each there
        assert Path(out["artifacts"][kind]).resolve().is_relative_to(folder.resolve())
        assert Path(out["artifacts"][kind]).exists(), kind
    deployments = json.loads((folder / "launch" / "deployment.json").read_text())
    for engine, dep in deployments.items():  # every launched deployment has its manifests
        assert (dep is not None) == (folder / "launch" / "k8s" / f"{engine}.yaml").is_file()
    assert not list(folder.glob(".*.tmp"))  # no temp files left behind


def test_plan_json_round_trips_into_the_runtime_mesh(planned):
    out, folder = planned
    saved = json.loads((folder / "plan.json").read_text())
    assert saved["schema"] == "moeplan.plan/1"
    mesh = mesh_from_plan(saved)
    assert mesh.world_size == saved["layout"]["world_size"]
    pools = saved["details"].get("disaggregation")
    if pools is None:  # colocated: the plan is one instance, launched `replicas` times
        assert mesh.world_size * saved["details"].get("replicas", 1) == out["winner"]["gpus"]
        assert mesh.family == saved["family"] == out["winner"]["family"]
    else:  # P/D or AFD: plan.json is one runnable instance, the pools are in details
        assert pools["gpus"] == out["winner"]["gpus"]
        assert pools["kind"] == out["winner"]["family"]
        inst = {"pd": "decode", "afd": "decode"}[pools["kind"]]
        if saved["family"] == "strategy":
            assert mesh.world_size == pools[inst]["gpus"]


def test_analytic_ranking_is_by_tokens_per_gpu_and_explained(planned):
    """Each family's own figure (prefill of one batch) stays available, ranked per GPU."""
    out, _ = planned
    analytic = out["analytic"]
    per_gpu = [c["prefill_tokens_per_s_per_gpu"] for c in analytic["ranking"]]
    # descending, except that plans tied within TIE may swap (colocated first)
    assert all(b <= a * (1 + TIE) / (1 - TIE) for a, b in zip(per_gpu, per_gpu[1:], strict=False))
    assert per_gpu[0] >= max(per_gpu) * (1 - TIE)
    first = analytic["explanation"][0]  # names the leader's layout and its rate per GPU
    lead = analytic["ranking"][0]
    assert lead["label"] in first, first
    assert f"{lead['prefill_tokens_per_s_per_gpu']:,.0f} prompt tokens/s per GPU" in first
    assert len(analytic["ranking"]) + len(out["skipped"]) == 3


def test_serving_candidates_are_ranked_slo_first_then_by_throughput_per_gpu(planned):
    """The plan's interface keys, and the order: plans meeting the SLOs first, then
    output tokens/s per GPU (the default objective), the winner first."""
    out, _ = planned
    assert out["objective"] == "throughput-per-gpu"
    assert set(out["slo"]) >= {"ttft_s", "tpot_s"}
    cands = out["candidates"]
    assert cands and out["winner"]["label"] == cands[0]["label"]
    keys = {
        "ttft_p50_s",
        "ttft_p90_s",
        "tpot_p50_s",
        "tpot_p90_s",
        "e2e_p90_s",
        "output_tokens_per_s",
        "output_tokens_per_s_per_gpu",
        "goodput_rps",
        "max_rate_meeting_slo_rps",
        "kv_utilisation",
        "preemptions",
    }
    done = [c for c in cands if c["metrics"]]
    for c in done:
        assert {"family", "label", "gpus", "meets_slo", "metrics"} <= set(c)
        assert keys <= set(c["metrics"])
        m = c["metrics"]
        if c["meets_slo"]:
            assert (
                m["ttft_p90_s"] <= out["slo"]["ttft_s"] and m["tpot_p90_s"] <= out["slo"]["tpot_s"]
            )
    meets = [c["meets_slo"] for c in done]
    assert meets == sorted(meets, reverse=True)
    ok = [c["metrics"]["output_tokens_per_s_per_gpu"] for c in done if c["meets_slo"]]
    assert ok == sorted(ok, reverse=True)
    # the winner's sentence names it and its throughput per GPU
    first = out["explanation"][0]
    assert cands[0]["layout"] in first
    assert f"{cands[0]['metrics']['output_tokens_per_s_per_gpu']:,.1f} output tokens/s" in first


def test_pareto_front_is_not_dominated(planned):
    """Brute force: no point of the front is dominated by any simulated candidate."""
    out, _ = planned
    pts = [
        (c["metrics"]["output_tokens_per_s_per_gpu"], 1.0 / c["metrics"]["tpot_p50_s"])
        for c in out["candidates"]
        if c["metrics"] and c["metrics"]["tpot_p50_s"] > 0
    ]
    assert out["pareto"]
    for p in out["pareto"]:
        x, y = p["tokens_per_s_per_gpu"], p["tokens_per_s_per_user"]
        assert not any(a > x * (1 + 1e-9) and b > y * (1 + 1e-9) for a, b in pts), p


def test_timeline_is_the_serving_winners_engine_iterations(planned):
    """The Chrome trace is the served winner's run: one engine lane, iterations back to back
    without overlap, and every prompt token prefilled once (no preemption, no prefix cache)."""
    out, folder = planned
    trace = json.loads((folder / "timeline.json").read_text())
    meta = trace["otherData"]
    assert meta["family"] == out["winner"]["family"] and meta["label"] == out["winner"]["label"]
    xs = sorted((e for e in trace["traceEvents"] if e["ph"] == "X"), key=lambda e: e["ts"])
    assert xs and len({(e["pid"], e["tid"]) for e in xs}) == 1
    tol = 1e-9 * (xs[-1]["ts"] + xs[-1]["dur"])
    assert all(b["ts"] >= a["ts"] + a["dur"] - tol for a, b in zip(xs, xs[1:], strict=False))
    assert [e["args"]["iteration"] for e in xs] == list(range(len(xs)))
    colocated = out["winner"]["family"] in ("strategy", "pipeline")
    if colocated and meta["preemptions"] == 0 and meta["shown"] == meta["iterations"]:
        isl = int(out["workload"]["isl"])
        assert sum(e["args"]["prefill_tokens"] for e in xs) == meta["requests"] * isl


REPORT_LIMIT = 1_000_000  # bytes: report.html of any preset plan (plotly.js lies beside it)


def test_report_is_small_and_loads_plotly_from_beside_it(planned):
    _, folder = planned
    page = (folder / "report.html").read_text(encoding="utf-8")
    assert len(page.encode()) <= REPORT_LIMIT
    assert page.count('<script src="plotly.min.js">') == 1
    assert (folder / "plotly.min.js").stat().st_size > 1_000_000  # the library, once


def _table_after(page: str, title: str) -> list[list[str]]:
    body = page.split(f"<h2>{title}</h2>", 1)[1].split("</table>", 1)[0]
    return [re.findall(r"<td>(.*?)</td>", row) for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body)]


def test_price_sources_add_up_and_the_report_prints_them(planned):
    """``price_sources``: the winner's priced seconds per source, shares summing to 1; on a
    GPU without tables nothing is measured or interpolated; the report's trust table shows
    the same shares."""
    out, folder = planned
    ps = out["price_sources"]
    assert list(ps) == ["measured", "interpolated", "transferred", "roofline"]
    assert sum(r["share"] for r in ps.values()) == pytest.approx(1.0, abs=1e-9)
    assert sum(r["seconds"] for r in ps.values()) > 0.0
    assert all(r["seconds"] >= 0.0 for r in ps.values())
    if out["pricing"].get("transferred_gpu"):
        assert ps["measured"]["seconds"] == ps["interpolated"]["seconds"] == 0.0
    page = (folder / "report.html").read_text(encoding="utf-8")
    rows = {r[0]: r for r in _table_after(page, "How far to trust the prices") if r}
    shown = {src: r for src, r in ps.items() if r["seconds"] > 0.0}
    assert set(rows) == set(shown)
    for src, r in shown.items():
        assert rows[src][1] == f"{r['share']:.1%}"


def test_report_lists_the_launch_files_written_and_the_served_load(planned):
    """The launch table names exactly the launch.sh files in the folder (the P/D deployment
    itself when P/D wins);
    the header says the request stream served, not the analytic batch; limits are stated."""
    out, folder = planned
    page = (folder / "report.html").read_text(encoding="utf-8")
    listed = {row[0] for row in _table_after(page, "Launch scripts") if row}
    assert listed == {str(p.relative_to(folder)) for p in folder.glob("launch/*/launch.sh")}
    dep = json.loads((folder / "launch" / "deployment.json").read_text())["sglang"]
    if out["winner"]["family"] == "pd" and dep is not None:
        assert set(dep["pools"]) == {"prefill", "decode"}
    header = page.split("<header>", 1)[1].split("</header>", 1)[0]
    assert "prompts ×" not in header and "SLO-bound capacity" in header
    assert f"{out['workload']['isl']} prompt + {out['workload']['osl']} output tokens" in header
    assert out["limits"].startswith("What limits this deployment") and escape(out["limits"]) in page
    # one limit in every place: the lead sentence, the limits and the winner's table row
    lead, bound = out["explanation"][0], out["winner"]["bound"]
    assert lead.startswith("Deploy ") and lead.endswith(f"; limited by {bound}.")
    assert out["limits"].startswith(f"What limits this deployment: {bound}. ")
    assert not any("bound by" in x for x in out["explanation"])
    fill = out["cluster_fill"]
    if fill is not None:
        assert fill["copies"] * fill["gpus"] + fill["idle_gpus"] == fill["cluster_gpus"]


def _fake(family: str, tps: float, gpus: int) -> Candidate:
    return Candidate(
        family=family,
        label=family,
        gpus=gpus,
        prefill_tokens_per_s=tps,
        ttft_s=1.0,
        mem_bytes_per_gpu=1e9,
        bound="compute",
        plan=Plan(family=family, model="m", cluster="c", layout={"world_size": gpus}),
    )


def test_rank_with_fake_adapters_and_slo():
    m, c = load_model("mixtral-8x7b"), load_cluster("h100-sxm-8")
    adapters = {
        "strategy": lambda *a: _fake("strategy", 800, 8),
        "pipeline": lambda *a: _fake("pipeline", 300, 2),  # best per GPU
        "dep": lambda *a: _fake("dep", 900, 8),
    }
    r = plan(m, c, Workload(), cost_model_for(c), adapters=adapters)
    assert [x.family for x in r.candidates] == ["pipeline", "dep", "strategy"]
    assert "1.33x" in r.explanation[2]
    from moeplan.errors import MoeplanError

    with pytest.raises(MoeplanError):  # every candidate has TTFT 1 s > the 0.5 s SLO
        plan(m, c, Workload(), cost_model_for(c), adapters=adapters, ttft_slo_s=0.5)


def test_ties_prefer_the_launchable_colocated_plan():
    m, c = load_model("mixtral-8x7b"), load_cluster("h100-sxm-8")
    adapters = {
        "strategy": lambda *a: _fake("strategy", 800.0, 8),
        "pipeline": lambda *a: _fake("pipeline", 801.0, 8),
        "dep": lambda *a: _fake("dep", 700.0, 8),
    }
    r = plan(m, c, Workload(), cost_model_for(c), adapters=adapters)
    assert [x.family for x in r.candidates] == ["strategy", "pipeline", "dep"]
    assert "ties" in r.explanation[2]


def test_model_that_fits_nowhere_names_the_smallest_cluster(tmp_path):
    out = tmp_path / "nofit"
    p = run(
        "plan",
        "--model",
        "kimi-k2",
        "--cluster",
        "findep-b",
        "--quiet",
        "--no-placement",
        "--out",
        str(out),
    )
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "smallest preset that would" in lines[0], p.stderr
    assert not out.exists() or not any(out.iterdir())  # nothing written, not even partly


def test_bad_families_one_line():
    p = run("plan", "--families", "strategy,magic", "--quiet")
    assert p.returncode == 2 and "families" in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_the_winners_run_outside_cuda_graphs_is_stated(planned):
    """``cuda_graphs``: the colocated winner's steady run, its share of engine time in decode
    steps above the engine's capture size (moeplan.serve.cuda_graphs) recomputed from that
    share and the flag's rule; None for a winner that keeps no such run (P/D pools)."""
    from moeplan.serve.cuda_graphs import OUTSIDE_GRAPHS_FLAG

    out, _ = planned
    g = out["cuda_graphs"]
    if out["winner"]["family"] in ("pd", "afd"):
        assert g is None
        return
    assert g is not None
    share = g["engine_time_above_share"]
    assert g["flagged"] == (share is not None and share > OUTSIDE_GRAPHS_FLAG)
    assert share is None or 0.0 <= share <= 1.0
