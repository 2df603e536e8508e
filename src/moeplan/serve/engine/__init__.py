"""The serving engine: its inputs (:mod:`.config`), the iteration loops that schedule requests as
SGLang and vLLM V1 do (:mod:`.loop`, the general loop; :mod:`.unpreempted` and :mod:`.prefill`,
its reduced forms) and :func:`.run.simulate`, the entry point.
"""
