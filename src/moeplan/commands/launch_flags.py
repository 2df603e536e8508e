"""``serve-sim --launch "CMD"``: an engine's own launch command in place of moeplan's layout,
engine and instance-knob flags (:mod:`moeplan.backends.launch_reader`).

The command sets what it says; a moeplan flag given on the command line as well must agree
with it (else one line naming both), so nothing is silently overridden. Flags the command
leaves out keep moeplan's defaults, which are the engines' defaults. What the command says that
moeplan does not price is reported with the answer (``launch.not_priced``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from moeplan.backends.launch_grammars import grammars
from moeplan.backends.launch_reader import LaunchSettings, read_launch, serve_flags
from moeplan.errors import MoeplanError

#: moeplan's flag spelling of each ``serve-sim`` value a launch command can set
FLAG_OF = {
    "engine": "--engine",
    "model": "--model",
    "attn_tp": "--attn-tp",
    "attn_dp": "--attn-dp",
    "moe_tp": "--moe-tp",
    "moe_ep": "--moe-ep",
    "pp": "--pp",
    "replicas": "--replicas",
    "chunk_tokens": "--chunk-tokens",
    "max_running": "--max-running",
    "kv_dtype": "--kv-dtype",
    "mtp": "--mtp",
    "tbo": "--tbo",
    "overlap_schedule": "--overlap-schedule",
    "a2a": "--a2a",
    "mem_fraction": "--mem-fraction",
}
#: ``serve-sim`` flags that say the deployment another way than one launch command
EXCLUSIVE = ("plan", "pd")


def apply_launch(
    command: str, values: dict[str, Any], given: Callable[[str], bool]
) -> tuple[dict[str, Any], LaunchSettings]:
    """``values`` (serve-sim's flags by name) with what ``command`` sets; ``given(name)``
    says whether the user typed that flag. One line for a conflict or an unmodelled setting."""
    for name in EXCLUSIVE:
        if values.get(name) is not None:
            raise MoeplanError(f"--launch describes the deployment: drop --{name}")
    g = grammars()
    s = read_launch(command, g)
    if s.quantization is not None:
        raise MoeplanError(
            f"launch command quantization ({s.quantization}) is online quantisation, which "
            "moeplan does not model: serve a checkpoint quantised offline (its config says so)"
        )
    out = dict(values)
    for name, value in serve_flags(s, g).items():
        flag = FLAG_OF[name]
        if name not in values:
            raise MoeplanError(f"launch command sets {flag} ({value}), which serve-sim lacks")
        if name == "model" and values[name] is not None and _same_model(values[name], value):
            continue  # the user's spelling of the same network stays
        if given(name) and values[name] is not None and values[name] != value:
            raise MoeplanError(
                f"{flag} ({values[name]}) disagrees with the launch command ({value}); "
                "give one of them"
            )
        out[name] = value
    if s.max_model_len is not None:
        isl, osl = values.get("isl"), values.get("osl")
        if isl is not None and osl is not None and isl + osl > s.max_model_len:
            raise MoeplanError(
                f"--isl + --osl ({isl + osl}) exceeds the launch command's context limit "
                f"({s.max_model_len}): the engine would refuse these requests"
            )
    return out, s


def _same_model(given: str, launched: str) -> bool:
    """Whether ``--model`` and the launch command's model name one network (a launch command
    may serve a local copy named as the hub repository: ``GLM-4.5-Air`` for
    ``zai-org/GLM-4.5-Air``)."""
    from moeplan.specs.presets import preset_key

    if (
        given.rstrip("/").rsplit("/", 1)[-1].lower()
        == launched.rstrip("/").rsplit("/", 1)[-1].lower()
    ):
        return True
    return given == launched or preset_key(launched) in (given, preset_key(given))


def launch_report(command: str, s: LaunchSettings) -> dict[str, Any]:
    """The ``launch`` block of serve-sim's answer: the command and what moeplan did not
    price (flag and why) or dropped as having no effect."""
    return {
        "command": command,
        "engine": s.engine,
        "not_priced": [{"flag": f, "why": w} for f, w in s.not_priced],
        "no_effect": [{"flag": f, "why": w} for f, w in s.no_effect],
    }
