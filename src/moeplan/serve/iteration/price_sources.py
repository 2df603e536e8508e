"""``price_sources`` of a priced engine step or a simulated run
(:mod:`moeplan.cost.price_sources`: each source's seconds, share, held-out error and reason).

- :func:`step_price_sources`: one step (a batch), split exactly; :func:`phase_price_sources`
  the step of ``serve-sim --phase``.
- :func:`layout_run_price_sources`: the run of one instance (``serve-sim``);
  :func:`pd_run_price_sources` the runs of a prefill/decode deployment's instances.
- :func:`run_price_sources`: a run's iterations grouped into classes — decode sequences and
  prefill tokens, each by power of two — whose charged seconds (the run's own durations,
  fast-forwarded decode steps each counted) are split as the class's mean iteration is: a
  decode step at the run's mean decode context, prompts of the run's mean length. The seconds
  add up to the run's busy time exactly; the split of a class is its mean iteration's.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from moeplan.cost import CostModel
from moeplan.cost.price_sources import analytic, attribute, summarize
from moeplan.planners.layout import Layout
from moeplan.serve.iteration.instance_knobs import InstanceKnobs
from moeplan.serve.iteration.model import Batch, IterationModel
from moeplan.specs import ClusterSpec, ModelSpec, RoutingProfile

Priced = Callable[[CostModel], Callable[[Batch], float]]


def step_price_sources(
    cost: CostModel, step: Callable[[CostModel], float]
) -> dict[str, dict[str, Any]]:
    """``price_sources`` of the one step ``step(cost)`` prices."""
    return summarize(attribute(cost, lambda c: [step(c)]), **analytic(cost))


def phase_price_sources(
    model: ModelSpec,
    cluster: ClusterSpec,
    cost: CostModel,
    layout: Layout,
    knobs: InstanceKnobs,
    routing: RoutingProfile | None,
    phase: str,
    per_gpu: int,
    context: int,
) -> dict[str, dict[str, Any]]:
    """``price_sources`` of one phase's steady step (:class:`.phase.PhaseModel`)."""
    from moeplan.serve.iteration.phase import PhaseModel

    def step(cm: CostModel) -> float:
        return (
            PhaseModel(model, cluster, cm, layout, knobs, routing)
            .step(phase, per_gpu, context)
            .step_s
        )

    return step_price_sources(cost, step)


