"""Disaggregated instances: prefill/decode pools (:mod:`.pd`, the ``--pd`` text form in
:mod:`.pd_spec`) and attention-FFN decode instances (:mod:`.afd`).
"""
