"""``moeplan plan`` computed once (:mod:`.run`): the outcome (:mod:`.outcome`) and its parts,
independent pieces run side by side (:mod:`.fanout`) and the cost model remembered across one
search (:mod:`.memo_cost`).
"""
