"""Routing traces: the columnar format, readers for real dumps, a recorder, a generator.

- :mod:`moeplan.traces.format` — :class:`RoutingTrace`, Parquet/npz files, streaming, split
  (code in :mod:`~moeplan.traces.routing_trace`, :mod:`~moeplan.traces.trace_reader` and
  :mod:`~moeplan.traces.trace_writer`, re-exported by ``format``).
- :mod:`moeplan.traces.synthetic` — seeded generator with Sem-MoE's observed structure.
- :mod:`moeplan.traces.stats` — the statistics Sem-MoE reports (kurtosis, static predictor).
- :mod:`moeplan.traces.sglang` — SGLang expert-distribution dumps (``stat`` / ``per_token``).
- :mod:`moeplan.traces.hf_recorder` — router hooks on a Hugging Face MoE model (needs torch).
"""
