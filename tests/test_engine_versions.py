"""Engine versions (``--engine-version``): the one version ordering, which table prices a
release, prices at a tabled release equal to that release's rows, the shipped
leave-one-version-out errors against a recomputation, the lab's releases accepted, the kernel
store keeping two releases apart, and bad input refused with one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.version import Version

from cli_run import run_main
from moeplan.backends import BACKENDS
from moeplan.backends.versions import (
    EXTRAPOLATED,
    MEASURED,
    NEAREST,
    check_version,
    sort_versions,
    table_for,
    version_key,
)
from moeplan.cost.provenance import pricing
from moeplan.errors import MoeplanError
from moeplan.kernel_store import DiskStore
from moeplan.kernel_tables import (
    FILES,
    _read,
    engine_cost_model,
    engine_table_versions,
    kernel_db,
    read_version_transfer,
    table_devices,
    table_versions,
)
from moeplan.specs import load_cluster

#: the releases of the measured lab runs (../shared/data/benchmarks/lab_a100_h100_moe.csv,
#: column engine_version; GPUStack performance-lab reports @ 47277d79)
LAB = {
    "vllm": ("0.10.2", "0.11.0"),
    "sglang": ("0.5.3", "0.5.3rc0", "0.5.4.post2", "0.5.5.post1"),
    "trtllm": ("1.0.0", "1.2.0rc1"),
}

releases = st.tuples(
    st.lists(st.integers(0, 12), min_size=1, max_size=4),
    st.sampled_from(["", "a", "b", "rc"]),
    st.integers(0, 25),
    st.one_of(st.none(), st.integers(0, 5)),
    st.one_of(st.none(), st.integers(0, 5)),
)


def _spell(r) -> str:
    rel, pre, pre_n, post, dev = r
    s = ".".join(map(str, rel)) + (f"{pre}{pre_n}" if pre else "")
    s += "" if post is None else f".post{post}"
    return s + ("" if dev is None else f".dev{dev}")


@given(releases, releases)
def test_version_order_is_pep440_order(a, b):
    """Oracle: packaging's PEP 440 ordering (equality too: 0.5 == 0.5.0)."""
    x, y = _spell(a), _spell(b)
    assert (version_key(x) < version_key(y)) == (Version(x) < Version(y))
    assert (version_key(x) == version_key(y)) == (Version(x) == Version(y))


def test_version_order_of_the_engines_tags():
    tags = ["0.5.4.post2", "0.5.3", "0.5.3rc0", "1.3.0rc20", "1.3.0rc10", "0.5.10", "0.5.9"]
    assert sort_versions(tags) == (
        "0.5.3rc0", "0.5.3", "0.5.4.post2", "0.5.9", "0.5.10", "1.3.0rc10", "1.3.0rc20",
    )  # fmt: skip


@pytest.mark.parametrize("bad", ["", "v0.5.9", "0.5.x", "latest", "0.5.9+cu128", "0..5", "1.0-rc1"])
def test_a_malformed_version_is_one_line(bad):
    with pytest.raises(MoeplanError, match="engine version"):
        version_key(bad)


@given(st.lists(releases, min_size=1, max_size=6), releases)
def test_table_for_picks_the_rule(measured, wanted):
    have = sorted({_spell(r) for r in measured}, key=Version)
    v = _spell(wanted)
    c = table_for(have, v)
    assert c.table in have
    older = [h for h in have if Version(h) <= Version(v)]
    if any(Version(h) == Version(v) for h in have):
        assert c.how == MEASURED
    elif older:
        assert c.how == NEAREST and c.table == older[-1]
    else:
        assert c.how == EXTRAPOLATED and c.table == have[0]
    assert table_for(have, None) == type(c)(None, have[-1], MEASURED)


def test_backends_list_the_releases_of_their_table_folders():
    """Derived from the folders: every release folder of an engine, and nothing else."""
    folders = {(e, v) for (_, e, _), vs in table_versions().items() for v in vs}
    for b in BACKENDS.values():
        got = engine_table_versions(b.name)
        assert set(got) == {v for e, v in folders if e == b.kernel_table}
        assert list(got) == sorted(got, key=Version)
    assert {"0.5.9", "0.5.14"} <= set(engine_table_versions("sglang"))
    assert {"0.14.0", "0.19.0", "0.24.0"} <= set(engine_table_versions("vllm"))


