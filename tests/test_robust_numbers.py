"""Huge and non-finite numbers in every numeric flag of every command, and in the grammars
(length distributions, power-law loads): one line naming the flag/part, the value and the
rule, exit 2 — never an ``OverflowError`` or NaN reaching arithmetic."""

from __future__ import annotations

import math

import pytest
import typer.main
from hypothesis import given
from hypothesis import strategies as st

from moeplan.cli import _bounds, app, main
from moeplan.cost.kerneldb.load import power_law_alpha
from moeplan.errors import MoeplanError
from moeplan.serve.workload.arrivals import MAX_LENGTH, LengthDist

HOSTILE = ["1" * 40, "inf", "-inf", "nan", "1e999", "1e308", "-1e16", "10000000000000001"]


def numeric_flags() -> dict[str, list[str]]:
    """{command path: its numeric options' flags}."""
    out: dict[str, list[str]] = {}

    def walk(c, prefix):
        for name, sub in getattr(c, "commands", {}).items():
            walk(sub, [*prefix, name])
        flags = [
            max(p.opts, key=len)
            for p in getattr(c, "params", [])
            if getattr(p, "type_descriptor", None) is not None
            and _bounds._numeric_kind(p.type_descriptor.annotation) is not None
            and p.opts[0].startswith("--")
        ]
        if prefix and flags:
            out[" ".join(prefix)] = flags

    walk(typer.main.get_command(app), [])
    return out


FLAGS = numeric_flags()


def test_many_numeric_flags_are_found():
    assert sum(map(len, FLAGS.values())) >= 40 and "--isl" in FLAGS["strategy"]


#: make test's sample of HOSTILE for every flag: a non-finite value and an integer over 10^15
#: (a float flag reads it as a finite float over the limit); all of HOSTILE runs on SWEPT's
#: flags in make test and on every command's under make test-slow.
SAMPLE = ["nan", "10000000000000001"]
SWEPT = "strategy"


@pytest.mark.parametrize("command", sorted(FLAGS))
def test_every_numeric_flag_refuses_sampled_hostile_values(command, capsys):
    """Every numeric flag of every command refuses SAMPLE; SWEPT's flags refuse all of
    HOSTILE (integer and float flags alike)."""
    _check_refusals(capsys, command, HOSTILE if command == SWEPT else SAMPLE)


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(set(FLAGS) - {SWEPT}))
def test_every_numeric_flag_refuses_huge_and_non_finite_values(command, capsys):
    _check_refusals(capsys, command, HOSTILE)


def _check_refusals(capsys, command: str, values: list[str]) -> None:
    """Each of ``values`` in each numeric flag of ``command``: exit 2, one line naming the
    flag and the rule (or Typer's line for a float given to an integer flag)."""
    for flag in FLAGS[command]:
        for value in values:
            with pytest.raises(SystemExit) as ex:
                main([*command.split(), f"{flag}={value}"])
            err = capsys.readouterr().err.strip().splitlines()
            assert ex.value.code == 2 and len(err) == 1, (flag, value, err)
            if "valid integer" in err[0]:
                assert f"'{flag}'" in err[0]  # a float given to an integer flag: Typer's line
                continue
            assert err[0].startswith(f"moeplan: error: {flag} (") and (
                "must be a finite number" in err[0]
                or "at most 10^15" in err[0]
                or "must be a whole number in digits" in err[0]  # integer flags' grammar
            ), (flag, value, err)


def integer_flags() -> dict[str, list[str]]:
    """{command path: its integer options' flags}."""
    out: dict[str, list[str]] = {}

    def walk(c, prefix):
        for name, sub in getattr(c, "commands", {}).items():
            walk(sub, [*prefix, name])
        flags = [
            max(p.opts, key=len)
            for p in getattr(c, "params", [])
            if getattr(p, "type_descriptor", None) is not None
            and _bounds._numeric_kind(p.type_descriptor.annotation) is int
            and p.opts[0].startswith("--")
        ]
        if prefix and flags:
            out[" ".join(prefix)] = flags

    walk(typer.main.get_command(app), [])
    return out


