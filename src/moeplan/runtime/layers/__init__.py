"""The model the runtime executes, single-device pieces only (no ``torch.distributed``).

- :mod:`.routing`: routers (softmax top-k, DeepSeek grouped top-k, Top-P dynamic k).
- :mod:`.permute`: rows sorted by expert for any k per token, gather and weighted combine.
- :mod:`.moe`: MoE weights, router dispatch, grouped SwiGLU experts, TP/EP weight shards.
- :mod:`.placement`: expert placement (Sem-MoE / EPLB physical-to-logical maps).
- :mod:`.model`: attention and layer weights; :mod:`.weights`: safetensors I/O.
- :mod:`.decoder`: the one layer loop (:func:`~.decoder.forward`) and the single-process
  layout and reference; the engines apply their parallel layouts to that loop.
"""
