"""Process groups and collectives on ``torch.distributed``.

- :mod:`.groups`: every process group of a :class:`~moeplan.runtime.mesh.Mesh`, built in one
  function and passed explicitly (:class:`~.groups.RankGroups`).
- :mod:`.collectives`: EP all-to-all dispatch/combine, unequal all-gathers.
- :mod:`.fused`: MixServe's fused AG-Dispatch / RS-Combine (hybrid TP-EP).
- :mod:`.shuffle`: Sem-MoE's shuffled reduce-scatter / all-gather (attention TP + MoE EP).
"""
