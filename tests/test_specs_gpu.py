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


def test_blackwell_records_equal_nvidias_figures() -> None:
    """By hand from NVIDIA's own figures: shared/data/measured/{b200_sxm,gb200}/system.yaml
    (GB200: mem_capacity 189,471 MiB as nvidia-smi reports it, 8 TB/s, 2.5 PF bf16, 5 PF fp8,
    10 PF fp4, sm_version 100; B200: 180 GiB, 7.7 TB/s, 2.25 / 4.5 / 9 PF) and the HGX B300 /
    GB300 NVL72 datasheets (dense rates: half the sparse ones; FP4 dense as stated)."""
    g = gpu_records()
    gb = g["gb200"]
    approx = pytest.approx  # datasheet products of floats read from JSON
    assert gb.mem_bytes == 189_471 * 2**20
    assert (gb.mem_bw, gb.flops_bf16) == (approx(8e12), approx(2.5e15))
    assert gb.flops_bf16 * gb.fp8_ratio == approx(5e15)
    assert gb.flops_bf16 * gb.fp4_ratio == approx(10e15)
    b = g["b200"]
    assert b.mem_bytes == 180 * 2**30 and b.mem_bw == approx(7.7e12)
    assert b.flops_bf16 * b.fp8_ratio == approx(4.5e15)
    assert b.flops_bf16 * b.fp4_ratio == approx(9e15)
    assert g["b300"].flops_bf16 * g["b300"].fp4_ratio == approx(108e15 / 8)  # HGX B300
    assert g["gb300"].flops_bf16 * g["gb300"].fp4_ratio == approx(1080e15 / 72)  # GB300 NVL72
    sm = {n: g[n].sm_version for n in ("b200", "gb200", "b300", "gb300")}
    assert sm == {"b200": 100, "gb200": 100, "b300": 103, "gb300": 103}
    assert (b.kernel_tables, gb.kernel_tables) == ("b200_sxm", "gb200")


def test_fp4_tensor_cores_exactly_on_blackwell() -> None:
    """FP4 tensor cores arrive with Blackwell (SM100+): every record says so through its
    ``fp4_ratio``, which the quantisation code reads as ``fp4_tensor_cores``."""
    for name, gpu in gpu_records().items():
        blackwell = gpu.sm_version is not None and gpu.sm_version >= 100
        assert gpu.fp4_tensor_cores == blackwell, name
