"""Specs: what is served (ModelSpec, Workload, RoutingProfile) and on what (ClusterSpec).

Pure data + validation. ``load_model``/``load_cluster`` resolve preset names (package data);
a path to a user's ``config.json`` is read by the CLI (:func:`moeplan.cli._common`) and passed
here as a dict via :meth:`ModelSpec.from_config`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from moeplan.errors import MoeplanError
from moeplan.specs.cluster import ClusterSpec, GPUSpec, LinkSpec
from moeplan.specs.gpu import gpu_from_record
from moeplan.specs.model import ModelSpec, ModuleInfo
from moeplan.specs.presets import (
    MODEL_FILES,
    cluster_table,
    model_config,
    preset_hf_quant,
    preset_key,
)
from moeplan.specs.workload import RoutingProfile, Workload

__all__ = [
    "ClusterSpec",
    "GPUSpec",
    "LinkSpec",
    "ModelSpec",
    "ModuleInfo",
    "RoutingProfile",
    "Workload",
    "cluster_names",
    "gpu_records",
    "load_cluster",
    "load_model",
    "model_from_dict",
    "model_names",
]


def model_names() -> list[str]:
    """Names of the shipped model presets."""
    return list(MODEL_FILES)


def cluster_names() -> list[str]:
    """Names of the shipped cluster presets."""
    return list(cluster_table()["clusters"])


def gpu_records() -> dict[str, GPUSpec]:
    """Every preset GPU record (:mod:`moeplan.specs.gpu`), checked."""
    return {name: gpu_from_record(name, rec) for name, rec in cluster_table()["gpus"].items()}


def model_from_dict(config: Any, name: str, hf_quant: Any = None) -> ModelSpec:
    """A ModelSpec from a config dict (and the ``hf_quant_config.json`` beside it, if any);
    any malformed input becomes a :class:`MoeplanError`."""
    try:
        return ModelSpec.from_config(config, name=name, hf_quant=hf_quant)
    except MoeplanError:
        raise
    except (
        TypeError,
        ValueError,
        KeyError,
        AttributeError,
        ZeroDivisionError,
        OverflowError,
    ) as err:
        raise MoeplanError(
            f"config[{name}] is not a valid MoE config: {type(err).__name__}: {err}"
        ) from None


def load_model(name: str) -> ModelSpec:
    """The preset model ``name`` (e.g. ``deepseek-v3``, or the Hugging Face repo a preset ships,
    e.g. ``zai-org/GLM-4.5-Air``), the ``config.json`` at a path, or a checkpoint folder's
    ``config.json`` (and the ``hf_quant_config.json`` beside it). A bare name is a preset
    unless a regular file, or a folder that no preset is named after, has it; a repo name is
    a preset unless a file or folder of that path exists.

    Reading a user's config file here is the specs layer's one file access; it is for the
    CLI's convenience, and planners only ever receive the resulting ``ModelSpec``.
    """
    from moeplan.specs.hf_config import config_path, exists, is_folder, read_config_file

    key = preset_key(name)
    repo = key is not None and "/" in name and not exists(name)  # a Hugging Face repo name
    if not repo and (name.endswith(".json") or "/" in name or os.sep in name
                     or Path(name).is_file() or (key is None and is_folder(name))):  # fmt: skip
        path = config_path(name)  # a checkpoint folder: its config.json
        label = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
        return model_from_dict(read_config_file(path), name=label, hf_quant=_hf_quant(path))
    return model_from_dict(model_config(name), name=key or name, hf_quant=preset_hf_quant(name))


def _hf_quant(config_path: Path) -> Any:
    """ModelOpt's ``hf_quant_config.json`` in the folder of ``config.json`` (``None``: none)."""
    from moeplan.specs.hf_config import read_json_file

    side = config_path.with_name("hf_quant_config.json")
    return read_json_file(side, "hf_quant_config.json") if side.is_file() else None


def load_cluster(name: str, nodes: int | None = None, racks: int | None = None) -> ClusterSpec:
    """The preset cluster ``name``; ``nodes`` replaces its node count, ``racks`` its count of
    NVLink domains on a rack cluster (GB200 / GB300 NVL72). Each is a one-line error where it
    does not apply: both at once, ``racks`` on a cluster whose NVLink domain is its node, a
    node count that is not a whole number of NVLink domains."""
    table = cluster_table()
    renamed = table.get("renamed", {})
    if name in renamed:
        raise MoeplanError(
            f"cluster ({name!r}) is named {renamed[name]!r}: use --cluster {renamed[name]}"
        )
    if name not in table["clusters"]:
        raise MoeplanError(
            f"cluster ({name!r}) is not a preset; choose one of {', '.join(table['clusters'])}"
        )
    if nodes is not None and racks is not None:
        raise MoeplanError(f"racks ({racks}) and nodes ({nodes}) both size the cluster: give one")
    c = table["clusters"][name]
    if c["gpu"] not in table["gpus"]:
        raise MoeplanError(f"cluster[{name}].gpu ({c['gpu']!r}) has no record in gpus")
    g = table["gpus"][c["gpu"]]
    li, lo = table["links"][c["intra"]], table["links"][c["inter"]]
    cluster = ClusterSpec(
        name=name,
        num_nodes=c["nodes"],
        gpus_per_node=c["gpus_per_node"],
        gpu=gpu_from_record(c["gpu"], g),
        intra=LinkSpec(kind=li["kind"], bw=li["bw"], latency=li["latency"]),
        inter=LinkSpec(kind=lo["kind"], bw=lo["bw"], latency=lo["latency"]),
        profile=c.get("profile"),
        source=c["source"],
        domain_gpus=c.get("nvlink_domain"),
    )
    if racks is not None:
        return cluster.with_racks(racks)
    return cluster if nodes is None else cluster.with_nodes(nodes)
