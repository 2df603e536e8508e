"""The launch folder starts the deployment the plan recommends: every replica and pool, on
disjoint GPUs, with the plan's TP/DP/EP/PP per server.

The oracle is the engines' flags themselves, read back from the commands the scripts run
(SGLang: ``--tp-size`` / ``--attn-dp-size`` / ``--ep-size`` / ``--pp-size`` /
``--base-gpu-id``; vLLM: ``--tensor-parallel-size`` / ``--data-parallel-size`` /
``--enable-expert-parallel`` / ``--pipeline-parallel-size`` and ``CUDA_VISIBLE_DEVICES``),
compared with the plan's layout and replica count — not with the exporter's own summary.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from argv_recorder import recorder
from moeplan.export import constraints as cons
from moeplan.export.deployment import Pool
from moeplan.export.launch_facts import needs_remote_code
from moeplan.export.plan_export import (
    PREFILL_UNIT,
    ExportContext,
    Option,
    engine_export,
    serving_options,
)
from moeplan.export.pp_partition import layer_partition
from moeplan.planners.layout import Layout
from moeplan.report.plan_report import launch_exports
from moeplan.search.ranking.entries import Entry
from moeplan.serve.deployment import PDLayout
from moeplan.specs import load_cluster, load_model
from moeplan.specs.presets import model_config
from test_launchable_presets import planned

# records argv and the GPUs the process sees
RECORDER = recorder('"CVD=${CUDA_VISIBLE_DEVICES:-}" "$(basename "$0")" "$@"')


def degrees(engine: str, args) -> tuple[int, int, int, int, int]:
    """(attn_tp, attn_dp, moe_tp, moe_ep, pp) read from an engine command's flags."""
    f = cons.flags(args)
    if engine == "sglang":
        tp, dp = int(f["--tp-size"]), int(f.get("--attn-dp-size", 1))
        ep = int(f.get("--ep-size", 1))
        return tp // dp, dp, tp // ep, ep, int(f.get("--pp-size", 1))
    if engine == "trtllm":  # attention DP and MoE TP are in its YAML (trtllm_degrees)
        raise AssertionError("read TensorRT-LLM's degrees with trtllm_degrees")
    tp, dp = int(f["--tensor-parallel-size"]), int(f.get("--data-parallel-size", 1))
    ep = tp * dp if "--enable-expert-parallel" in f else 1
    return tp, dp, tp * dp // ep, ep, int(f.get("--pipeline-parallel-size", 1))


def trtllm_degrees(args, yaml_text: str) -> tuple[int, int, int, int, int]:
    """(attn_tp, attn_dp, moe_tp, moe_ep, pp) of a ``trtllm-serve`` command and its YAML."""
    f, opts = cons.flags(args), yaml.safe_load(yaml_text)
    tp, ep = int(f["--tp_size"]), int(f.get("--ep_size", 1))
    dp = tp if opts.get("enable_attention_dp") else 1
    return tp // dp, dp, tp // ep, ep, int(f.get("--pp_size", 1))


def key(s: Layout) -> tuple[int, int, int, int, int]:
    return s.attn_tp, s.attn_dp, s.moe_tp, s.moe_ep, s.pp


