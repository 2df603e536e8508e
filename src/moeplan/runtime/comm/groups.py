"""Process groups built from a :class:`~moeplan.runtime.mesh.Mesh`, in one function.

``torch.distributed.new_group`` is collective over the whole world, so every rank creates every
group of every axis in the same order; each rank keeps the group it belongs to per axis.
Groups are returned in a plain object and passed explicitly, never held in a global.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

from moeplan.runtime.mesh import Mesh


@dataclass(frozen=True, kw_only=True, slots=True)
class RankGroups:
    """This rank's group per axis: ``handles[axis]`` (a ProcessGroup) and ``ranks[axis]``."""

    rank: int
    handles: dict[str, Any]
    ranks: dict[str, tuple[int, ...]]

    def local_rank(self, axis: str) -> int:
        return self.ranks[axis].index(self.rank)

    def size(self, axis: str) -> int:
        return len(self.ranks[axis])


def build_groups(mesh: Mesh, rank: int | None = None) -> RankGroups:
    """Create all groups of ``mesh`` (collective: call on every rank)."""
    rank = dist.get_rank() if rank is None else rank
    whole = dist.get_world_size()  # a plan may use the first ranks of a larger world (tests)
    handles: dict[str, Any] = {}
    ranks: dict[str, tuple[int, ...]] = {}
    for axis, groups in sorted(mesh.group_lists().items()):
        for g in groups:
            handle = dist.group.WORLD if len(g) == whole else dist.new_group(list(g))
            if rank in g:
                handles[axis], ranks[axis] = handle, g
    return RankGroups(rank=rank, handles=handles, ranks=ranks)
