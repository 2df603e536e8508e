"""``moeplan run``'s global batch: the default ``--tokens`` adapts to the plan (64, or one
sequence when the plan's ``seq_len`` is longer), so a plan made by ``dep --isl 128`` runs as
it is; a ``--tokens`` below one sequence is one line naming the flag."""

from __future__ import annotations

import pytest

from cli_run import run_main
from moeplan.planners.plan import Plan
from moeplan.runtime.options import DEFAULT_TOKENS, RunOptions, resolve

DEP = ["dep", "--model", "deepseek-v2-lite", "--cluster", "findep-c", "--ag", "1", "--eg", "1",
       "--isl", "128", "--layers", "2"]  # fmt: skip


@pytest.fixture(scope="module")
def dep_folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("dep") / "D"
    from moeplan.cli import main

    try:
        main([*DEP, "--out", str(out)])
    except SystemExit as stop:
        assert not stop.code
    return out


def test_run_of_a_dep_isl_128_plan_works_by_default(dep_folder, capsys):
    code, out, err = run_main(capsys, "run", "--plan", str(dep_folder), "--no-check", "--json")
    assert code == 0, err


def test_too_few_tokens_names_the_flag(dep_folder, capsys):
    code, _, err = run_main(capsys, "run", "--plan", str(dep_folder), "--tokens", "64")
    line = err.strip()
    assert code == 2 and "\n" not in line and "--tokens (64)" in line and "128" in line, err


@pytest.mark.parametrize(
    ("seq", "tokens"), [(None, DEFAULT_TOKENS), (8, 64), (128, 128), (300, 300)]
)
def test_default_tokens_is_64_or_one_sequence(seq, tokens):
    details = {} if seq is None else {"seq_len": seq}
    layout = {"world_size": 2, "ag": 1, "eg": 1}
    plan = Plan(family="dep", model="", cluster="", layout=layout, details=details)
    assert resolve(plan, RunOptions()).tokens == tokens
    assert resolve(plan, RunOptions(tokens=999)).tokens == 999
