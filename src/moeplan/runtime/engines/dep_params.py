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


def ag_schedule(order: str, r1: int) -> list[tuple[str, int]]:
    """AG task order within one layer."""
    if order == "ASAS":
        return [(k, i) for i in range(r1) for k in ("A", "S")]
    return [("A", i) for i in range(r1)] + [("S", i) for i in range(r1)]