def run(tmp: Path, text: str, nodes: int) -> list[list[str]]:
    """Every command the script runs on every node rank (recording stand-ins)."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for exe in ("python", "vllm", "ray", "curl"):
        (bin_dir / exe).write_text(RECORDER)
        (bin_dir / exe).chmod(0o755)
    (tmp / "launch.sh").write_text(text)
    cmds: list[list[str]] = []
    for rank in range(nodes):
        log = tmp / f"argv{rank}"
        env = {
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            "ARGV_LOG": str(log),
            "NODE_RANK": str(rank),
            "MOEPLAN_IB_DEVICE": "mlx5_0",
        }
        env |= {f"NODE_{r}_ADDR": f"10.0.0.{r + 1}" for r in range(nodes)}
        p = subprocess.run(["bash", str(tmp / "launch.sh")], env=env, capture_output=True)
        assert p.returncode == 0, p.stderr
        cur: list[str] = []
        for item in log.read_bytes().split(b"\0")[:-1]:
            if item == b"<end>":
                cmds.append([f"node={rank}", *cur])
                cur = []
            else:
                cur.append(item.decode())
    return cmds


def servers_of(cmds: list[list[str]]) -> list[tuple[str, str, list[str]]]:
    """(node, CUDA_VISIBLE_DEVICES, engine args) of each server command."""
    out = []
    for c in cmds:
        node, cvd, rest = c[0], c[1][4:], c[2:]
        if rest[:3] == ["python", "-m", "sglang.launch_server"]:
            out.append((node, cvd, rest[3:]))
        elif rest[:2] == ["vllm", "serve"]:
            out.append((node, cvd, rest[2:]))
    return out


def gpu_set(engine: str, node: str, cvd: str, args, world: int, per_node: int) -> set:
    if engine == "vllm":
        ids = [int(g) for g in cvd.split(",")] if cvd else list(range(per_node))
    else:
        base = int(cons.flags(args).get("--base-gpu-id", 0))
        ids = list(range(base, base + min(world, per_node)))
    return {(node, g) for g in ids}


def check_started(engine, ex, tmp, c, want: Counter, gpus: int) -> None:
    """Run ``ex``'s launch.sh: the servers' layouts are ``want`` (layout -> instances), their
    GPUs disjoint and ``gpus`` in all; a router in front of several servers."""
    cmds = run(tmp, ex.text, c.num_nodes)
    servers = [s for s in servers_of(cmds) if "--node-rank" not in s[2]
               or cons.flags(s[2])["--node-rank"] == "0"]  # fmt: skip
    assert Counter(degrees(engine, a) for _, _, a in servers) == want
    used: set = set()
    for node, cvd, args in servers_of(cmds):
        d = degrees(engine, args)
        world = d[0] * d[1] * d[4]
        mine = gpu_set(engine, node, cvd, args, world, c.gpus_per_node)
        assert not used & mine, (engine, node, args)
        used |= mine
    assert len(used) == gpus
    routers = [x for x in cmds if x[2:5] == ["python", "-m", "sglang_router.launch_router"]]
    assert len(routers) == (1 if sum(want.values()) > 1 else 0)


WHY = {  # the rules of the pinned releases that make an engine launch another deployment
    "sglang": ("has no attention DP", "needs ep_size 1 or tp_size", "has no model class"),
    "vllm": ("cannot express MoE TP",),
    "trtllm": ("cannot express attention TP", "written for whole nodes", "has no attention DP",
               "has no model class", "SM100+", "num_slots"),
}  # fmt: skip


def test_every_preset_pair_launches_its_winner():
    """Analytic grid (every preset pair, colocated family): wherever the engine can run the
    plan's winner, its launch folder starts exactly the winner's layout (plan.json
    ``layout``) on the winner's GPUs; where it cannot, the script says why."""
    n = Counter()
    for mn, cn, result in planned(("strategy",)):
        ex = launch_exports(result, result.winner.plan, model_path=f"org/{mn}",
                            full_layers=load_model(mn).num_layers)  # fmt: skip
        lay = result.winner.plan.layout
        want = (lay["attn"]["tp"], lay["attn"]["dp"], lay["moe"]["tp"], lay["moe"]["ep"],
                lay["pp"])  # fmt: skip
        for engine, e in ex.items():
            if e.label != result.winner.label:  # only for the pinned engines' reasons, said
                assert e.skipped and any(w in e.skipped[0] for w in WHY[engine]), (mn, cn, e)
                n[engine, "other"] += 1
                continue
            assert e.deployment["gpus"] == lay["world_size"] == result.winner.gpus
            args = e.servers[0][0]
            got = (trtllm_degrees(args, e.files["colocated-0.yaml"]) if engine == "trtllm"
                   else degrees(engine, args))  # fmt: skip
            assert len(e.servers) == 1 and got == want
            n[engine, "winner"] += 1
    assert n["sglang", "winner"] + n["sglang", "other"] >= 200, n  # 215 pairs fit today
    assert n["sglang", "winner"] > n["sglang", "other"] and n["vllm", "winner"] > 0, n
    assert n["trtllm", "winner"] > 0 and n["trtllm", "other"] > 0, n


