"""Algorithm 1 against brute force, the baselines, the (ag, eg) search and the online path."""

from __future__ import annotations

import pytest

from moeplan.cost import cost_model_for
from moeplan.errors import MoeplanError
from moeplan.planners import dep
from moeplan.planners.dep.solver import DepConfig, DepProblem, DepTimes
from moeplan.sim import simulate
from moeplan.specs import load_cluster, load_model

MODELS = {"deepseek-v2": (3, 5), "qwen3-235b-a22b": (4, 4)}  # the paper's §5.5 splits
CLUSTERS = ("findep-a", "findep-b", "findep-c", "findep-d")
SEQS = (1024, 2048, 4096, 8192)


def _problem(model: str, cluster: str, seq: int, layers: int = 4, batch: int = 16) -> DepProblem:
    cl = load_cluster(cluster)
    ag, eg = MODELS[model] if cl.num_gpus == 8 else (8, 24)
    return dep.dep_problem(
        load_model(model),
        cl,
        cost_model_for(cl),
        ag=ag,
        eg=eg,
        seq_len=seq,
        layers=layers,
        batch=batch,
        r2_max=16,
    )


@pytest.fixture(scope="module")
def grid():
    out = {}
    for model in MODELS:
        for cluster in CLUSTERS:
            for seq in SEQS:
                p = _problem(model, cluster, seq)
                out[model, cluster, seq] = (p, dep.solve(p), dep.brute_force(p), dep.pppipe(p))
    return out


def test_algorithm_1_within_one_percent_of_brute_force_on_every_instance(grid):
    """Algorithm 1's pick vs the best of the whole (ma, r1, r2, order) grid, simulated."""
    gaps = {
        k: (bf.throughput - alg.throughput) / bf.throughput for k, (_, alg, bf, _) in grid.items()
    }
    assert len(gaps) == 32
    assert max(gaps.values()) <= 0.01, max(gaps.items(), key=lambda kv: kv[1])
    assert min(gaps.values()) >= -1e-12  # brute force is never beaten


def test_findep_at_least_best_pppipe_on_every_instance(grid):
    for key, (_, alg, _, pp) in grid.items():
        assert alg.throughput >= pp.throughput * (1 - 1e-12), key


def test_brute_force_with_the_graph_simulator_matches_the_fast_evaluator():
    """The grid search gives the same answer when each point is a full TaskGraph simulation."""
    p = _problem("deepseek-v2", "findep-d", 2048, layers=2, batch=4)
    p = DepProblem(**{**{f: getattr(p, f) for f in p.__dataclass_fields__}, "r2_max": 4})

    def by_graph(prob: DepProblem, cfg: DepConfig, variant: str) -> float:
        g = dep.build_graph(
            prob.times(cfg.ma, cfg.r2), cfg, prob.layers, prob.dense_layers, variant
        )
        return simulate(g).check().makespan

    fast, slow = dep.brute_force(p), dep.brute_force(p, evaluate=by_graph)
    assert slow.config == fast.config
    assert slow.makespan == pytest.approx(fast.makespan, rel=1e-9)


def test_solve_uses_the_evaluator_it_is_given():
    """Searches take an evaluator: a fake one that only likes r2 = 3 and AASS is obeyed."""
    p = dep.alpha_beta_problem(
        ag=1,
        eg=1,
        seq_len=1,
        layers=1,
        tokens_per_expert=1.0,
        coeffs={"attn": (1, 1), "expert": (1, 1), "comm": (1, 1)},
        mem_limit=4,
        batch=4,
        r2_max=6,
    )

    def fake(prob, cfg, variant):
        return abs(cfg.r2 - 3) + (0.0 if cfg.order == "AASS" else 0.5) + 1.0

    res = dep.solve(p, evaluate=fake)
    assert (res.config.r2, res.config.order) == (3, "AASS")


