"""Every engine's launch-command grammar (:mod:`moeplan.backends.launch_reader`), by engine.

Its own module so that the generic reader imports no engine and each engine's grammar imports
only the reader (no import cycle)."""

from __future__ import annotations

from moeplan.backends.launch_reader import EngineArgs
from moeplan.backends.sglang_args import SGLANG_ARGS
from moeplan.backends.trtllm_args import TRTLLM_ARGS
from moeplan.backends.vllm_args import VLLM_ARGS


def grammars() -> dict[str, EngineArgs]:
    """Every engine's launch grammar by engine name."""
    return {g.engine: g for g in (SGLANG_ARGS, VLLM_ARGS, TRTLLM_ARGS)}
