"""Launch scripts run by bash with stand-in ``python``/``vllm``/``ray`` executables that record
their argv: what each node rank really executes (after the shell expands ``${HERE}`` and
``${MASTER_ADDR}``) must be the export's argument list and pass the engine's rules."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from argv_recorder import recorder
from moeplan.cost import cost_model_for
from moeplan.errors import MoeplanError
from moeplan.export import constraints as cons
from moeplan.export.plan_export import (
    DEFAULT_MODEL_PATHS,
    PREFILL_UNIT,
    ExportContext,
    Option,
    analytic_options,
    engine_export,
    model_path_for,
)
from moeplan.planners.layout import Layout
from moeplan.planners.rank import plan
from moeplan.specs import Workload, load_cluster, load_model, model_names

RECORDER = recorder(sep="\\n")


@pytest.fixture(scope="module")
def two_nodes():
    """qwen3-235b-a22b on mixserve-h20 (2 x 8 H20, DeepEP-capable): strategy family only."""
    m, c = load_model("qwen3-235b-a22b"), load_cluster("mixserve-h20")
    w = Workload(phase="both", batch=32, isl=2048, osl=256)
    return plan(m, c, w, cost_model_for(c, None), families=("strategy",))


def ctx_for(result, **kw) -> ExportContext:
    base = dict(
        model_path="Qwen/Qwen3-235B-A22B",
        target=cons.Target.of(result.model, result.cluster),
        planned_layers=result.model.num_layers,
        full_layers=result.model.num_layers,
    )
    return ExportContext(**{**base, **kw})


def run_script(tmp_path: Path, text: str, rank: int | None) -> tuple[int, list[list[str]], str]:
    """Run ``text`` from another folder; the recorded commands and stderr."""
    bin_dir, out_dir, cwd = tmp_path / "bin", tmp_path / "out", tmp_path / "elsewhere"
    for d in (bin_dir, out_dir, cwd):
        d.mkdir(exist_ok=True)
    for exe in ("python", "vllm", "ray"):
        (bin_dir / exe).write_text(RECORDER)
        (bin_dir / exe).chmod(0o755)
    script = out_dir / "go.sh"
    script.write_text(text)
    log = tmp_path / f"argv{rank}.log"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "ARGV_LOG": str(log), "MASTER_ADDR": "10.0.0.1"}
    env |= {"NODE_0_ADDR": "10.0.0.1", "NODE_1_ADDR": "10.0.0.2"}  # launch.sh's node addresses
    if rank is not None:
        env["NODE_RANK"] = str(rank)
    p = subprocess.run(["bash", str(script)], cwd=cwd, env=env, capture_output=True, text=True)
    cmds, cur = [], []
    for line in log.read_text().splitlines() if log.exists() else []:
        if line == "<end>":
            cmds.append(cur)
            cur = []
        else:
            cur.append(line)
    return p.returncode, cmds, p.stderr


def expand(args, script_dir: Path) -> list[str]:
    return [
        a.replace("${HERE}", str(script_dir))
        .replace("${MASTER_ADDR}", "10.0.0.1")
        .replace("${NODE_0_ADDR}", "10.0.0.1")
        .replace("${NODE_1_ADDR}", "10.0.0.2")
        for a in args
    ]


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_every_node_rank_runs_its_checked_command(two_nodes, tmp_path, engine):
    ctx = ctx_for(two_nodes)
    ex = engine_export(engine, two_nodes, ctx, analytic_options(two_nodes))
    assert ex.label is not None and len(ex.node_args) == 2
    for rank in range(2):
        rc, cmds, err = run_script(tmp_path, ex.text, rank)
        assert rc == 0, err
        assert cmds[-1][1:] == expand(ex.node_args[rank], tmp_path / "out")[1:]
        args = cmds[-1]
        if engine == "sglang":
            assert cons.flags(args)["--node-rank"] == str(rank)
            assert not cons.check_sglang(args[1:], ctx.target, gpus_used=16)
        elif args[0] == "vllm":
            assert not cons.check_vllm(args, ctx.target, gpus_used=16, node_rank=rank)
        else:  # a Ray worker joins the head node
            assert rank > 0 and args[:2] == ["ray", "start"] and "10.0.0.1:6379" in args


def test_node_rank_is_required_and_bounded(two_nodes, tmp_path):
    ex = engine_export("sglang", two_nodes, ctx_for(two_nodes), analytic_options(two_nodes))
    rc, cmds, err = run_script(tmp_path, ex.text, None)
    assert rc != 0 and "NODE_RANK" in err and not cmds
    rc, cmds, err = run_script(tmp_path, ex.text, 2)
    assert rc == 2 and "0..1" in err and not cmds


def test_expert_location_beside_the_script_and_redundant_experts(two_nodes, tmp_path):
    opts = analytic_options(two_nodes)
    best = next(o for o in opts if o.strategy.moe_ep > 1 and o.strategy.moe_tp == 1)
    ep = best.strategy.moe_ep
    ctx = ctx_for(two_nodes, placement_ep=ep, placement_width=128 + ep)
    ex = engine_export("sglang", two_nodes, ctx, [best])
    rc, cmds, err = run_script(tmp_path, ex.text, 0)
    f = cons.flags(cmds[-1])
    assert rc == 0, err
    assert f["--init-expert-location"] == str(tmp_path / "out" / "expert_location.json")
    assert f["--ep-num-redundant-experts"] == str(ep)
    vl = engine_export("vllm", two_nodes, ctx, [best])  # EPLB asked for the same replicas
    assert cons.flags(vl.node_args[0])["--eplb-config"] == json.dumps({"num_redundant_experts": ep})


def test_placement_for_another_ep_or_a_truncated_model_is_not_passed(two_nodes):
    best = next(o for o in analytic_options(two_nodes) if o.strategy.moe_ep > 1)
    ep = best.strategy.moe_ep
    for kw, why in (
        ({"placement_ep": ep * 2}, f"placed for EP{ep * 2}"),
        ({"planned_layers": 8, "full_layers": 94}, "covers only the planned"),
    ):
        ctx = ctx_for(two_nodes, placement_width=128, **{"placement_ep": ep, **kw})
        ex = engine_export("sglang", two_nodes, ctx, [best])
        assert all("--init-expert-location" not in a for a in ex.node_args)
        assert any(why in w for w in ex.warnings)
    ex = engine_export("sglang", two_nodes, ctx, [best])
    assert ex.text.splitlines()[2].startswith("# WARNING: planned on the first 8 of 94 layers")


def test_vllm_launches_the_best_strategy_it_can_run_with_the_gap(two_nodes, tmp_path):
    hybrid = Option(
        strategy=Layout(attn_tp=8, attn_dp=2, moe_tp=8, moe_ep=2),
        label="hybrid",
        family="strategy",
        per_gpu=300.0,
        unit=PREFILL_UNIT,
    )
    pure = Option(
        strategy=Layout(attn_tp=8, attn_dp=2, moe_tp=1, moe_ep=16),
        label="pure",
        family="strategy",
        per_gpu=200.0,
        unit=PREFILL_UNIT,
    )
    ctx = ctx_for(two_nodes)
    vl = engine_export("vllm", two_nodes, ctx, [hybrid, pure])
    sg = engine_export("sglang", two_nodes, ctx, [hybrid, pure])
    assert (vl.label, sg.label) == ("pure", "hybrid")
    assert vl.gap == pytest.approx(1.5) and sg.gap == pytest.approx(1.0)
    assert "1.50x slower per GPU" in vl.text and "cannot express MoE TP8 x EP2" in vl.text
    refusal = engine_export("vllm", two_nodes, ctx, [hybrid])
    rc, cmds, err = run_script(tmp_path, refusal.text, 0)
    assert rc == 1 and not cmds and "vllm cannot launch this plan" in err


def test_model_path_is_never_a_preset_name(tmp_path):
    for name in model_names():
        path = model_path_for(name, None)
        assert path == DEFAULT_MODEL_PATHS[name] and "/" in path and path not in model_names()
    cfg = tmp_path / "m" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text("{}")
    assert model_path_for(str(cfg), None) == str(cfg.parent.resolve())
    assert model_path_for("deepseek-v3", "org/name") == "org/name"
    with pytest.raises(MoeplanError, match="preset name"):
        model_path_for("deepseek-v3", "deepseek-v3")
    assert os.sep in model_path_for(str(cfg.parent), None)
