"""FinDEP plan parameters at run time (FinDEP §3: ``ag``, ``eg``, ``r1``, ``r2``, ``ma``, order).

Shared by the DEP engine (:mod:`.dep`) and its simulator prediction (:mod:`.dep_predict`).
"""

from __future__ import annotations

from dataclasses import dataclass

from moeplan.runtime.mesh import Mesh


@dataclass(frozen=True, kw_only=True, slots=True)
class DepParams:
    """``ag``/``eg`` attention/expert ranks, ``r1`` micro-batches of ``ma`` sequences, ``r2``
    chunks per micro-batch, ``order`` ASAS or AASS (validated by the mesh builder)."""

    ag: int
    eg: int
    r1: int
    r2: int
    ma: int
    order: str

    @classmethod
    def from_mesh(cls, mesh: Mesh) -> DepParams:
        d = mesh.details
        return cls(
            ag=mesh.ag, eg=mesh.eg, r1=d["r1"], r2=d["r2"], ma=d["ma"], order=d.get("order", "ASAS")
        )

    def tag(self, t: int, i: int, j: int, kind: int) -> int:
        """Message tag of layer ``t``, micro-batch ``i``, chunk ``j``, ``kind`` 0 counts /
        1 A2E rows / 2 E2A rows (unique per message of a run)."""
        return ((t * self.r1 + i) * self.r2 + j) * 3 + kind


def expert_bounds(num_experts: int, eg: int) -> list[int]:
    """Contiguous expert ranges of the EG ranks: EG rank ``k`` holds experts
    ``bounds[k] .. bounds[k+1]-1``; when ``eg`` does not divide ``num_experts`` the first
    ``num_experts mod eg`` ranks hold one expert more. The planner prices the fullest rank,
    ``ceil(E/eg)`` experts (:mod:`moeplan.planners.dep.problem`), so e.g. FinDEP's AG 3 + EG 5
    plans for 64 experts (13, 13, 13, 13, 12) run as planned."""
    base, extra = divmod(num_experts, eg)
    return [k * base + min(k, extra) for k in range(eg + 1)]


def ag_schedule(order: str, r1: int) -> list[tuple[str, int]]:
    """AG task order within one layer."""
    if order == "ASAS":
        return [(k, i) for i in range(r1) for k in ("A", "S")]
    return [("A", i) for i in range(r1)] + [("S", i) for i in range(r1)]
