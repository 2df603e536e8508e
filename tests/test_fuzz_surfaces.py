"""The ``make fuzz`` generators of the kernel-cache, plan-file and quantisation surfaces
(``bench/fuzz_surfaces.py``) and the contract ``bench/fuzz_all.py`` judges each run by: a
sample of each surface here, every case under ``make test-slow``."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

from fuzz_all import ROOT, judge, run_case  # noqa: E402
from fuzz_surfaces import (  # noqa: E402
    CACHE_KINDS,
    cache_value_cases,
    plan_file_cases,
    quant_file_cases,
)


def _run(case) -> dict | None:
    what, argv, expect, env = case
    return judge(what, argv, expect, run_case(argv, ROOT, 300, env))


def _ran(rc: int, stdout: str = "", lines: int = 0) -> dict:
    return {"stdout": stdout, "rc": rc, "hang": False, "traceback": False, "internal": False,
            "lines": lines, "err": "", "s": 0.1}  # fmt: skip


def test_the_judge_flags_each_broken_contract(tmp_path):
    same = tmp_path / "answer"
    same.write_text('{"a": 1}\n')
    assert judge("ok", ["x", "--json"], "0", _ran(0, '{"a": 1}')) is None
    assert judge("refused", ["x"], "2", _ran(2, lines=1)) is None
    assert judge("nan", ["x", "--json"], "0", _ran(0, '{"a": NaN}'))["invalid_json"]
    assert judge("rebuilt", ["x", "--json"], f"same:{same}", _ran(0, '{"a": 1}\n')) is None
    assert judge("used", ["x", "--json"], f"same:{same}", _ran(0, '{"a": 2}\n'))["answer_differs"]
    assert judge("accepted", ["x"], "2", _ran(0))["accepted_bad"]
    assert judge("two lines", ["x"], "any", _ran(2, lines=2)) is not None


@pytest.fixture(scope="module")
def quant(tmp_path_factory):
    return quant_file_cases(tmp_path_factory.mktemp("quant"))


def test_quant_cases_cover_every_field_of_both_folders(quant):
    fields = {"kv_cache_quant_algo", "quant_algo", "group_size", "exclude_modules"}
    for folder in ("DeepSeek-V3.1-NVFP4", "Qwen3.5-122B-A10B-NVFP4"):
        mine = [what for what, *_ in quant if folder in what]
        assert {f for f in fields if any(f" {f} = " in w for w in mine)} == fields
    assert all(expect == "2" for _, _, expect, _ in quant)


@pytest.mark.parametrize("index", [0, 12, 34])
def test_a_sample_of_quant_cases_is_refused_naming_the_field(quant, index):
    what, argv, expect, env = quant[index]
    r = run_case(argv, ROOT, 300, env)
    field = what.split(" hf_quant_config ")[1].split(" = ")[0]
    assert judge(what, argv, expect, dict(r)) is None, (what, r["err"])
    assert field in r["err"] or field == "exclude_modules", (what, r["err"])


def test_a_sample_of_cache_values_is_rebuilt_to_the_clean_answer(tmp_path):
    cases = cache_value_cases(tmp_path)
    assert [what for what, *_ in cases] == [f"cache value: {k}" for k in CACHE_KINDS]
    for case in (cases[0], cases[CACHE_KINDS.index("NaN")]):
        assert _run(case) is None, case[0]


@pytest.mark.slow
def test_every_cache_value_is_rebuilt_to_the_clean_answer(tmp_path):
    bad = [v for v in map(_run, cache_value_cases(tmp_path)) if v is not None]
    assert not bad, bad


@pytest.mark.slow
def test_every_quant_case_is_refused(quant):
    bad = [v for v in map(_run, quant) if v is not None]
    assert not bad, bad


@pytest.mark.slow
def test_tampered_plan_files_are_refused(tmp_path):
    cases = plan_file_cases(random.Random(0), tmp_path, 12)
    assert sum(expect == "2" for _, _, expect, _ in cases) == 20
    bad = [v for v in map(_run, cases) if v is not None]
    assert not bad, bad