def test_a_version_newer_than_every_table_is_refused():
    newest = engine_table_versions("sglang")[-1]
    check_version("sglang", newest, engine_table_versions("sglang"))
    with pytest.raises(MoeplanError, match="newer than sglang's newest kernel table"):
        kernel_db("sglang", "99.0")


def _moe_rows(version: str):
    root = Path(str(table_versions()[("h100_sxm", "sglang", "moe_perf.parquet")][version]))
    op, rename, lat, scale = FILES["moe_perf.parquet"][0]
    return _read(root, op, rename, lat, scale, "h100_sxm", "sglang", version)


def test_pricing_at_a_tabled_release_is_that_releases_row():
    """A shape that release 0.5.9 measured once (development rows: the reader drops the
    frozen test fold) prices at its latency, and not at 0.5.14's."""
    t = _moe_rows("0.5.9")
    cols = {c: np.asarray(v) for c, v in t.columns.items()}
    keys = [tuple(str(cols[c][i]) for c in cols) for i in range(len(t.latency))]
    counts: dict[tuple, int] = {}
    for k in keys:
        counts[k] = counts.get(k, 0) + 1
    i = next(
        j for j, k in enumerate(keys)
        if counts[k] == 1 and cols["moe_dtype"][j] == "bfloat16" and cols["num_tokens"][j] == 64
    )  # fmt: skip
    shape = {c: v[i].item() if hasattr(v[i], "item") else v[i] for c, v in cols.items()}
    dev = table_devices()["h100_sxm"]
    p = kernel_db("sglang", "0.5.9").predict("moe", dev, "sglang", **shape)
    assert p.source == "measured" and "@0.5.9" in p.detail
    assert p.seconds == pytest.approx(float(t.latency[i]), rel=1e-9)
    newest = kernel_db().predict("moe", dev, "sglang", **shape)
    assert "@0.5.14" in newest.detail and newest.seconds != pytest.approx(p.seconds, rel=1e-3)


def test_shipped_transfer_errors_agree_with_a_recomputation():
    """SGLang's wide-EP decode MoE (0.5.6.post2 and 0.5.10, a few hundred rows): each left
    out, priced from the other, median / p90 as the shipped file states them."""
    from moeplan.cost.kerneldb.version_transfer import leave_one_version_out, pooled

    name = "wideep_generation_moe_perf.parquet"
    paths = table_versions()[("h100_sxm", "sglang", name)]
    op, rename, lat, scale = FILES[name][0]
    tables = {
        v: _read(p, op, rename, lat, scale, "h100_sxm", "sglang", v) for v, p in paths.items()
    }
    rows = leave_one_version_out(tables, table_devices()["h100_sxm"])
    assert {(r.left_out, r.priced_with, r.how) for r in rows} == {
        ("0.5.6.post2", "0.5.10", EXTRAPOLATED), ("0.5.10", "0.5.6.post2", NEAREST),
    }  # fmt: skip
    shipped = read_version_transfer()["by_engine"][("sglang", op)]
    got = pooled(rows)
    assert got is not None and got["rows"] == shipped["rows"]
    assert got["median"] == pytest.approx(shipped["median"], abs=1e-3)
    assert got["p90"] == pytest.approx(shipped["p90"], abs=1e-3)
    # an independent figure: the errors are those of the other table's own model, not zero
    assert 0.0 < shipped["median"] < shipped["p90"]


@pytest.mark.parametrize(("engine", "version"), [(e, v) for e, vs in LAB.items() for v in vs])
def test_every_lab_release_is_priced_and_says_how(engine, version):
    """Older than every H100 table of fused MoE: extrapolated, with the error stated."""
    cm = engine_cost_model(load_cluster("h100-sxm-8"), None, engine, version)
    v = pricing(cm)["engine_version"]
    assert v["requested"] == version and v["tables_gpu"] == "h100_sxm"
    rec = cm._kdb.versions[("h100_sxm", engine, "moe")]
    assert rec["how"] == EXTRAPOLATED
    assert rec["error_median"] is not None and rec["error_p90"] >= rec["error_median"]
    assert engine in rec["error_from"] or "pooled" in rec["error_from"]


