"""SLO-bound capacity: the steady figure deployments are ranked by (:mod:`.slo`), its upper bound
(:mod:`.bound`), the early stop of a run whose miss is certain (:mod:`.certain_miss`) and one
given layout's capacity (:mod:`.sim`).
"""
