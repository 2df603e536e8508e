"""One record per GPU in the cluster presets (moeplan.specs.gpu): complete, sourced, checked."""

from __future__ import annotations

import pytest

from moeplan.cost.kerneldb import device_for
from moeplan.errors import MoeplanError
from moeplan.specs import cluster_names, gpu_records, load_cluster
from moeplan.specs.gpu import RATES, RECORD_FIELDS, gpu_from_record
from moeplan.specs.presets import cluster_table

RECORDS = cluster_table()["gpus"]


@pytest.mark.parametrize("gpu", sorted(RECORDS))
@pytest.mark.parametrize("field", [*RATES, *RECORD_FIELDS, "sources"])
def test_a_record_missing_a_field_is_one_line_naming_gpu_and_field(gpu: str, field: str) -> None:
    rec = {k: v for k, v in RECORDS[gpu].items() if k != field}
    with pytest.raises(MoeplanError) as err:
        gpu_from_record(gpu, rec)
    msg = str(err.value)
    assert "\n" not in msg and gpu in msg and field in msg


@pytest.mark.parametrize("field", ["sm_count", "fp8_ratio", "deepep", "reference_tables"])
def test_a_wrong_value_names_gpu_field_and_value(field: str) -> None:
    rec = dict(RECORDS["h800"], **{field: "fast" if field != "reference_tables" else None})
    with pytest.raises(MoeplanError, match=rf"gpus\[h800\]\.{field}"):
        gpu_from_record("h800", rec)


def test_every_source_is_stated() -> None:
    rec = dict(RECORDS["b200"], sources=dict(RECORDS["b200"]["sources"], deepep=""))
    with pytest.raises(MoeplanError, match=r"gpus\[b200\]\.sources\.deepep"):
        gpu_from_record("b200", rec)


def test_preset_records_hold_the_datasheet_facts() -> None:
    """By hand from NVIDIA's whitepapers / datasheets / CUDA programming guide."""
    g = gpu_records()
    want = {  # gpu: (compute capability, SMs)
        "h100-sxm": ("9.0", 132), "h800": ("9.0", 132), "h200-sxm": ("9.0", 132),
        "h20": ("9.0", 78), "b200": ("10.0", 148), "l40s": ("8.9", 142),
        "a100-80g": ("8.0", 108), "a10": ("8.6", 72),
    }  # fmt: skip
    for name, (cc, sms) in want.items():
        assert (g[name].compute_capability, g[name].sm_count) == (cc, sms), name
    assert g["ascend-910b"].compute_capability is None and not g["ascend-910b"].nccl


@pytest.mark.parametrize("cluster", cluster_names())
def test_every_preset_cluster_builds_its_device_from_the_record(cluster: str) -> None:
    c = load_cluster(cluster)
    d = device_for(c)
    assert d.sm_count == c.gpu.sm_count and d.reference == c.gpu.reference_tables
    assert d.flops_fp8 == pytest.approx(c.gpu.flops_bf16 * c.gpu.fp8_ratio)
    assert d.table == c.gpu.kernel_tables
