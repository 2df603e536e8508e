"""Runtime: execute MoE layers on ``torch.distributed`` under EP, hybrid TP-EP, DEP and PP plans.

torch is imported only by the submodules that need it; :mod:`moeplan.runtime.mesh` is pure
Python so planners can share the rank arithmetic. See docs/RUNTIME.md.
"""
