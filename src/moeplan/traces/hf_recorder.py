"""Record routing traces from a Hugging Face transformers MoE model (needs torch).

:class:`RouterRecorder` registers a forward hook on every router of the model and, while the
model runs on prompts, collects each token's top-k expert ids (and gate weights) per MoE
layer; :func:`record_trace` runs a list of prompts (token-id lists) one request per forward
and returns a :class:`RoutingTrace` (write it with :func:`moeplan.traces.format.save_trace`).

Routers found (transformers >= 4.45 and 5.x): modules whose class name ends in ``TopKRouter``
/ ``TopkRouter`` (5.x: Qwen2-MoE, Qwen3-MoE, Mixtral, DeepSeek-V3, ... return
``(router_logits, weights, indices)``) or a ``gate`` child of a sparse-MoE block (4.x:
``nn.Linear`` returning logits; the hook then takes softmax top-k of the logits, which is
those models' routing). Indices returned by the router are used as they are, so grouped
top-k (DeepSeek) is recorded exactly.

Pointing it at a real checkpoint (weights cannot be downloaded in this sandbox, so tests use
tiny random models built from configs)::

    from transformers import AutoModelForCausalLM, AutoTokenizer
    model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen3-30B-A3B", torch_dtype="auto",
                                                 device_map="auto")
    tok = AutoTokenizer.from_pretrained("Qwen/Qwen3-30B-A3B")
    prompts = [tok(p)["input_ids"] for p in my_prompts]
    save_trace(record_trace(model, prompts, top_k=model.config.num_experts_per_tok,
                            num_experts=model.config.num_experts), "trace.parquet")
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from moeplan.errors import require
from moeplan.traces.format import RoutingTrace


def find_routers(model: Any) -> list[tuple[str, Any]]:
    """(name, module) of every router, in forward (layer) order."""
    out = []
    for name, mod in model.named_modules():
        cls = type(mod).__name__
        router = cls.endswith(("TopKRouter", "TopkRouter", "Router")) and "Sparse" not in cls
        linear_gate = name.endswith(".gate") and cls == "Linear"
        if router or linear_gate:
            out.append((name, mod))
    return out


class RouterRecorder:
    """Context manager: hooks on the routers, ``records[layer]`` = list of [T, k] arrays."""

    def __init__(self, model: Any, top_k: int) -> None:
        self.model = model
        self.top_k = top_k
        self.routers = find_routers(model)
        require(bool(self.routers), f"model ({type(model).__name__}) has no MoE router to hook")
        self.ids: list[list[np.ndarray]] = [[] for _ in self.routers]
        self.weights: list[list[np.ndarray]] = [[] for _ in self.routers]
        self._handles: list[Any] = []

    def _hook(self, layer: int):  # type: ignore[no-untyped-def]
        import torch

        def hook(_mod: Any, _inp: Any, out: Any) -> None:
            if isinstance(out, tuple):
                ints = [o for o in out if torch.is_tensor(o) and not o.is_floating_point()]
                floats = [o for o in out if torch.is_tensor(o) and o.is_floating_point()]
                idx = ints[0].reshape(-1, ints[0].shape[-1])
                w = (
                    floats[-1].reshape(idx.shape)
                    if floats and floats[-1].numel() == idx.numel()
                    else torch.ones_like(idx, dtype=torch.float32)
                )
            else:
                logits = out.reshape(-1, out.shape[-1]).float()
                w, idx = torch.topk(torch.softmax(logits, dim=-1), self.top_k, dim=-1)
            order = torch.argsort(w.float(), dim=-1, descending=True)
            self.ids[layer].append(torch.gather(idx, 1, order).cpu().numpy().astype(np.int16))
            self.weights[layer].append(torch.gather(w.float(), 1, order).cpu().numpy())

        return hook

    def __enter__(self) -> RouterRecorder:
        for i, (_, mod) in enumerate(self.routers):
            self._handles.append(mod.register_forward_hook(self._hook(i)))
        return self

    def __exit__(self, *exc: object) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def take(self) -> tuple[np.ndarray, np.ndarray]:
        """Pop what was recorded since the last take: ids, weights [T, L, k]."""
        require(all(len(x) for x in self.ids), "recorder saw no forward pass on every router")
        ids = np.stack([np.concatenate(x) for x in self.ids], axis=1)
        w = np.stack([np.concatenate(x) for x in self.weights], axis=1)
        for lst in (*self.ids, *self.weights):
            lst.clear()
        return ids, w


def record_trace(
    model: Any, prompts: Sequence[Sequence[int]], *, top_k: int, num_experts: int
) -> RoutingTrace:
    """Run each prompt (token ids) as one request; record its routing at every MoE layer."""
    import torch

    require(len(prompts) > 0, "prompts (0) must not be empty")
    rids, pos, toks, exps, ws = [], [], [], [], []
    model.eval()
    with RouterRecorder(model, top_k) as rec, torch.no_grad():
        for r, prompt in enumerate(prompts):
            ids = torch.tensor([list(prompt)], dtype=torch.long)
            model(input_ids=ids, use_cache=False)
            e, w = rec.take()
            require(
                e.shape[0] == len(prompt),
                f"recorded tokens ({e.shape[0]}) must equal prompt length ({len(prompt)})",
            )
            rids.append(np.full(len(prompt), r, dtype=np.int64))
            pos.append(np.arange(len(prompt), dtype=np.int32))
            toks.append(np.asarray(prompt, dtype=np.int64))
            exps.append(e)
            ws.append(w)
    return RoutingTrace(
        request_id=np.concatenate(rids),
        position=np.concatenate(pos),
        token_id=np.concatenate(toks),
        experts=np.concatenate(exps),
        num_experts=num_experts,
        weights=np.concatenate(ws).astype(np.float32),
    )
