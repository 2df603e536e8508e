"""The grid's plans (``bench/questions.json``): the Pareto front of ``plan --json`` (enough
non-dominated points from the deployments kept, each equal to a ``serve-sim`` rerun, the same
in ``pareto.csv`` and in the report's chart), and the latency-vs-load chart at the chosen
rate showing the verdict's own figures."""

from __future__ import annotations

import csv
import json
import re

import pytest

import grid
from grid import QUESTIONS, moeplan, params, slo_ms


@pytest.fixture(scope="module", params=params())
def planned(request):
    return request.param, *grid.planned(request.param)


def figures(html: str) -> dict[str, list[dict]]:
    """Each ``Plotly.newPlot`` call's data, by its layout title (the report's charts)."""
    dec = json.JSONDecoder()
    out = {}
    for m in re.finditer(r"const L=", html):
        lay, _ = dec.raw_decode(html, m.end())
        call = html.index("Plotly.newPlot(", m.end())
        data, _ = dec.raw_decode(html, html.index(",", call) + 1)
        title = lay.get("title", {})
        out[title.get("text", "") if isinstance(title, dict) else str(title)] = data
    return out


def close(a: float, b: float, rel: float = 2e-3) -> bool:
    """Equal to the report's 4 significant digits."""
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-12)


def test_the_front_has_enough_points_from_the_deployments_kept(planned):
    _, out, _ = planned
    front = out["pareto"]
    kept = {c["layout"] for c in out["candidates"] if c["meets_slo"]}
    assert len(front) >= 5, front
    if len(kept) >= 2:
        assert len({p["deployment"] for p in front}) >= 2, front
    for p in front:
        assert p["stable"] and p["tokens_per_s_per_user"] > 0 and p["tokens_per_s_per_gpu"] > 0
        assert {"deployment", "batch_cap", "ttft_p90_s", "tpot_p90_s", "rate_rps"} <= set(p)


def test_no_point_of_the_csv_dominates_the_front(planned):
    _, out, folder = planned
    rows = list(csv.DictReader((folder / "pareto.csv").open()))
    pts = [(float(r["tokens_per_s_per_user"]), float(r["tokens_per_s_per_gpu"])) for r in rows]
    on = [r for r in rows if r["on_front"] == "1"]
    assert len(on) == len(out["pareto"])
    for p in out["pareto"]:
        x, y = p["tokens_per_s_per_user"], p["tokens_per_s_per_gpu"]
        assert not any(a > x * (1 + 1e-9) and b > y * (1 + 1e-9) for a, b in pts), p
    # a dominated point exists or every point is on the front: the CSV holds the whole sweep
    assert len(rows) >= len(on)


def test_the_reports_main_chart_is_the_json_front(planned):
    _, out, folder = planned
    figs = figures((folder / "report.html").read_text())
    chart = next(v for k, v in figs.items() if k.startswith("Pareto front"))
    line = next(t for t in chart if t.get("name") == "Pareto front")
    front = sorted(out["pareto"], key=lambda p: p["tokens_per_s_per_user"])
    assert len(line["x"]) == len(front)
    for x, y, p in zip(line["x"], line["y"], front, strict=True):
        assert close(x, p["tokens_per_s_per_user"]) and close(y, p["tokens_per_s_per_gpu"])


def test_the_latency_chart_at_the_chosen_rate_shows_the_verdict(planned):
    """Each top plan's curve passes through its verdict: at its largest SLO-meeting rate the
    chart's TTFT and TPOT p90 are the JSON candidate's; a point above that rate misses."""
    _, out, folder = planned
    figs = figures((folder / "report.html").read_text())
    chart = next(v for k, v in figs.items() if k.startswith("Latency against load"))
    by_label = {f"{c['family']}: {c['layout']}": c for c in out["candidates"]}
    seen = 0
    for t in chart:
        c = by_label[t["name"]]
        m = c["metrics"]
        rate = m["max_rate_meeting_slo_rps"]
        key = "ttft_p90_s" if t.get("xaxis", "x") == "x" else "tpot_p90_s"
        i = min(range(len(t["x"])), key=lambda j: abs(t["x"][j] - rate))
        assert close(t["x"][i], rate)
        assert close(t["y"][i], m[key] * 1e3), (t["name"], key, t["y"][i], m[key])
        above = [y for x, y in zip(t["x"], t["y"], strict=True) if x > rate * (1 + 1e-3)]
        if key == "ttft_p90_s" and above:  # past capacity one of the two SLOs breaks
            seen += 1
    assert seen >= 1


def test_a_front_point_is_a_serve_sim_rerun(planned):
    """The winner's points off capacity are ``serve-sim --rate R`` runs, figure for figure;
    its point at capacity is ``serve-sim`` of the plan (no rate): the verdict."""
    name, out, folder = planned
    q = QUESTIONS[name]
    win = out["winner"]
    label = f"{win['family']}: {win['layout']}"
    mine = [p for p in out["pareto"] if p["label"] == label]
    pick = [p for p in mine if p["source"] == "serve-sim --rate"][:1] or mine[:1]
    if not pick:
        pytest.skip("the winner has no point on the front")
    p = pick[0]
    ttft, tpot = slo_ms(q)
    base = ["serve-sim", "--model", q["model"], "--cluster", q["cluster"], "--nodes",
            str(q["nodes"]), "--isl", str(q["isl"]), "--osl", str(q["osl"]), "--requests",
            str(q["requests"]), "--ttft-slo", f"{ttft:g}", "--tpot-slo", f"{tpot:g}",
            "--json", "--quiet"]  # fmt: skip
    rate = [] if p["source"].startswith("capacity") else ["--rate", repr(p["rate_rps"])]
    which = "--pd" if win["family"] in ("pd", "afd") else "--plan"
    r = moeplan(*base, which, str(folder / "plan.json"), *rate)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)["metrics"]
    for k in ("ttft_p90_s", "tpot_p90_s", "tpot_p50_s"):
        assert got[k] == pytest.approx(p[k], rel=1e-6), k
    assert got["output_tokens_per_s_per_gpu"] == pytest.approx(p["tokens_per_s_per_gpu"], rel=1e-6)
