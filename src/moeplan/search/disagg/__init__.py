"""The disaggregated deployments (P/D pools, attention-FFN decode): their pools and rate matching
(:mod:`.pools`), space, bound, certified search, capacity, ranking and a given P/D deployment
under load (:mod:`.given`).
"""