INT_FLAGS = integer_flags()
NOT_INTEGERS = ["5.0", "1_000", " 5", "+8", "-0", "08"]


def test_many_integer_flags_are_found():
    assert sum(map(len, INT_FLAGS.values())) >= 30 and "--isl" in INT_FLAGS["strategy"]


@pytest.mark.parametrize("command", sorted(INT_FLAGS))
def test_every_integer_flag_has_one_grammar(command, capsys):
    """Digits, an optional minus, no leading zero: anything else is one line naming the flag
    (each flag gets one of the texts in turn, and a command's first flag all of them)."""
    flags = INT_FLAGS[command]
    cases = [(flags[0], v) for v in NOT_INTEGERS]
    cases += [(f, NOT_INTEGERS[i % len(NOT_INTEGERS)]) for i, f in enumerate(flags[1:])]
    for flag, value in cases:
        with pytest.raises(SystemExit) as ex:
            main([*command.split(), f"{flag}={value}"])
        err = capsys.readouterr().err.strip().splitlines()
        assert ex.value.code == 2 and len(err) == 1, (flag, value, err)
        assert err[0].startswith(f"moeplan: error: {flag} ("), (flag, value, err)
        assert "whole number" in err[0], (flag, value, err)


def test_pp_auto_or_an_integer_in_the_same_grammar(capsys):
    with pytest.raises(SystemExit) as ex:
        main(["pipeline", "--model", "qwen3-30b-a3b", "--cluster", "smidt-a40", "--pp", "+2"])
    err = capsys.readouterr().err
    assert ex.value.code == 2 and "--pp ('+2') must be a whole number" in err and "auto" in err


def test_negative_seed_is_refused(capsys):
    with pytest.raises(SystemExit) as ex:
        main(["serve-sim", "--seed", "-1"])
    assert ex.value.code == 2 and "--seed (-1) must be >= 0" in capsys.readouterr().err


def test_nul_byte_in_an_argument(capsys):
    with pytest.raises(SystemExit) as ex:
        main(["inspect", "conf\x00ig.json"])
    err = capsys.readouterr().err
    assert ex.value.code == 2 and "must not contain a NUL byte" in err and "\x00" not in err


@pytest.mark.parametrize(
    "text,part",
    [("fixed:1e999", "1e999"), ("uniform:nan:5", "nan"), ("uniform:5:1e40", "1e40"),
     ("lognormal:512:1e308", "sigma"), ("fixed:0.5", "0.5"), ("inf", "inf")],
)  # fmt: skip
def test_length_grammar_names_the_part(text, part):
    with pytest.raises(MoeplanError, match=f"length .*{part}"):
        LengthDist.parse(text)


@given(
    kind=st.sampled_from(["", "fixed:", "uniform:", "lognormal:", "x:"]),
    nums=st.lists(
        st.floats(allow_nan=True, allow_infinity=True).map(repr)
        | st.integers(-(10**40), 10**40).map(str)
        | st.sampled_from(["", "nan", "inf", "1e999", "0x10", "1_000"]),
        min_size=1,
        max_size=4,
    ),
)
def test_any_length_text_parses_or_is_one_user_error(kind, nums):
    text = kind + ":".join(nums)
    try:
        d = LengthDist.parse(text)
    except MoeplanError as err:
        assert "\n" not in str(err)
        return
    assert d.low >= 1 and d.mean <= MAX_LENGTH and (d.high or 0) <= MAX_LENGTH
    assert math.isfinite(d.sigma) and 0 < d.sigma <= 8


@pytest.mark.parametrize("alpha", ["1e308", "inf", "nan", "101", "0", "1", "-2"])
def test_power_law_alpha_bounds(alpha):
    with pytest.raises(MoeplanError, match="0 < alpha <= 100"):
        power_law_alpha(f"power_law_{alpha}")
    assert power_law_alpha("power_law_100") == 100.0
