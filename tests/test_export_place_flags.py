"""``moeplan place --export-sglang``: the file SGLang reads and the flags that go with it
(``--ep-num-redundant-experts`` when ``--redundant`` replicated experts), written with the
user's normal permissions; and ``trace synth --layers`` makes a trace ``plan --layers`` takes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from moeplan.export import constraints as cons
from moeplan.specs import load_cluster, load_model


def run(*args: str) -> tuple[int, str, str]:
    p = subprocess.run(
        [sys.executable, "-m", "moeplan", *args], capture_output=True, text=True, timeout=600
    )
    return p.returncode, p.stdout, p.stderr


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("place") / "t.npz"
    rc, out, err = run(
        "trace",
        "synth",
        "--model",
        "deepseek-v2-lite",
        "--requests",
        "256",
        "--out",
        str(path),
        "--json",
    )
    assert rc == 0, err
    return path


def test_trace_synth_layers_matches_plan_layers(tmp_path):
    """The README pair: a trace of the first L layers has that model's MoE layers."""
    path = tmp_path / "t4.npz"
    rc, out, err = run(
        "trace",
        "synth",
        "--model",
        "deepseek-v2-lite",
        "--layers",
        "4",
        "--requests",
        "8",
        "--out",
        str(path),
        "--json",
    )
    assert rc == 0, err
    assert json.loads(out)["layers"] == load_model("deepseek-v2-lite").with_layers(4).num_moe_layers
    rc, _, err = run(
        "trace", "synth", "--model", "deepseek-v2-lite", "--layers", "0", "--out", str(path)
    )
    assert rc == 2 and "--layers (0)" in err


def _place(trace, tmp_path, redundant: int, *extra: str) -> tuple[dict, object]:
    """``place --export-sglang --json`` under umask 027; checks the printed flags and the file."""
    loc = tmp_path / "loc.json"
    old = os.umask(0o027)
    try:
        rc, out, err = run(
            "place",
            "--trace",
            str(trace),
            "--model",
            "deepseek-v2-lite",
            "--ep",
            "8",
            "--redundant",
            str(redundant),
            "--export-sglang",
            str(loc),
            "--json",
            *extra,
        )
    finally:
        os.umask(old)
    assert rc == 0, err
    obj = json.loads(out)
    flags = obj["sglang_flags"]
    f = cons.flags(flags)
    width = len(json.loads(loc.read_text())["physical_to_logical_map"][0])
    assert width == 64 + 8 * redundant and f["--ep-size"] == "8"
    assert f["--init-expert-location"] == str(loc.resolve())
    assert f.get("--ep-num-redundant-experts") == (str(8 * redundant) if redundant else None)
    assert loc.stat().st_mode & 0o777 == 0o640  # 0666 less the umask, not mkstemp's 0600
    t = cons.Target.of(load_model("deepseek-v2-lite"), load_cluster("h100-sxm-8"))
    args = ["--tp-size", "8", "--attn-dp-size", "8", *flags]
    assert not cons.check_sglang(args, t, gpus_used=8, location_width=width)
    return obj, loc


def test_place_with_replicas_prints_the_flags_for_its_file(trace, tmp_path):
    _place(trace, tmp_path, 1, "--no-baselines")


def test_place_json_keys_exports_and_flags_without_replicas(trace, tmp_path):
    """One run without replicas checks its flags and every documented output (moved here
    from tests/test_placement_cli.py, which ran ``place`` a second time for them on a trace
    whose Sem-MoE falls back to contiguous): --json prints one object with ep,
    methods{lar, imbalance, a2a, time} and solve_s; the SGLang export is a valid
    [num_hidden_layers, E] map with E/ep experts per GPU, each on the device the tables say."""
    tables, html = tmp_path / "tables.npz", tmp_path / "h.html"
    obj, loc = _place(trace, tmp_path, 0, "--tables", str(tables), "--heatmap", str(html))
    assert obj["fallback"] is False  # Sem-MoE kept: the map is not the contiguous one
    assert obj["ep"] == 8 and obj["solve_s"] > 0
    assert set(obj["methods"]) == {"contiguous", "eplb", "transition", "semmoe"}
    for m in obj["methods"].values():
        for key in ("lar", "imbalance", "a2a_bytes_per_layer", "moe_layer_time_s"):
            assert key in m
    p2l = json.loads(loc.read_text())["physical_to_logical_map"]
    assert len(p2l) == 27 and all(sorted(r) == list(range(64)) for r in p2l)
    z = np.load(tables)
    assert z["confidence"].shape[1] == 8 and len(z["token_ids"]) == len(z["device"])
    y = z["expert_device"]  # the exported map puts each expert on the device the tables say
    for i, layer in enumerate(range(1, 27)):
        assert [y[i, e] for e in p2l[layer]] == list(np.repeat(np.arange(8), 8))
    assert "plotly" in html.read_text()[:5000].lower()
