"""The report says the same thing everywhere (issue 16): the MixServe chart plots the verdict
table's quantities (its row is a point of the chart), inputs never read "rate None", a truncated
plan is flagged, and — rendered in headless Chromium — no two Gantt labels overlap and none
spills out of its bar (the same check finds overlaps in the figure without the fix)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import replace

import pytest

from moeplan.cost import cost_model_for
from moeplan.planners.rank import plan
from moeplan.report import figures
from moeplan.report.html import Section, render
from moeplan.report.plan_report import launch_exports
from moeplan.report.sections import render_report
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


def test_inputs_say_rate_not_set_and_truncation(demo):
    result, cm = demo
    html = render_report(result, None, cm, None, None, full_layers=60)
    assert "rate None" not in html and "arrival rate not set" in html
    assert "Planned on the first 8 of 60 decoder layers" in html
    given = replace(result, workload=replace(result.workload, rate=2.0))
    html = render_report(given, None, cm, None, None, full_layers=8)
    assert "arrival rate 2 requests/s" in html and "Planned on the first" not in html


def test_launch_section_names_what_each_script_launches(demo):
    result, cm = demo
    exports = launch_exports(
        result,
        result.winner.plan,
        model_path="deepseek-ai/DeepSeek-V2",
        full=load_model("deepseek-v2"),
    )
    html = render_report(result, None, cm, None, exports, full_layers=60)
    for ex in exports.values():
        assert f"{ex.gap:.2f}x" in html and ex.label in html
        assert "full model's weights alone need" in ex.text  # 236B params on 8 x 48 GB


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
    fixed = gantt_check(figures.dep_gantt(d), tmp_path, "fixed")
    # labels show only inside bars wide enough for them (how many depends on the schedule)
    assert fixed["bad"] == [], fixed
    raw = gantt_figure(schedules(d.detail, layers=2), title="without the fix")
    assert gantt_check(raw, tmp_path, "raw")["bad"], "the check must see the old overlaps"


def test_placement_on_another_ep_than_the_winner_says_so(demo):
    from moeplan.report.sections import _ep_note, winner_ep

    result, _ = demo
    layout = result.winner.plan.layout
    expected = layout["moe"]["ep"] if result.winner.family == "strategy" else layout["eg"]
    assert winner_ep(result) == expected
    assert _ep_note(8, 8) == ""
    assert "has no expert parallelism" in _ep_note(1, 8)
    assert "runs EP16" in _ep_note(16, 8) and "estimate on EP8" in _ep_note(16, 8)