def run_classes(*runs: Any) -> tuple[list[Batch], list[float]]:
    """The iteration classes of runs of one deployment (module docstring): a mean batch and
    the seconds the runs charged per class. ``runs``:
    :class:`moeplan.serve.engine.config.SimResult` of its instances."""
    if not runs:
        return [], []
    cat = np.concatenate
    dur = cat([np.asarray(r.iter_end_s) - np.asarray(r.iter_start_s) for r in runs])
    dec = cat([np.asarray(r.iter_decode, dtype=np.int64) for r in runs])
    pre = cat([np.asarray(r.iter_prefill, dtype=np.int64) for r in runs])
    if len(dur) == 0:
        return [], []
    isl_all = cat([np.asarray(r.isl, dtype=float) for r in runs])
    osl_all = cat([np.asarray(r.osl, dtype=float) for r in runs])
    isl = max(1, round(float(np.mean(isl_all))))
    ctx = max(1, round(float(np.mean(isl_all) + np.mean(osl_all) / 2.0)))
    key = _octave(dec) * 64 + _octave(pre)
    batches, seconds = [], []
    for k in np.unique(key):
        sel = key == k
        n, q = round(float(dec[sel].mean())), round(float(pre[sel].mean()))
        chunks = ((isl, isl),) * (q // isl) + (((q % isl), q % isl),) * bool(q % isl)
        batches.append(Batch(n, ctx if n else 0, chunks))
        seconds.append(float(dur[sel].sum()))
    return batches, seconds


def run_price_sources(
    cost: CostModel, priced: Priced, res: Any, *more: Any
) -> dict[str, dict[str, Any]]:
    """``price_sources`` of a simulated run ``res`` (and ``more`` runs of the same deployment,
    taken together); ``priced(cost)`` is the deployment's iteration model on ``cost`` (batch
    -> seconds)."""
    batches, seconds = run_classes(res, *more)
    split = attribute(cost, lambda c: _each(priced(c), batches))
    weights = [s / t if t > 0.0 else 0.0 for s, t in zip(seconds, split[0], strict=True)]
    return summarize(split, weights, **analytic(cost))


def layout_run_price_sources(
    model: ModelSpec,
    cluster: ClusterSpec,
    cost: CostModel,
    layout: Layout,
    knobs: InstanceKnobs,
    routing: RoutingProfile | None,
    res: Any,
    *more: Any,
) -> dict[str, dict[str, Any]]:
    """``price_sources`` of the run ``res`` of one instance of ``layout`` (and ``more`` runs of
    its copies, taken together: ``moeplan bench``'s replicas)."""

    def priced(cm: CostModel) -> IterationModel:
        return IterationModel(model, cluster, cm, layout, routing, knobs=knobs)

    return run_price_sources(cost, priced, res, *more)


def pd_run_price_sources(
    setup: Any, workload: Any, model: ModelSpec, cluster: ClusterSpec, cost: CostModel
) -> dict[str, dict[str, Any]]:
    """``price_sources`` of a prefill/decode deployment (``setup``: its
    :class:`moeplan.serve.pools.pd.PoolSetup`) simulated on ``workload``: every instance's
    run of both pools together (the KV transfers between them are not engine iterations);
    ``{}`` when a pool is not an engine instance (an attention-FFN decode pool)."""
    from moeplan.serve.pools.pd import simulate_pd
    from moeplan.serve.workload.arrivals import generate

    if setup.layout.decode_instance.colocated_layout is None:  # an attention-FFN decode pool
        return {}
    return pd_runs_price_sources(
        setup, simulate_pd(generate(workload), setup), model, cluster, cost
    )


def pd_runs_price_sources(
    setup: Any, run: Any, model: ModelSpec, cluster: ClusterSpec, cost: CostModel
) -> dict[str, dict[str, Any]]:
    """``price_sources`` of one simulated run of a prefill/decode deployment (``run``: what
    :func:`moeplan.serve.pools.pd.simulate_pd` returned on ``setup``): every instance's run of
    both pools together; ``{}`` when the decode pool is not an engine instance."""
    pd = setup.layout
    if pd.decode_instance.colocated_layout is None:  # an attention-FFN decode pool
        return {}
    splits, weights = [], []
    for lay, knobs, runs in ((pd.prefill, pd.prefill_knobs, run.prefill_runs),
                             (pd.decode, pd.decode_knobs, run.decode_runs)):  # fmt: skip
        batches, seconds = run_classes(*runs)
        split = attribute(
            cost,
            lambda cm, lay=lay, knobs=knobs, batches=batches: _each(
                IterationModel(model, cluster, cm, lay, knobs=knobs), batches
            ),
        )
        splits.append(split)
        weights += [s / t if t > 0.0 else 0.0 for s, t in zip(seconds, split[0], strict=True)]
    merged = (
        [t for sp in splits for t in sp[0]],
        [p for sp in splits for p in sp[1]],
        {k: v for sp in splits for k, v in sp[2].items()},
    )
    return summarize(merged, weights, **analytic(cost))


def _each(it: Callable[[Batch], float], batches: list[Batch]) -> list[float]:
    """Each batch's seconds on one iteration model (its memos shared by the batches)."""
    return [it(b) for b in batches]


def _octave(x: np.ndarray) -> np.ndarray:
    """0 for 0, else the bit length (1, 2-3, 4-7, ...)."""
    return np.where(x > 0, np.floor(np.log2(np.maximum(x, 1))).astype(np.int64) + 1, 0)
