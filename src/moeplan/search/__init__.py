"""Searches over the serving simulator (:mod:`moeplan.serve`): what ``moeplan plan`` ranks.

- :mod:`.search`: the engine knobs of one layout and the largest rate meeting the SLOs
  (:func:`evaluate_layouts` is the entry point for planners).
- :mod:`.capacity`: SLO-bound capacity, the one steady figure deployments are ranked by, and
  :mod:`.bound`, its upper bound from iteration-time lower bounds.
- :mod:`.space`, :mod:`.space_search`, :mod:`.space_rank`: the colocated deployment space, its
  certified search and its place in the ranking; :mod:`.disagg`, :mod:`.disagg_capacity`,
  :mod:`.disagg_rank`: the P/D and attention-FFN pools.
- :mod:`.rank`, :mod:`.ranking`, :mod:`.rank_views`: every family on one serving footing.
- :mod:`.job`: ``moeplan plan`` computed once, returning :class:`~.outcome.PlanOutcome`.

Layer: above ``serve`` (imports it; ``serve`` never imports this package), below report,
export and cli. Pure Python + numpy: no torch, no I/O.
"""

from moeplan.search.colocated.evaluate import (
    ServeResult,
    evaluate_layout,
    evaluate_layouts,
    max_rate_meeting_slo,
    rank_results,
)

__all__ = [
    "ServeResult",
    "evaluate_layout",
    "evaluate_layouts",
    "max_rate_meeting_slo",
    "rank_results",
]