def test_two_releases_never_share_a_stored_variant(tmp_path):
    devices = table_devices()
    a = table_versions()[("h100_sxm", "sglang", "moe_perf.parquet")]
    key = ("variant", "h100_sxm", "sglang", "moe", ("sglang_fused_moe_triton", "bfloat16"))
    paths = {
        v: DiskStore(tmp_path, {("h100_sxm", "sglang", "moe"): a[v]}, devices).path(key)
        for v in ("0.5.9", "0.5.14")
    }
    assert paths["0.5.9"] != paths["0.5.14"]
    assert "@0.5.9-" in paths["0.5.9"].name and "@0.5.14-" in paths["0.5.14"].name


ARGS = ("--model", "deepseek-v2-lite", "--cluster", "h100-sxm-8")


@pytest.mark.parametrize(
    ("version", "engine", "match"),
    [
        ("0.5.x", "sglang", "must be a release like"),
        ("0.9.0", "sglang", "newer than sglang's newest kernel table"),
        ("0.5.9", "nosuch", "--engine ('nosuch')"),
    ],
)
def test_bad_engine_version_is_one_line_and_writes_nothing(
    capsys, tmp_path, version, engine, match
):
    out = tmp_path / "plan"
    code, stdout, err = run_main(
        capsys, "plan", *ARGS, "--engine", engine, "--engine-version", version,
        "--out", str(out), "--quiet",
    )  # fmt: skip
    assert code == 2 and stdout == "" and len(err.strip().splitlines()) == 1, err
    assert match in err and not out.exists()
    code, stdout, err = run_main(
        capsys, "serve-sim", *ARGS, "--phase", "decode", "--batch-per-gpu", "8", "--context",
        "1024", "--engine", engine, "--engine-version", version, "--json",
    )  # fmt: skip
    assert code == 2 and stdout == "" and len(err.strip().splitlines()) == 1, err


def test_the_human_header_names_the_release_and_how(capsys):
    code, out, err = run_main(
        capsys, "serve-sim", *ARGS, "--phase", "decode", "--batch-per-gpu", "8", "--context",
        "1024", "--engine-version", "0.5.3",
    )  # fmt: skip
    assert code == 0, err
    text = " ".join(out.split())
    assert "sglang 0.5.3:" in text and "extrapolated (0.5.9)" in text
    assert "transfer error median" in text
    code, out, err = run_main(
        capsys, "serve-sim", *ARGS, "--phase", "decode", "--batch-per-gpu", "8", "--context",
        "1024", "--engine-version", "0.5.3", "--json",
    )  # fmt: skip
    ev = json.loads(out)["pricing"]["engine_version"]
    assert ev["ops"]["moe"]["how"] == EXTRAPOLATED and ev["ops"]["moe"]["table_version"] == "0.5.9"
    assert json.loads(out)["price_sources"]["transferred"]["seconds"] > 0.0


def test_a_release_between_tables_takes_the_newest_older_one_with_its_error():
    """SGLang 0.5.10 has wide-EP tables but no fused-MoE table: 0.5.9's, nearest version,
    with SGLang's own fused-MoE leave-one-version-out figure."""
    db = kernel_db("sglang", "0.5.10")
    moe = db.versions[("h100_sxm", "sglang", "moe")]
    assert (moe["how"], moe["table_version"]) == (NEAREST, "0.5.9")
    shipped = read_version_transfer()["by_engine"][("sglang", "moe")]
    assert moe["error_median"] == pytest.approx(shipped["median"], rel=1e-9)
    assert moe["error_p90"] == pytest.approx(shipped["p90"], rel=1e-9)
    assert db.versions[("h100_sxm", "sglang", "wideep_context_moe")]["how"] == MEASURED
    assert db.versions[("h100_sxm", "vllm", "moe")]["table_version"] == "0.24.0"  # others: newest
