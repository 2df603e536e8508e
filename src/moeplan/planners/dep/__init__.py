"""FinDEP — fine-grained scheduling of disaggregated attention/expert GPUs (paper 000, §3–§4).

Sections implemented: §3 the task graph per layer and micro-batch (``A``, ``S`` on the AG; per
chunk ``A2E`` → ``E`` → ``E2A``; orders ASAS / AASS; :mod:`.schedule`), the α-β durations of
Eqs. 1–4 and 7–11 and the memory caps (:mod:`.problem`), the closed form of Eqs. 12–13
(:mod:`.schedule`), §4 Algorithm 1 and the offline ``(ag, eg)`` search and online
``solve(seq_len)`` (:mod:`.solver`), baselines naive DEP and PPPipe (MegaScale-Infer), and the
checks: brute force over the (ma, r1, r2, order) grid and an exact job-shop optimum with
CP-SAT (:mod:`.verify`). :mod:`.planner` is the end-to-end entry point used by the CLI and by
``moeplan plan``.

Paper errata handled here: rule 7 of Eq. 5 uses ``t_a2e(me)``; Eq. 12's second ``t_a2e`` is
``t_e2a``; "E(ma, me)" in the text is ``G(ma, me)``; Eq. 13 as printed double-counts
``(r2-1)·Y`` (off by up to 69 %) — the corrected closed form equals the simulator for ASAS.
Theorem 1 (monotone in ``ma``) fails once GEMMs are padded to tiles; Algorithm 1 is then a
heuristic, checked against brute force.
"""

from moeplan.planners.dep.planner import (
    DepReport,
    chrome_traces,
    plan_dep,
    report_dict,
    schedules,
    to_plan,
    utilization,
)
from moeplan.planners.dep.problem import DepProblem, alpha_beta_problem, dep_problem
from moeplan.planners.dep.schedule import ORDERS, DepConfig, DepTimes, build_graph
from moeplan.planners.dep.solver import (
    DepResult,
    OnlineSolver,
    brute_force,
    evaluate,
    naive,
    pppipe,
    schedule,
    search_groups,
    solve,
)

__all__ = [
    "ORDERS",
    "DepConfig",
    "DepProblem",
    "DepReport",
    "DepResult",
    "DepTimes",
    "OnlineSolver",
    "alpha_beta_problem",
    "brute_force",
    "build_graph",
    "chrome_traces",
    "dep_problem",
    "evaluate",
    "naive",
    "plan_dep",
    "pppipe",
    "report_dict",
    "schedule",
    "schedules",
    "search_groups",
    "solve",
    "to_plan",
    "utilization",
]
