"""The report says the same thing everywhere: the MixServe chart plots the analytic table's
quantities (its row is a point of the chart), the served workload is what the header says
(a given rate is named, never "not set"), launch scripts carry the full model's memory note,
and — rendered in headless Chromium — no two Gantt labels overlap and none spills out of its
bar (the same check finds overlaps in the figure without the fix)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from types import SimpleNamespace

import pytest

from moeplan.cost import cost_model_for
from moeplan.planners.rank import plan
from moeplan.report import figures
from moeplan.report.html import PLOTLY_FILE, Section, plotly_js, render
from moeplan.report.plan_report import launch_exports
from moeplan.report.trust import served_text
from moeplan.search.job.parts import fit_notes
from moeplan.serve.metrics import SLO
from moeplan.specs import Workload, load_cluster, load_model

CHROME = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def demo():
    """The README demo: DeepSeek-V2 cut to 8 layers on findep-a, colocated and FinDEP."""
    m, c = load_model("deepseek-v2").with_layers(8), load_cluster("findep-a")
    w = Workload(phase="both", batch=32, isl=2048, osl=256)
    cm = cost_model_for(c, None)
    return plan(m, c, w, cm, families=("strategy", "dep")), cm


def test_chart_plots_the_table_quantities(demo):
    result, _ = demo
    s = next(c for c in result.candidates if c.family == "strategy")
    fig = figures.pareto(s, result.workload)
    by_name = {t.name: t for t in fig.data}
    star = next(t for n, t in by_name.items() if n.startswith("in the table"))
    assert star.y[0] == pytest.approx(s.per_gpu) and star.x[0] == pytest.approx(s.itl_s * 1e3)
    pts = list(zip(by_name["strategies"].x, by_name["strategies"].y, strict=True))
    assert any(x == pytest.approx(star.x[0]) and y == pytest.approx(star.y[0]) for x, y in pts)
    front = list(zip(by_name["Pareto front"].x, by_name["Pareto front"].y, strict=True))
    for fx, fy in front:  # brute force: nothing at least as fast with a lower ITL
        assert not any(x < fx and y >= fy or x <= fx and y > fy for x, y in pts)
    for x, y in pts:  # and every point not on the front is dominated by one on it
        assert (x, y) in front or any(fx <= x and fy >= y for fx, fy in front)


def _outcome(workload: dict, rate_rps: float | None = None):
    """The fields served_text reads, as plan_job leaves them."""
    winner = SimpleNamespace(result=SimpleNamespace(max_rate_meeting_slo_rps=rate_rps))
    ranking = SimpleNamespace(slo=SLO(ttft_s=2.0, tpot_s=0.1, percentile=90.0))
    return SimpleNamespace(served_workload=workload, ranking=ranking, winner=winner)


def test_header_names_the_served_load():
    """A given rate is named (not "rate not set", not the analytic batch); without one, each
    deployment's SLO-bound capacity and the winner's; the SLO limits in full milliseconds."""
    base = {"isl": "2048", "osl": "256", "rate_rps": None}
    text = served_text(_outcome({**base, "rate_rps": 4.0}))
    assert "Poisson arrivals at 4 requests/s" in text and "not set" not in text
    assert "2048 prompt + 256 output tokens" in text and "prompts ×" not in text
    assert "TTFT ≤ 2,000 ms, TPOT ≤ 100 ms" in text and "p90" in text
    text = served_text(_outcome(base, rate_rps=12.345))
    assert "SLO-bound capacity" in text and "12.35 requests/s" in text


def test_launch_scripts_say_the_full_model_does_not_fit(demo):
    result, _ = demo
    full = load_model("deepseek-v2")
    notes = tuple(fit_notes(result.model, result.cluster, full))
    assert notes and "full model's weights alone need" in notes[0]  # 236B params on 8 x 48 GB
    exports = launch_exports(result, result.winner.plan, model_path="deepseek-ai/DeepSeek-V2",
                             full_layers=full.num_layers, notes=notes)  # fmt: skip
    for ex in exports.values():
        assert "full model's weights alone need" in ex.text
        assert "planned on the first 8 of 60 layers" in ex.text
    assert fit_notes(result.model, result.cluster, result.model) == []  # nothing cut


# Visible bar labels: each must lie inside its own bar and overlap no other label.
CHECK_JS = """<script>
window.addEventListener('load', () => setTimeout(() => {
  const boxes = [], bad = [];
  document.querySelectorAll('g.point').forEach(pt => {
    const bar = pt.querySelector('path'), txt = pt.querySelector('text');
    if (!bar || !txt || !txt.textContent) return;
    const t = txt.getBoundingClientRect(), b = bar.getBoundingClientRect();
    if (t.width === 0 || getComputedStyle(txt).opacity === '0') return;
    if (t.left < b.left - 0.5 || t.right > b.right + 0.5) bad.push('spills: ' + txt.textContent);
    boxes.push([t, txt.textContent]);
  });
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const [a, n] = boxes[i], [b, m] = boxes[j];
    const w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
    const h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
    if (w > 0.5 && h > 0.5) bad.push('overlap: ' + n + ' / ' + m);
  }
  const out = document.createElement('pre');
  out.id = 'gantt-check';
  out.textContent = JSON.stringify({labels: boxes.length, bad: bad});
  document.body.appendChild(out);
}, 1500));
</script>"""


def gantt_check(fig, tmp_path, name: str) -> dict:
    page = render("gantt", "", [Section(title="g", figures=[fig])])
    if not (tmp_path / PLOTLY_FILE).exists():  # the page loads plotly.js from beside it
        (tmp_path / PLOTLY_FILE).write_text(plotly_js(), encoding="utf-8")
    path = tmp_path / f"{name}.html"
    path.write_text(page.replace("</body>", CHECK_JS + "</body>"))
    p = subprocess.run(
        [
            CHROME,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=10000",
            "--window-size=1280,1200",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--dump-dom",
            path.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    found = re.search(r'<pre id="gantt-check">(.*?)</pre>', p.stdout, re.S)
    assert found, p.stderr[-1500:]
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))


@pytest.mark.browser
@pytest.mark.skipif(
    CHROME is None, reason="chromium not installed; `make test-browser` installs Debian's chromium"
)
def test_gantt_labels_do_not_overlap_when_rendered(demo, tmp_path):
    from moeplan.planners.dep.planner import schedules
    from moeplan.sim import gantt_figure

    result, _ = demo
    d = next(c for c in result.candidates if c.family == "dep")
    fixed = gantt_check(figures.dep_gantt(schedules(d.detail, layers=2)), tmp_path, "fixed")
    # labels show only inside bars wide enough for them (how many depends on the schedule)
    assert fixed["bad"] == [], fixed
    raw = gantt_figure(schedules(d.detail, layers=2), title="without the fix")
    assert gantt_check(raw, tmp_path, "raw")["bad"], "the check must see the old overlaps"
