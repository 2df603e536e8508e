"""Every family on one serving footing: the layouts each family serves (:mod:`.family_layouts`),
what is ranked (:mod:`.entries`), the ranking (:mod:`.rank`), its result (:mod:`.result`) and
what ``plan`` and the report show of it (:mod:`.views`).
"""
