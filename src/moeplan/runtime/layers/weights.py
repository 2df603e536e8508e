"""Expert and attention weights from safetensors files (Hugging Face names, no pickle).

:func:`load_safetensors` reads DeepSeek/Qwen names (``model.layers.L.mlp.experts.E.
{gate,up,down}_proj.weight``, ``shared_experts``, ``gate.e_score_correction_bias``) and also
Mixtral's ``block_sparse_moe.experts.E.w1/w3/w2`` and Qwen2-MoE's ``shared_expert``;
:func:`save_safetensors` writes the DeepSeek names. Hugging Face stores ``[out, in]`` matrices;
the runtime keeps ``[in, out]``, so every matrix is transposed on the way in and out.
"""

from __future__ import annotations

from pathlib import Path

import torch

from moeplan.errors import MoeplanError
from moeplan.runtime.config import MoEConfig
from moeplan.runtime.layers.model import AttnWeights, LayerWeights
from moeplan.runtime.layers.moe import MoEWeights


def _moe_tensors(layer: int, w: MoEWeights) -> dict[str, torch.Tensor]:
    p = f"model.layers.{layer}.mlp."
    out = {p + "gate.weight": w.gate.T.contiguous()}
    if w.bias is not None:
        out[p + "gate.e_score_correction_bias"] = w.bias
    for e in range(w.w_gate.shape[0]):
        q = f"{p}experts.{e}."
        out[q + "gate_proj.weight"] = w.w_gate[e].T.contiguous()
        out[q + "up_proj.weight"] = w.w_up[e].T.contiguous()
        out[q + "down_proj.weight"] = w.w_down[e].T.contiguous()
    if w.shared_gate is not None and w.shared_up is not None and w.shared_down is not None:
        out[p + "shared_experts.gate_proj.weight"] = w.shared_gate.T.contiguous()
        out[p + "shared_experts.up_proj.weight"] = w.shared_up.T.contiguous()
        out[p + "shared_experts.down_proj.weight"] = w.shared_down.T.contiguous()
    return out


def save_safetensors(layers: list[LayerWeights], path: str | Path) -> None:
    """Write MoE weights with Hugging Face DeepSeek key names (``[out, in]`` matrices)."""
    from safetensors.torch import save_file

    tensors: dict[str, torch.Tensor] = {}
    for i, lw in enumerate(layers):
        if lw.moe is None:
            raise MoeplanError(f"layer {i} (dense) cannot be saved: only MoE layers are supported")
        tensors.update(_moe_tensors(i, lw.moe))
        for n in ("q", "k", "v", "o"):
            tensors[f"model.layers.{i}.self_attn.{n}_proj.weight"] = getattr(
                lw.attn, f"w{n}"
            ).T.contiguous()
    save_file(tensors, str(path))


_MIXTRAL = {"gate": "w1", "up": "w3", "down": "w2"}


def _alias(t: dict[str, torch.Tensor], i: int) -> None:
    """Rename layer ``i``'s Mixtral (``block_sparse_moe``, ``w1/w3/w2``) and Qwen2-MoE
    (``shared_expert``) keys to the DeepSeek names in place."""
    old = f"model.layers.{i}.block_sparse_moe."
    new = f"model.layers.{i}.mlp."
    for key in [k for k in t if k.startswith(old)]:
        rest = key[len(old) :]
        for ours, theirs in _MIXTRAL.items():
            rest = rest.replace(f".{theirs}.weight", f".{ours}_proj.weight")
        t[new + rest] = t.pop(key)
    for key in [k for k in t if k.startswith(f"{new}shared_expert.")]:
        t[key.replace(".shared_expert.", ".shared_experts.")] = t.pop(key)


def required_keys(cfg: MoEConfig) -> list[str]:
    """The tensor names :func:`load_safetensors` needs (DeepSeek names, after aliasing)."""
    out = []
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}.mlp."
        out += [
            f"{p}experts.{e}.{n}_proj.weight"
            for n in ("gate", "up", "down")
            for e in range(cfg.num_experts)
        ]
        out.append(p + "gate.weight")
        out += [f"model.layers.{i}.self_attn.{n}_proj.weight" for n in ("q", "k", "v", "o")]
    return out


def check_safetensors(paths: list[str | Path], cfg: MoEConfig) -> None:
    """Read only the files' headers and refuse, in one line, what :func:`load_safetensors`
    would refuse on every rank: an unreadable file or a missing tensor."""
    from safetensors import SafetensorError, safe_open

    names: dict[str, None] = {}
    for p in paths:
        try:
            with safe_open(str(p), framework="pt") as f:
                names.update(dict.fromkeys(f.keys()))
        except (OSError, SafetensorError) as err:
            text = " ".join(str(err).split())[:120]
            raise MoeplanError(
                f"--weights ({p}) could not be read as safetensors: {type(err).__name__}: {text}"
            ) from None
    for i in range(cfg.num_layers):
        _alias(names, i)  # type: ignore[arg-type]  # renames keys only
    missing = [k for k in required_keys(cfg) if k not in names]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise MoeplanError(f"weights ({missing[0]}) missing from safetensors files{more}")


def load_safetensors(paths: list[str | Path], cfg: MoEConfig) -> list[LayerWeights]:
    """Load ``cfg.num_layers`` layers from safetensors shards (Hugging Face DeepSeek/Qwen names;
    Mixtral's ``block_sparse_moe.experts.E.w1/w3/w2`` and Qwen2-MoE's ``shared_expert`` too)."""
    from safetensors.torch import load_file

    t: dict[str, torch.Tensor] = {}
    for p in paths:
        t.update(load_file(str(p)))
    for i in range(cfg.num_layers):
        _alias(t, i)

    def get(key: str) -> torch.Tensor:
        if key not in t:
            raise MoeplanError(f"weights ({key}) missing from safetensors files")
        return t[key].float().T.contiguous()

    layers = []
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}.mlp."
        ex = [
            [get(f"{p}experts.{e}.{n}_proj.weight") for e in range(cfg.num_experts)]
            for n in ("gate", "up", "down")
        ]
        has_shared = f"{p}shared_experts.gate_proj.weight" in t
        sh = [
            get(f"{p}shared_experts.{n}_proj.weight") if has_shared else None
            for n in ("gate", "up", "down")
        ]
        bias = t.get(p + "gate.e_score_correction_bias")
        moe = MoEWeights(
            gate=get(p + "gate.weight"),
            bias=None if bias is None else bias.float(),
            w_gate=torch.stack(ex[0]),
            w_up=torch.stack(ex[1]),
            w_down=torch.stack(ex[2]),
            shared_gate=sh[0],
            shared_up=sh[1],
            shared_down=sh[2],
        )
        a = [get(f"model.layers.{i}.self_attn.{n}_proj.weight") for n in ("q", "k", "v", "o")]
        layers.append(LayerWeights(attn=AttnWeights(wq=a[0], wk=a[1], wv=a[2], wo=a[3]), moe=moe))
    return layers
