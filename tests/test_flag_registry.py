"""Every flag of every command is in the flag registry (tests/flag_registry.py) with a probe,
and a sample of cheap probes shows the flag read: it changes the ``--json`` answer or is
refused with one line. The full sweep is ``bench/flag_sweep.py`` (``make fuzz``)."""

from __future__ import annotations

import json
import tempfile

import pytest

from flag_registry import (
    EXEMPT,
    NOT_SWEPT,
    REGISTRY,
    _moeplan,
    _strip,
    all_flags,
    check,
    make_trace,
)


def test_every_flag_of_every_command_has_a_probe():
    missing, stale = [], []
    flags = all_flags()
    for command, names in flags.items():
        probes = REGISTRY.get(command, ((), {}))[1]
        missing += [f"{command} {f}" for f in names if f not in EXEMPT and f not in probes]
        stale += [f"{command} {f}" for f in probes if f not in names]
    stale += [c for c in REGISTRY if c not in flags]
    assert not missing, f"flags with no probe in tests/flag_registry.py: {missing}"
    assert not stale, f"probes of flags the app does not have: {stale}"
    assert set(NOT_SWEPT) <= set(REGISTRY)


SAMPLE = [
    ("inspect", "--context"),
    ("inspect", "--gpus"),
    ("serve-sim", "--trace-out"),
    ("serve-sim", "--prefix-hit"),
    ("serve-sim", "--replicas"),
    ("serve-sim", "--isl-dist"),
    ("serve-sim", "--kv-dtype"),
    ("serve-sim", "--mem-fraction"),
    ("serve-sim", "--batch-per-gpu"),
    ("cost", "--num-tokens"),
    ("cost", "--moe-dtype"),
    ("plan", "--concurrency"),
]


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    return make_trace(tmp_path_factory.mktemp("flags"))


@pytest.mark.parametrize("command, flag", SAMPLE)
def test_a_sample_of_flags_is_read_not_ignored(command, flag, trace):
    assert check(command, flag, trace) is None


def _answer(command: str, trace: str):
    with tempfile.TemporaryDirectory() as tmp:
        args = [a.replace("{tmp}", tmp).replace("{trace}", trace) for a in REGISTRY[command][0]]
        code, out, err = _moeplan(args, 600)
    assert code == 0, err
    return _strip(json.loads(out))


SLOW = pytest.mark.slow
STABLE = ["dep", "place", *(pytest.param(c, marks=SLOW) for c in REGISTRY
          if c not in ("dep", "place", "run", "trace import"))]  # fmt: skip


@pytest.mark.parametrize("command", STABLE)
def test_a_base_answer_is_the_same_in_two_runs(command, trace):
    """The sweep's oracle: outside the volatile keys (timings, paths) a question's answer
    does not vary, so a changed answer is the flag's doing (dep and place report their
    solve times, plan its search's)."""
    assert _answer(command, trace) == _answer(command, trace)