def test_algorithm_1_visits_only_the_pareto_front():
    """ma from the cap down; an r1 already seen is skipped (memory: r1 * ma <= 12)."""
    p = dep.alpha_beta_problem(
        ag=1,
        eg=1,
        seq_len=1,
        layers=2,
        tokens_per_expert=1.0,
        coeffs={"attn": (1, 1), "expert": (1, 1), "comm": (1, 1)},
        mem_limit=12,
        batch=12,
        r2_max=2,
    )
    seen = []

    def spy(prob, cfg, variant):
        seen.append((cfg.ma, cfg.r1))
        return dep.evaluate(prob, cfg, variant)

    dep.solve(p, evaluate=spy)
    assert sorted(set(seen), reverse=True) == [(12, 1), (6, 2), (4, 3), (3, 4), (2, 6), (1, 12)]


def test_naive_is_never_better_than_pppipe():
    p = _problem("deepseek-v2", "findep-a", 2048)
    assert dep.naive(p).throughput <= dep.pppipe(p).throughput
    assert dep.naive(p).config.r1 == 1


def test_group_search_returns_the_best_split():
    cl = load_cluster("findep-c")
    model, cm = load_model("deepseek-v2").with_layers(2), cost_model_for(cl)

    def make(ag, eg):
        return dep.dep_problem(model, cl, cm, ag=ag, eg=eg, seq_len=1024, batch=8, r2_max=8)

    problem, best = dep.search_groups(make, 8)
    for ag in range(1, 8):
        assert dep.solve(make(ag, 8 - ag)).throughput <= best.throughput * (1 + 1e-12)
    assert problem.ag + problem.eg == 8


def test_online_solver_replans_per_prompt_length_and_caches():
    cl = load_cluster("findep-a")
    model, cm = load_model("qwen3-235b-a22b").with_layers(2), cost_model_for(cl)
    calls = []

    def make(seq):
        calls.append(seq)
        return dep.dep_problem(model, cl, cm, ag=4, eg=4, seq_len=seq, batch=8)

    online = dep.OnlineSolver(make)
    a, b = online.solve(1024), online.solve(8192)
    assert online.solve(1024) is a and calls == [1024, 8192]
    assert a.config == dep.solve(make(1024)).config
    assert b.tokens == b.config.r1 * b.config.ma * 4 * 8192


def test_times_follow_the_cost_model():
    """t_a2e = t_e2a, me = ma*ag*top_k*S/(r2*E), expert time grows with me."""
    p = _problem("deepseek-v2", "findep-c", 2048)
    t1, t2 = p.times(2, 1), p.times(2, 2)
    assert isinstance(t1, DepTimes) and t1.a2e == t1.e2a
    assert t1.attn == t2.attn and t1.expert > t2.expert
    assert p.me_per_ma == pytest.approx(3 * 6 * 2048 / 160)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"ag": 4, "eg": 5}, r"ag \+ eg"),
        ({"ag": 3, "eg": 5, "seq_len": 0}, r"seq \(0\)"),
        ({"ag": 0, "eg": 5}, r"ag \(0\)"),
    ],
)
def test_bad_inputs_raise_one_line_errors(kwargs, match):
    cl = load_cluster("findep-a")
    kw = {"seq_len": 1024, **kwargs}
    with pytest.raises(MoeplanError, match=match):
        dep.dep_problem(load_model("deepseek-v2"), cl, cost_model_for(cl), **kw)


def test_model_that_does_not_fit_the_eg_says_how_much_it_needs():
    cl = load_cluster("findep-b")
    with pytest.raises(MoeplanError, match=r"does not fit the EG: .* GiB per EG GPU"):
        dep.dep_problem(load_model("deepseek-v3"), cl, cost_model_for(cl), ag=3, eg=5, seq_len=1024)


def test_online_solver_for_a_deployment_matches_algorithm_1():
    cl = load_cluster("findep-c")
    model, cm = load_model("deepseek-v2").with_layers(3), cost_model_for(cl)
    online = dep.OnlineSolver.for_deployment(model, cl, cm, ag=3, eg=5, batch=8)
    direct = dep.solve(dep.dep_problem(model, cl, cm, ag=3, eg=5, seq_len=4096, batch=8))
    assert online.solve(4096).config == direct.config