def fake_served(entry: Entry, knobs=None) -> SimpleNamespace:
    metrics = SimpleNamespace(output_tokens_per_s_per_gpu=100.0)
    return SimpleNamespace(
        entry=entry, metrics=metrics, result=SimpleNamespace(knobs=knobs, engine=None)
    )


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_replicas_are_all_started_behind_a_router(tmp_path, engine):
    """'DP4 x attn TP1+DP2 | moe TP2+EP1 (4 replicas)' of a model SGLang runs attention DP
    for: four 2-GPU servers on GPUs 0-7, sglang-router in front."""
    m, c = load_model("qwen3-30b-a3b"), load_cluster("a100-sxm-8")
    lay = Layout(attn_tp=1, attn_dp=2, moe_tp=2, moe_ep=1)
    e = Entry(family="pipeline", label="smidt", layout=lay, plan=None, replicas=4)
    (opt,) = serving_options(SimpleNamespace(ranked=[fake_served(e)]))
    assert opt.replicas == 4
    ctx = ExportContext(model_path="org/q", target=cons.Target.of(m, c), planned_layers=48,
                        full_layers=48)  # fmt: skip
    ex = engine_export(engine, SimpleNamespace(model=m, cluster=c), ctx, [opt])
    check_started(engine, ex, tmp_path, c, Counter({(1, 2, 2, 1, 1): 4}), 8)


def test_mixtral_gets_no_attention_dp_from_sglang():
    """SGLang 0.5.23's MixtralAttention splits heads by the whole tp_size: the attention-DP
    replica layout is skipped for SGLang (said), kept for vLLM."""
    m, c = load_model("mixtral-8x7b"), load_cluster("a100-sxm-8")
    st = Layout(attn_tp=1, attn_dp=2, moe_tp=2, moe_ep=1)
    opt = Option(strategy=st, label="dp", family="pipeline", per_gpu=1.0, unit=PREFILL_UNIT,
                 replicas=4)  # fmt: skip
    ctx = ExportContext(model_path="org/m", target=cons.Target.of(m, c), planned_layers=32,
                        full_layers=32)  # fmt: skip
    res = SimpleNamespace(model=m, cluster=c)
    sg = engine_export("sglang", res, ctx, [opt])
    assert sg.label is None and "MixtralAttention" in sg.text
    assert engine_export("vllm", res, ctx, [opt]).deployment["gpus"] == 8


def test_pd_pools_and_the_decode_placement(tmp_path):
    """P/D 2 x prefill EP4 : 1 x decode EP8 on 2 nodes: all three servers, the router with
    both pools, and the EP8 placement passed to the decode server only."""
    m, c = load_model("deepseek-v2-lite"), load_cluster("h100-sxm-8", 2)
    pd = PDLayout(prefill=Layout(attn_dp=4, moe_ep=4), decode=Layout(attn_dp=8,
                  moe_ep=8), x=2, y=1)  # fmt: skip
    e = Entry(family="pd", label="pd", layout=pd, plan=None)
    (opt,) = serving_options(SimpleNamespace(ranked=[fake_served(e)]))
    ctx = ExportContext(model_path="org/d", target=cons.Target.of(m, c), planned_layers=27,
                        full_layers=27, placement_ep=8, placement_width=64)  # fmt: skip
    ex = engine_export("sglang", SimpleNamespace(model=m, cluster=c), ctx, [opt])
    cmds = run(tmp_path, ex.text, 2)
    servers = servers_of(cmds)
    assert Counter(degrees("sglang", a) for _, _, a in servers) == Counter(
        {(1, 4, 1, 4, 1): 2, (1, 8, 1, 8, 1): 1}
    )
    for _, _, a in servers:
        f = cons.flags(a)
        assert ("--init-expert-location" in f) == (f["--disaggregation-mode"] == "decode")
    (router,) = [x[5:] for x in cmds if x[2:5] == ["python", "-m", "sglang_router.launch_router"]]
    f = cons.flags(router)
    assert router.count("--prefill") == 2 and router.count("--decode") == 1
    assert "--pd-disaggregation" in f


