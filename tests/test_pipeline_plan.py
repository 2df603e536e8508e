"""SMIDT planner on real cost tables: validity on every preset, exact checks, baselines."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
import pytest

from doc_figures import pinned
from moeplan.cost import cost_model_for
from moeplan.errors import MoeplanError
from moeplan.planners.pipeline import (
    degree_tables,
    pipeline_throughput,
    plan_pipeline,
    pp_degrees,
)
from moeplan.planners.pipeline.baselines import baselines_for_degree
from moeplan.planners.pipeline.cost import (
    StageContext,
    cost_model_evaluator,
    memory_reserve,
    module_memory,
    modules_of,
)
from moeplan.planners.pipeline.search import exhaustive_partition, search_partition
from moeplan.runtime.mesh import mesh_from_plan
from moeplan.specs import (
    RoutingProfile,
    Workload,
    cluster_names,
    load_cluster,
    load_model,
    model_names,
)

WORKLOAD = Workload(phase="prefill", batch=16, isl=512, osl=16)


def _check_plan(res, model, cluster, workload):
    """Every module once, in order; t*e*d = r; memory recomputed per GPU within the limit."""
    plan = res.plan
    r = cluster.num_gpus // plan.pp
    mods = modules_of(model, workload.routing_for(model.top_k))
    ctx = StageContext(
        model=model,
        workload=workload,
        routing=workload.routing_for(model.top_k),
        pp=plan.pp,
        r=r,
        nvlink_domain=cluster.nvlink_domain,
    )
    seen = []
    assert plan.stages[0].start_module == 0
    for a, b in itertools.pairwise(plan.stages):
        assert a.end_module == b.start_module
    mem_limit = cluster.gpu.mem_bytes
    for st in plan.stages:
        mem = memory_reserve(ctx)
        for m, c in st.modules:
            assert c.tp * c.ep * c.dpmoe == r
            assert m.kind == "moe" or c.ep == 1
            mem += module_memory(m, c, ctx, last_index=len(mods) - 1)
            seen.append(m.index)
        assert mem <= mem_limit
        assert mem == pytest.approx(st.mem_bytes_per_gpu)
    assert seen == list(range(2 * model.num_layers))
    assert [(m.kind, m.layer) for st in plan.stages for m, _ in st.modules] == [
        (m.kind, m.layer) for m in mods
    ]
    mesh = mesh_from_plan(res.to_plan().to_dict())  # the runtime's parser accepts the layout
    assert mesh.pp == plan.pp


def _plan_or_refusal(pairs) -> tuple[int, int]:
    """(planned, refused) over (model, cluster) names: each a valid plan, or a 'no plan fits'
    error naming a need above the GPU's memory."""
    planned = refused = 0
    for mname, cname in pairs:
        model, cluster = load_model(mname), load_cluster(cname)
        try:
            res = plan_pipeline(model, cluster, WORKLOAD, cost_model_for(cluster), baselines=False)
        except MoeplanError as err:
            text = str(err)
            assert text.startswith("no plan fits") and "GiB per GPU" in text, text
            need = float(text.split("needs at least ")[1].split(" GiB")[0])
            assert need * 2**30 > cluster.gpu.mem_bytes * 0.99
            refused += 1
            continue
        _check_plan(res, model, cluster, WORKLOAD)
        planned += 1
    return planned, refused


def test_plans_on_every_preset_model_are_valid():
    """Every preset model (every layer and mixer kind) on one cluster: a valid plan, or a 'no
    plan fits' error naming the need; both happen. The full model x cluster grid is
    :func:`test_plans_on_every_preset_pair_are_valid` (slow)."""
    planned, refused = _plan_or_refusal((m, "h100-sxm-8") for m in model_names())
    assert planned >= 5 and refused >= 1


@pytest.mark.slow
def test_plans_on_every_preset_pair_are_valid():
    """All preset models x clusters: a valid plan, or a 'no plan fits' error naming the need."""
    planned, _ = _plan_or_refusal(itertools.product(model_names(), cluster_names()))
    assert planned >= 30


def _small_cases():
    for mname, layers in (
        ("qwen3-30b-a3b", 4),
        ("deepseek-v2-lite", 3),
        ("mixtral-8x7b", 4),
        ("qwen2-57b-a14b", 6),
    ):
        for frac in (0.0, 0.3, 0.7):
            yield mname, layers, frac


@pytest.mark.parametrize(("mname", "layers", "frac"), list(_small_cases()))
def test_search_equals_exhaustive_on_real_tables(mname, layers, frac):
    """N <= 6 layers on 8 GPUs: search = exact optimum within eps, memory binding or not.

    The unit capacity is set between the least that admits any partition (frac 0) and what
    the fastest choice of every module needs in one stage, so the knapsack has to trade."""
    model = load_model(mname).with_layers(layers)
    cluster = load_cluster("a100-sxm-8")
    wl = Workload(
        phase="prefill",
        batch=8,
        isl=256,
        osl=8,
        routing=RoutingProfile(
            top_k=model.top_k, mean_k=tuple(np.linspace(1, model.top_k, model.num_moe_layers))
        ),
    )
    cm = cost_model_for(cluster)
    ev = cost_model_evaluator(cm)
    compared = 0
    for pp in pp_degrees(model, cluster, None):
        dt = degree_tables(model, cluster, wl, cm, pp, ev, resolution=256)
        times = dt.times()
        fastest = [
            int(u[np.argmin(t)]) + b for t, u, b in zip(times, dt.units, dt.base, strict=True)
        ]
        least = math.ceil(_least_capacity(list(dt.base), pp))
        cap = int(least + frac * max(0, sum(fastest) - least))
        got = search_partition(times, dt.units, cap, pp, eps=1e-7, base=dt.base)
        exact = exhaustive_partition(times, dt.units, cap, pp, base=dt.base)
        assert (got is None) == (exact is None)
        assert exact is not None  # cap >= least: some partition fits
        assert exact.bottleneck <= got.bottleneck + 1e-12
        assert got.bottleneck <= exact.bottleneck + 1e-7
        compared += 1
    assert compared >= 3


