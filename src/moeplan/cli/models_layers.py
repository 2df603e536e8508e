"""``moeplan inspect``: the model's decoder layers by kind and its non-language towers.

Per ``<mixer>+<ffn>`` kind: how many layers, the mixer's window / chunk / top-k / compression,
the cache one token adds (KV, before any window cap) and the cache of one sequence of
``--context`` tokens (window-capped, compressed, or the linear layers' fixed state) — the
figures the serving memory model sizes the KV pool from (:mod:`moeplan.specs.layer_math`).
"""

from __future__ import annotations

from typing import Any

from moeplan.cli._common import Table, console, fmt_bytes, fmt_count
from moeplan.specs import ModelSpec
from moeplan.specs import layer_math as lm

#: what inspect says about towers
TOWER_SCOPE = "loaded with the model and counted in weight memory; serving them is out of scope"


def _detail(x: Any) -> str:
    m, f = x.mixer, x.ffn
    parts = []
    if m.window:
        parts.append(f"window {m.window}")
    if m.chunk:
        parts.append(f"chunk {m.chunk}")
    if m.index_topk:
        parts.append(f"top-{m.index_topk} of {m.index_n_heads}x{m.index_head_dim} indexer")
    if m.compress_ratio:
        parts.append(f"1 entry per {m.compress_ratio} tokens")
    if m.topk_blocks:
        parts.append(f"top-{m.topk_blocks} blocks of {m.block_size}")
    if f.kind == "moe":
        parts.append(f"{f.top_k}/{f.num_experts} experts, router {f.router}"
                     + (f", {f.topk_group}/{f.n_group} groups" if f.n_group > 1 else "")
                     + (f", shared {f.shared_intermediate_size}" if f.shared_intermediate_size
                        else ""))  # fmt: skip
    return "; ".join(parts)


def layers_summary(m: ModelSpec, context: int) -> dict[str, Any]:
    """JSON rows: one per layer kind (see module docstring), and the towers."""
    rows: dict[str, dict[str, Any]] = {}
    for x in m.layer_specs:
        key = x.kind + (" (hash-routed)" if x.ffn.router == "hash" and x.is_moe else "")
        r = rows.setdefault(key, {
            "kind": key, "mixer": x.mixer.kind, "ffn": x.ffn.kind, "layers": 0,
            "detail": _detail(x), "kv_bytes_per_token": 0.0, "cache_bytes_per_seq": 0.0,
            "state_bytes_per_seq": 0.0,
        })  # fmt: skip
        r["layers"] += 1
        r["kv_bytes_per_token"] += lm.kv_bytes_per_token(x.mixer)
        r["cache_bytes_per_seq"] += lm.kv_bytes_for_context(x.mixer, context)
        r["state_bytes_per_seq"] += lm.state_bytes_per_seq(x.mixer)
    towers = [{"name": t.name, "params": t.params, "source": t.source, "scope": TOWER_SCOPE}
              for t in m.towers]  # fmt: skip
    return {"layer_kinds": list(rows.values()), "towers": towers,
            "cache_bytes_per_seq": m.kv_bytes_for_context(context)}  # fmt: skip


def print_layers(out: dict[str, Any]) -> None:
    t = Table(title=f"Decoder layers by kind (cache: all layers of the kind; one sequence of "
                    f"{out['context']} tokens)")  # fmt: skip
    for c in ("mixer+ffn", "layers", "KV / token", "cache / sequence", "of it fixed state",
              "shape"):  # fmt: skip
        t.add_column(c)
    for r in out["layer_kinds"]:
        t.add_row(r["kind"], str(r["layers"]), fmt_bytes(r["kv_bytes_per_token"]),
                  fmt_bytes(r["cache_bytes_per_seq"]), fmt_bytes(r["state_bytes_per_seq"]),
                  r["detail"])  # fmt: skip
    console.print(t)
    for tw in out["towers"]:
        console.print(f"{tw['name']} tower: {fmt_count(tw['params'])} parameters "
                      f"({tw['source']}) — {tw['scope']}")  # fmt: skip