def test_launch_facts():
    """Kimi-K2 ships its own code (auto_map): --trust-remote-code; Mixtral does not."""
    assert needs_remote_code(model_config("kimi-k2"))
    assert not needs_remote_code(model_config("mixtral-8x7b"))
    m, c = load_model("kimi-k2"), load_cluster("h200-sxm-8", 2)
    st = Layout(attn_tp=1, attn_dp=16, moe_tp=1, moe_ep=16)
    opt = Option(strategy=st, label="ep16", family="strategy", per_gpu=1.0, unit=PREFILL_UNIT)
    ctx = ExportContext(model_path="org/k", target=cons.Target.of(m, c), planned_layers=61,
                        full_layers=61, remote_code=True)  # fmt: skip
    for engine in ("sglang", "vllm"):
        ex = engine_export(engine, SimpleNamespace(model=m, cluster=c), ctx, [opt])
        assert all("--trust-remote-code" in a for a in ex.node_args if a[0] != "ray")


def test_module_cut_inside_a_layer_moves_to_the_lighter_stage():
    """Modules [a0 f0 a1 f1 a2 f2]: a cut after module 3 is the layer cut 2; after module 2
    (inside layer 1) the FFN joins the lighter stage and the note says so."""
    st = [{"end_module": 4}, {"end_module": 6}]
    assert layer_partition(st, [1.0, 1.0]) == ((2, 1), [])
    st = [{"end_module": 3}, {"end_module": 6}]
    part, notes = layer_partition(st, [1.0, 2.0])
    assert part == (2, 1) and "inside layer 1" in notes[0]
    assert layer_partition(st, [3.0, 2.0])[0] == (1, 2)