def _least_capacity(units: list[float], parts: int) -> float:
    """Smallest capacity at which ``units`` cut into ``parts`` contiguous runs fit (brute)."""
    n = len(units)
    return min(
        max(sum(units[a:b]) for a, b in itertools.pairwise((0, *cuts, n)))
        for cuts in itertools.combinations(range(1, n), parts - 1)
    )


def test_smidt_is_never_slower_than_layer_baselines_at_the_same_degree():
    """Layer-level homogeneous plans lie in SMIDT's search space: bottleneck <= theirs."""
    model = load_model("qwen2-57b-a14b")
    cluster = load_cluster("a100-sxm-8")
    wl = Workload(
        phase="prefill",
        batch=16,
        isl=1000,
        osl=20,
        routing=RoutingProfile(
            top_k=8, mean_k=tuple(4 + 3 * np.sin(np.linspace(0, 3, model.num_moe_layers)))
        ),
    )
    cm = cost_model_for(cluster)
    ev = cost_model_evaluator(cm)
    checked = 0
    for pp in (2, 4, 8):
        dt = degree_tables(model, cluster, wl, cm, pp, ev, resolution=512)
        part = search_partition(dt.times(), dt.units, dt.cap_units, pp, eps=1e-6, base=dt.base)
        for name, base in baselines_for_degree(dt, rounds=4, async_pp=True).items():
            if base is None:
                continue
            assert part.bottleneck <= base.bottleneck_s + 1e-6, (pp, name)
            checked += 1
    assert checked >= 4


def _simulate(stage, p2p, m, sync):
    """Event loop: micro-batches through stages; async sends use a separate link."""
    busy = [0.0] * len(stage)
    link = [0.0] * len(stage)
    done = 0.0
    for _ in range(m):
        arrive = 0.0
        for j, (c, p) in enumerate(zip(stage, p2p, strict=True)):
            start = max(busy[j], arrive)
            end = start + c
            send_start = max(end, link[j])
            arrive = send_start + p
            link[j] = arrive
            busy[j] = arrive if sync else end
        done = max(done, arrive)
    return done


def test_throughput_formula_matches_event_simulation():
    """fill + (m-1) x period equals a micro-batch event simulation, sync and async."""
    rng = np.random.default_rng(5)
    for _ in range(50):
        s = int(rng.integers(1, 7))
        c = list(rng.uniform(0.1, 1.0, s))
        p = [*rng.uniform(0.0, 0.8, s - 1), 0.0]
        m = int(rng.integers(1, 12))
        _, thr_async, thr_sync = pipeline_throughput(c, p, 1.0, m)
        assert m / thr_async == pytest.approx(_simulate(c, p, m, sync=False))
        assert m / thr_sync == pytest.approx(_simulate(c, p, m, sync=True))


def test_plan_dict_and_speedups_for_qwen3_on_smidt_a40():
    """The acceptance configuration plans, reports baselines and exports plan.json."""
    model = load_model("qwen3-235b-a22b")
    cluster = load_cluster("smidt-a40")
    wl = Workload(
        phase="prefill",
        batch=64,
        isl=1000,
        osl=1,
        routing=RoutingProfile(
            top_k=8, mean_k=tuple(2 + 6 * np.abs(np.sin(np.linspace(0, 4, 94))))
        ),
    )
    res = plan_pipeline(model, cluster, wl, cost_model_for(cluster))
    _check_plan(res, model, cluster, wl)
    d = res.to_plan().to_dict()
    assert d["family"] == "pipeline" and d["layout"]["world_size"] == 32
    assert set(res.baselines) == {"uniform", "time_balanced", "no_pp"}
    for name in res.baselines:
        assert res.speedup(name) is not None and math.isfinite(res.speedup(name))


#: the memory above what a "no plan fits" error names that must admit a plan
MARGIN = 0.02


def test_memory_named_by_no_plan_error_is_enough():
    """With 2 % more than the memory the error names, a plan exists."""
    model, cluster = load_model("deepseek-v3"), load_cluster("a100-sxm-8")
    with pytest.raises(MoeplanError, match="no plan fits") as err:
        plan_pipeline(model, cluster, WORKLOAD, cost_model_for(cluster), baselines=False)
    need = float(str(err.value).split("needs at least ")[1].split(" GiB")[0]) * 2**30
    bigger = replace(cluster, gpu=replace(cluster.gpu, mem_bytes=need * (1 + MARGIN)))
    res = plan_pipeline(model, bigger, WORKLOAD, cost_model_for(bigger), baselines=False)
    _check_plan(res, model, bigger, WORKLOAD)


def test_the_docs_figures_are_these_cases():
    """pipeline.md's figures (docs/benchmarks/data/pipeline-tests.json): the real-table
    cases' layers and GPUs and the memory margin."""
    figures = pinned("pipeline-tests")
    assert figures["real_table_layers_max"] == max(layers for _, layers, _ in _small_cases())
    assert figures["real_table_gpus"] == load_cluster("a100-sxm-8").num_gpus
    assert figures["memory_margin"] == MARGIN
