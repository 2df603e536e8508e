"""Module-name patterns of quantization ignore lists: the linear-time matcher agrees with
Python's ``re`` / ``fnmatch`` (the oracles) on patterns where those are safe, and finishes
on the patterns where backtracking ``re`` does not."""

from __future__ import annotations

import json
import re
import time
from fnmatch import fnmatchcase
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypothesis_budget import examples
from moeplan.errors import MoeplanError
from moeplan.specs import load_model
from moeplan.specs.patterns import PatternSet, Regex, glob_match

CONFIGS = Path(__file__).parent / "data" / "configs"
ALPHABET = "ab.1_"
NAMES = st.text(alphabet=ALPHABET, max_size=12)


@st.composite
def regexes(draw, depth: int = 0) -> str:
    """Patterns of the supported subset without nested quantifiers (safe for ``re``)."""
    atoms = [st.sampled_from(["a", "b", ".", r"\.", "1", "_", "[ab]", "[^.]", r"\d", r"\w"])]
    if depth < 2:
        atoms.append(regexes(depth=depth + 1).map(lambda p: f"({p})"))
        atoms.append(st.tuples(regexes(depth=depth + 1), regexes(depth=depth + 1))
                     .map(lambda t: f"(?:{t[0]}|{t[1]})"))  # fmt: skip
    parts = draw(st.lists(st.one_of(*atoms), min_size=1, max_size=4))
    quant = st.sampled_from(["", "", "*", "+", "?", "{1,2}", "{2}"])
    body = "".join(p + (draw(quant) if depth == 0 else "") for p in parts)
    return ("^" if draw(st.booleans()) else "") + body + ("$" if draw(st.booleans()) else "")


@settings(max_examples=examples(80))
@given(regexes(), st.lists(NAMES, min_size=1, max_size=6))
def test_regex_matches_as_re_match(pattern, names):
    r = Regex(pattern, "test")
    for n in names:
        assert r.match(n) == (re.match(pattern, n) is not None), (pattern, n)


@settings(max_examples=examples(300))
@given(st.text(alphabet="ab.*?", max_size=8), NAMES)
def test_glob_matches_as_fnmatch(pattern, name):
    assert glob_match(name, pattern) == fnmatchcase(name, pattern)


@pytest.mark.parametrize("pattern", ["(.|.)*Z", "((.+))+Z", "((.*))*Z", "(a|aa)*b", "(a*)*b"])
def test_backtracking_patterns_finish_in_linear_time(pattern):
    """Patterns that take ``re`` exponential time: 1,000 of them over a 245-character name
    finish in well under a second (re: minutes for one)."""
    sets = [Regex(f"{pattern}{i}", "test") for i in range(1000)]
    name = "a" * 245
    start = time.perf_counter()
    assert not any(r.match(name) for r in sets)
    assert time.perf_counter() - start < 5.0  # measured ~0.1 s; 5 s: a shared 2-core machine


def test_work_is_bounded_with_one_line():
    """Adversarial lists stop at the step budget with one line, never run unbounded."""
    pats = PatternSet(tuple(f"re:([ab]|[ab]?)*{i}z" for i in range(300)), "ct", "ignore")
    start = time.perf_counter()
    with pytest.raises(MoeplanError, match="exceeded moeplan's bound"):
        for i in range(5000):
            pats.match(("ab" * 200)[: 150 + i % 50] + str(i))
    assert time.perf_counter() - start < 20.0  # ~1-2 s: the bound, not the 5,000 names


def test_hf_list_semantics():
    """Plain names: the module, a parent, or a run of whole components; regex syntax from the
    start up to a module boundary (``model.layers.1`` is not layer 10)."""
    s = PatternSet(("lm_head", "mlp.gate", "model.layers.1", "model.layers.*.self_attn"), "hf",
                   "modules_to_not_convert")  # fmt: skip
    assert s.match("lm_head") and s.match("model.layers.3.mlp.gate")
    assert s.match("model.layers.1.mlp.up_proj") and not s.match("model.layers.10.mlp.up_proj")
    assert s.match("model.layers.7.self_attn.q_proj")
    assert not s.match("model.layers.3.mlp.gate_proj")


@pytest.mark.timeout(60)
def test_glm5_fp8_config_with_712_entries_loads_quickly():
    cfg = json.loads((CONFIGS / "zai-org--GLM-5-FP8" / "config.json").read_text())
    assert len(cfg["quantization_config"]["modules_to_not_convert"]) == 712
    start = time.perf_counter()
    m = load_model(str(CONFIGS / "zai-org--GLM-5-FP8" / "config.json"))
    assert time.perf_counter() - start < 10.0  # bench/bench_configs.py: ~0.1 s
    assert m.quant.method == "fp8"