def test_pipeline_entry_exports_its_layer_partition(tmp_path):
    """A 2-stage SMIDT entry cut inside layer 1 of 3: the engine gets SMIDT's priced
    time-balanced layer-level partition (same PP degree), and the script says both."""
    from moeplan.export.plan_export import _partition

    plan = SimpleNamespace(
        family="pipeline",
        layout={"stages": [{"end_module": 3}, {"end_module": 6}]},
        details={"stage_time_s": [1.0, 2.0]},
        predicted={"throughput_tokens_per_s": 1000.0},
        baselines={"time_balanced": {"pp": 2, "stage_modules": [[0, 2], [2, 6]],
                                     "throughput_tokens_per_s": 900.0}},
    )  # fmt: skip
    part, notes = _partition(plan, Layout(attn_tp=4, attn_dp=1, moe_tp=4, moe_ep=1, pp=2))
    assert part == (1, 2) and "inside layer 1" in notes[0] and "900" in notes[1]
    m, c = load_model("qwen3-30b-a3b"), load_cluster("a100-sxm-8")
    st = Layout(attn_tp=4, attn_dp=1, moe_tp=4, moe_ep=1, pp=2)
    opt = Option(strategy=st, label="pp2", family="pipeline", per_gpu=1.0, unit=PREFILL_UNIT,
                 pp_partition=(20, 28), notes=tuple(notes))  # fmt: skip
    ctx = ExportContext(model_path="org/q", target=cons.Target.of(m, c), planned_layers=48,
                        full_layers=48)  # fmt: skip
    for engine, var in (("sglang", "SGLANG"), ("vllm", "VLLM")):
        ex = engine_export(engine, SimpleNamespace(model=m, cluster=c), ctx, [opt])
        assert f"{var}_PP_LAYER_PARTITION=20,28" in ex.text and "inside layer 1" in ex.text


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_pd_pools_carry_their_knobs_and_the_prefill_chunk(tmp_path, engine):
    """Each P/D pool's servers carry the knobs the pool was priced with (DeepEP: vLLM's
    high-throughput kernels on prefill, low-latency on decode; two-batch overlap on prefill
    only; MTP on the decode pool only) and the prefill pool its chunk: SGLang takes the
    instance total (it divides by the DP size itself), vLLM one DP rank's share."""
    from moeplan.serve.iteration.instance_knobs import InstanceKnobs

    m, c = load_model("deepseek-v3"), load_cluster("h200-sxm-8", 3)  # 8 prefill + 16 decode GPUs
    pd = PDLayout(prefill=Layout(attn_dp=8, moe_ep=8), decode=Layout(attn_dp=16,
                  moe_ep=16), x=1, y=1, prefill_knobs=InstanceKnobs(a2a="deepep", tbo=True),
                  decode_knobs=InstanceKnobs(a2a="deepep", mtp=1, mtp_accept=0.8),
                  prefill_chunk=65536)  # fmt: skip
    e = Entry(family="pd", label="pd", layout=pd, plan=None)
    (opt,) = serving_options(SimpleNamespace(ranked=[fake_served(e)]))
    ctx = ExportContext(model_path="org/d", target=cons.Target.of(m, c), planned_layers=61,
                        full_layers=61)  # fmt: skip
    ex = engine_export(engine, SimpleNamespace(model=m, cluster=c), ctx, [opt])
    servers = servers_of(run(tmp_path, ex.text, c.num_nodes))
    role = {8: "prefill", 16: "decode"}
    by_role: dict[str, list[list[str]]] = {"prefill": [], "decode": []}
    for _, _, a in servers:
        by_role[role[degrees(engine, a)[3]]].append(a)
    assert by_role["prefill"] and by_role["decode"]
    for a in by_role["prefill"]:
        f = cons.flags(a)
        if engine == "sglang":
            assert f["--chunked-prefill-size"] == "65536" and f["--moe-a2a-backend"] == "deepep"
            assert "--enable-two-batch-overlap" in f and "--speculative-num-steps" not in f
        else:
            assert f["--max-num-batched-tokens"] == str(65536 // 8)
            assert "--enable-dbo" in f and "--speculative-config" not in f
    for a in by_role["decode"]:
        f = cons.flags(a)
        assert "--enable-two-batch-overlap" not in f and "--enable-dbo" not in f
        if engine == "sglang":
            assert "--chunked-prefill-size" not in f and "--speculative-num-steps" in f
        else:
            assert "--max-num-batched-tokens" not in f and "--speculative-config" in f
    if engine == "vllm":  # vLLM 0.11.0 picks the DeepEP kernels by environment variable
        assert "VLLM_ALL2ALL_BACKEND=deepep_high_throughput" in ex.text
        assert "VLLM_ALL2ALL_BACKEND=deepep_low_latency" in ex.text


def test_every_copy_that_fills_the_cluster_is_started_with_its_pins(tmp_path):
    """A 6-GPU P/D deployment (2 prefill TP2 : 1 decode TP2) on two 8-GPU nodes: the two
    copies that fill the cluster are both started (4 prefill, 2 decode servers, 12 GPUs);
    each server's command carries the running cap and memory fraction its pool was simulated
    with (the decode's CUDA-graph batch too), as deployment.json records them."""
    m, c = load_model("mixtral-8x7b"), load_cluster("h200-sxm-8", 2)
    lay = Layout(attn_tp=2, moe_tp=2)
    pre = Pool(role="prefill", strategy=lay, count=2, chunk=8192, max_running=128,
               mem_fraction=0.8)  # fmt: skip
    dec = Pool(role="decode", strategy=lay, count=1, max_running=616, mem_fraction=0.9)
    opt = Option(strategy=None, label="pd", family="pd", per_gpu=1.0, unit=PREFILL_UNIT,
                 pools=(pre, dec), fill=True)  # fmt: skip
    ctx = ExportContext(model_path="org/m", target=cons.Target.of(m, c), planned_layers=32,
                        full_layers=32, gpu=c.gpu)  # fmt: skip
    ex = engine_export("sglang", SimpleNamespace(model=m, cluster=c), ctx, [opt])
    dep = ex.deployment
    assert dep["copies"] == 2 and dep["gpus"] == 12
    assert [s["name"] for s in dep["servers"]] == [
        "prefill-0", "prefill-1", "decode-0", "prefill-2", "prefill-3", "decode-1"]  # fmt: skip
    assert {s["nodes"][0] for s in dep["servers"]} == {0, 1}
    for s, argv in zip(dep["servers"], ex.servers, strict=True):
        f = cons.flags(list(argv[0]))
        p = s["pinned"]
        assert int(f["--max-running-requests"]) == p["max_running"] == (
            616 if s["role"] == "decode" else 128)  # fmt: skip
        assert float(f["--mem-fraction-static"]) == p["mem_fraction"]
        graph = f.get("--cuda-graph-max-bs-decode")
        assert (graph is None) == (s["role"] == "prefill")  # SGLang disables them on prefill
        assert p["cuda_graph_max_bs"] == (None if graph is None else int(graph))


@pytest.mark.parametrize(("asked", "legacy"), [(None, False), ("0.5.23", False), ("0.5.3", True)])
def test_sglang_flags_are_spelled_for_the_release_asked(asked, legacy):
    """An SGLang release before the pinned flag line gets ``--dp-size N --enable-dp-attention``
    and ``--cuda-graph-max-bs``; the pinned line ``--attn-dp-size`` and the per-phase
    ``--cuda-graph-max-bs-decode``; each passes that release's flag list."""
    m, c = load_model("qwen3-30b-a3b"), load_cluster("h100-sxm-8")
    opt = Option(strategy=Layout(attn_tp=1, attn_dp=4, moe_tp=4), label="dp4", family="strategy",
                 per_gpu=1.0, unit=PREFILL_UNIT, replicas=2)  # fmt: skip
    ctx = ExportContext(model_path="org/q", target=cons.Target.of(m, c), planned_layers=48,
                        full_layers=48, gpu=c.gpu,
                        versions={} if asked is None else {"sglang": asked})  # fmt: skip
    ex = engine_export("sglang", SimpleNamespace(model=m, cluster=c), ctx, [opt])
    assert ex.deployment is not None, ex.text
    argv = list(ex.servers[0][0])
    f = cons.flags(argv)
    if legacy:
        assert f["--dp-size"] == "4" and "--enable-dp-attention" in f and "--attn-dp-size" not in f
        assert "--cuda-graph-max-bs" in f and "--cuda-graph-max-bs-decode" not in f
    else:
        assert f["--attn-dp-size"] == "4" and "--dp-size" not in f
        assert "--cuda-graph-max-bs-decode" in f
    version = cons.sglang_version(asked)
    assert (version is cons.SGLANG_LEGACY) == legacy
    assert not cons.check_sglang(argv, ctx.target, gpus_used=4, version=version)


def test_nvfp4_pd_decode_servers_run_deepep_low_latency(tmp_path):
    """An NVFP4 checkpoint's P/D deployment on a GB200 rack: the decode servers run DeepEP's
    low-latency dispatch with the runner that takes NVFP4 experts there (``--moe-runner-backend
    flashinfer_cutedsl --deepep-mode low_latency``) and the NVFP4 dispatch the price assumes
    (``SGLANG_MOE_NVFP4_DISPATCH=1``); the prefill servers keep the fused MoE and the runner
    ``auto`` resolves to on SM100 (flashinfer_trtllm)."""
    from moeplan.serve.iteration.instance_knobs import InstanceKnobs

    ckpt = Path(__file__).parent / "data" / "configs" / "nvidia--DeepSeek-V3.1-NVFP4"
    m, c = load_model(str(ckpt)), load_cluster("gb200-nvl72", 18)
    pd = PDLayout(prefill=Layout(attn_dp=4, moe_ep=4), decode=Layout(attn_dp=8, moe_ep=8),
                  x=1, y=1, prefill_knobs=InstanceKnobs(a2a="nccl"),
                  decode_knobs=InstanceKnobs(a2a="deepep"), prefill_chunk=16384)  # fmt: skip
    e = Entry(family="pd", label="pd", layout=pd, plan=None)
    (opt,) = serving_options(SimpleNamespace(ranked=[fake_served(e)]))
    ctx = ExportContext(model_path="org/d", target=cons.Target.of(m, c), planned_layers=61,
                        full_layers=61)  # fmt: skip
    ex = engine_export("sglang", SimpleNamespace(model=m, cluster=c), ctx, [opt])
    servers = servers_of(run(tmp_path, ex.text, c.num_nodes))
    by_role: dict[str, list[dict[str, str]]] = {"prefill": [], "decode": []}
    for _, _, a in servers:
        f = cons.flags(a)
        by_role[f["--disaggregation-mode"]].append(f)
    assert by_role["prefill"] and by_role["decode"]
    for f in by_role["decode"]:
        assert f["--moe-a2a-backend"] == "deepep" and f["--deepep-mode"] == "low_latency"
        assert f["--moe-runner-backend"] == "flashinfer_cutedsl"
    for f in by_role["prefill"]:
        assert f.get("--moe-a2a-backend", "none") == "none" and "--deepep-mode" not in f
        assert f["--moe-runner-backend"] == "flashinfer_trtllm"
    assert "SGLANG_MOE_NVFP4_DISPATCH=1" in ex.text
