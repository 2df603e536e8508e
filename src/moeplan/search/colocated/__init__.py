"""The colocated deployment space (replicas x instance, :mod:`.space`), its certified search
(:mod:`.search`), its place in the ranking (:mod:`.rank`), and the engine knobs and largest SLO
rate of one layout (:mod:`.evaluate`).
"""
