"""The headline interval: simulation noise beside the kernel prices' held-out error
(moeplan.cost.price_sources.price_band / headline_interval), and where serve-sim reports it.

Oracles: the closed form stated in price_band's docstring computed by hand, and the
capacity record's own half-width, which serve-sim's interval must repeat.
"""

from __future__ import annotations

import json
import math

import pytest

from moeplan.cli import main
from moeplan.cost.price_sources import headline_interval, price_band
from moeplan.search.job.outcome import interval_line


def _src(share: float, err: float | None, covers: float | None = 1.0) -> dict:
    return {"seconds": share, "share": share, "heldout_error": err, "heldout_covers": covers,
            "reason": None}  # fmt: skip


SOURCES = {
    "measured": _src(0.5, 0.0),
    "interpolated": _src(0.3, 0.10),
    "transferred": _src(0.0, None, None),
    "roofline": _src(0.2, 0.20),
}


def test_band_is_independent_sources_weighted_by_their_share() -> None:
    """sqrt((0.5 * 0)^2 + (0.3 * 0.10)^2 + (0.2 * 0.20)^2) = sqrt(0.0009 + 0.0016) = 0.05;
    the worst case (errors added) would be 0.07, one source alone 0.04."""
    band, covers = price_band(SOURCES)
    assert band == pytest.approx(0.05, rel=1e-12)
    assert covers == pytest.approx(1.0)


def test_seconds_without_a_heldout_figure_are_left_out_and_said() -> None:
    """A transferred share of 40 % with no held-out figure, and a roofline share whose
    figure covers half its seconds: the band is over the covered seconds (0.3 x 0.1 and
    0.1 x 0.2), which cover 0.2 + 0.3 + 0.1 = 60 % of the priced seconds."""
    src = {
        "measured": _src(0.2, 0.0),
        "interpolated": _src(0.3, 0.10),
        "transferred": _src(0.3, None, 0.0),
        "roofline": _src(0.2, 0.20, 0.5),
    }
    band, covers = price_band(src)
    assert band == pytest.approx(math.hypot(0.03, 0.02), rel=1e-12)
    assert covers == pytest.approx(0.6)
    none = {k: _src(v["share"], None, 0.0) for k, v in src.items()}
    assert price_band(none) == (None, 0.0)


@pytest.mark.parametrize(("sim", "dominant"), [(0.02, "kernel prices"), (0.08, "simulation noise")])
def test_the_larger_half_dominates_and_both_combine(sim: float, dominant: str) -> None:
    rec = headline_interval(sim, SOURCES)
    assert rec["dominant"] == dominant
    assert rec["simulation_noise_rel"] == sim
    assert rec["combined_rel"] == pytest.approx(math.hypot(sim, 0.05), rel=1e-12)
    line = interval_line(rec)
    assert f"dominant: {dominant}" in line and "+/-5.0% (median)" in line


def test_no_half_is_named_when_most_seconds_have_no_heldout_figure() -> None:
    """97 % of the seconds transferred with no held-out figure (another GPU's tables): the
    band over the other 3 % is stated, but it is not compared with the simulation noise."""
    src = {"transferred": _src(0.97, None, 0.0), "roofline": _src(0.03, 0.10)}
    rec = headline_interval(0.14, src)
    assert rec["kernel_price_error_rel"] == pytest.approx(0.003)
    assert rec["kernel_price_error_covers"] == pytest.approx(0.03)
    assert rec["dominant"] is None
    assert "over 3% of priced seconds" in interval_line(rec)
    assert "no half named" in interval_line(rec)


def test_a_closed_loop_run_has_no_simulation_half() -> None:
    rec = headline_interval(None, SOURCES)
    assert rec["dominant"] is None and rec["combined_rel"] == pytest.approx(0.05)
    assert "no interval" in interval_line(rec)


def test_serve_sim_reports_both_halves(capsys) -> None:
    """An open-loop serve-sim (the SLO capacity search): the interval repeats the capacity
    record's half-width and prices the run's own price sources; the text prints the line."""
    args = ["serve-sim", "--model", "qwen3-30b-a3b", "--cluster", "h100-sxm-8", "--attn-dp",
            "2", "--moe-ep", "2", "--isl", "512", "--osl", "32", "--requests", "200",
            "--quiet"]  # fmt: skip
    main([*args, "--json"])
    d = json.loads(capsys.readouterr().out)
    rec = d["interval"]
    assert rec["simulation_noise_rel"] == d["capacity"]["ci95_half_width_rel"]
    assert rec == headline_interval(d["capacity"]["ci95_half_width_rel"], d["price_sources"])
    assert rec["dominant"] in ("simulation noise", "kernel prices")
    main(args)
    out = " ".join(capsys.readouterr().out.split())
    assert "interval: simulation noise +/-" in out and "dominant:" in out
