"""What one engine iteration costs: the iteration model (:mod:`.model`) with its multi-token
prediction, two-batch overlap and prefetch parts, the instance knobs that change the price, the
batch and context grids the prices are read on, and the steady step of one phase alone
(:mod:`.phase`).
"""
