"""Every flag of every command is in the flag registry (tests/flag_registry.py) with a probe,
and a sample of cheap probes shows the flag read: it changes the ``--json`` answer or is
refused with one line. The full sweep is ``bench/flag_sweep.py`` (``make fuzz``)."""

from __future__ import annotations

import pytest

from flag_registry import EXEMPT, NOT_SWEPT, REGISTRY, all_flags, check, make_trace


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
