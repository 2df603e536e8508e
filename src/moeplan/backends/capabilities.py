"""Capability tables: what one engine release runs, per architecture family, GPU and
quantisation, each fact with the engine source it was read from.

A table (:class:`CapabilityTable`) holds one :class:`Release` per engine version read; a
release maps every architecture moeplan reads (``architectures[0]``,
:mod:`moeplan.specs.architectures`) to its :class:`Family` facts:

- ``deepep``: the model's MoE block has a DeepEP path (SGLang ``--moe-a2a-backend deepep``,
  vLLM ``deepep_high_throughput`` / ``deepep_low_latency``);
- ``attn_dp``: its attention splits heads by the attention-TP size (attention DP runs);
- ``tbo``: two-batch overlap has an operation split for its decoder layer;
- ``mtp``: the engine loads the model's own MTP / NextN layers as the speculative draft.

Facts that are rules over the GPU and the checkpoint rather than the family live on the
release too: the MoE weight dtypes DeepEP's grouped GEMM runs (``deepep_moe_dtypes``), those
it runs under DeepEP's low-latency dispatch only, the decode phase (``deepep_ll_runners``), the
MoE kernels a GPU lacks (``moe_kernel_floor``: the lowest compute capability with a kernel
for a dtype, else refused), how NVFP4 MoE runs with and without FP4 tensor cores
(:class:`Nvfp4Moe`), the running cap under speculative decoding and the KV dtype
``--kv-cache-dtype auto`` resolves to.

Versions: a table states the releases it read; any other version takes the nearest stated
release at or below it (else the oldest stated) and says so (:meth:`CapabilityTable.release`).
A family a release does not list is a capability it lacks, with the release's registry as
the reason. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from moeplan.errors import MoeplanError

#: the families' fields, in display order (:class:`Family`)
CAPABILITIES = ("deepep", "attn_dp", "tbo", "mtp")
CAPABILITY_LABELS = {
    "deepep": "DeepEP MoE path",
    "attn_dp": "attention DP",
    "tbo": "two-batch overlap",
    "mtp": "MTP/NextN draft",
}


@dataclass(frozen=True, slots=True)
class Fact:
    """One capability: whether it holds and where the engine source says so."""

    ok: bool
    source: str


@dataclass(frozen=True, slots=True)
class Family:
    """The capabilities of one architecture family in one release (module docstring)."""

    deepep: Fact
    attn_dp: Fact
    tbo: Fact
    mtp: Fact


@dataclass(frozen=True, slots=True)
class KvDefault:
    """What ``--kv-cache-dtype auto`` stores: ``fp8`` where the checkpoint states an FP8 KV
    cache and the release honours it (``checkpoint_fp8``), for the architectures in
    ``fp8_from_sm`` on GPUs of at least that compute capability, else the model's dtype."""

    checkpoint_fp8: bool
    source: str
    fp8_from_sm: Mapping[str, int] = field(default_factory=dict)
    fp8_from_sm_source: str = ""


@dataclass(frozen=True, slots=True)
class Nvfp4Moe:
    """How a release runs NVFP4 routed experts: ``runner``, the MoE runner it picks on a GPU
    with FP4 tensor cores (``runner_flags``: the launch flags that pin it, empty when it is
    the default), and below that ``fallback``: the kernel tables' ``moe_dtype`` its
    weight-only fallback is priced as (4-bit weights dequantized into bf16: Marlin), or
    ``None`` when the release has none (refused); ``dispatch_phases``: the phases
    (``context`` / ``generation``) whose expert-parallel dispatch carries the experts'
    NVFP4-quantized activations instead of fp8 (``dispatch_source``: where, and under which
    launch setting; ``dispatch_env``: that setting). Each with the engine source."""

    runner: str
    runner_source: str
    fallback: str | None
    fallback_source: str
    dispatch_phases: tuple[str, ...] = ()
    dispatch_source: str = ""
    #: the environment that turns that dispatch on (empty: on by default)
    dispatch_env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Release:
    """Everything one engine version's source says that moeplan reads (module docstring)."""

    version: str
    families: Mapping[str, Family]
    registry: str
    kv_default: KvDefault
    #: MoE weight dtypes (kernel tables' ``moe_dtype``) DeepEP's MoE runs, and the source
    deepep_moe_dtypes: frozenset[str] = frozenset()
    deepep_moe_source: str = ""
    #: MoE weight dtypes DeepEP runs under its low-latency dispatch only (decode; prefill's
    #: normal dispatch has no handler for them), each with the ``--moe-runner-backend`` that
    #: runs it, and the source
    deepep_ll_runners: Mapping[str, str] = field(default_factory=dict)
    deepep_ll_source: str = ""
    #: the running-request cap of the instance under speculative decoding (None: none)
    spec_running_cap: int | None = None
    spec_running_source: str = ""
    #: ``moe_dtype`` -> (lowest compute capability with a kernel moeplan can price, source)
    moe_kernel_floor: Mapping[str, tuple[int, str]] = field(default_factory=dict)
    #: NVFP4 routed experts with and without FP4 tensor cores (None: not read)
    nvfp4_moe: Nvfp4Moe | None = None


@dataclass(frozen=True, slots=True)
class CapabilityTable:
    """One engine's releases, oldest first (module docstring)."""

    engine: str
    label: str
    releases: tuple[Release, ...]

    def release(self, version: str | None) -> tuple[Release, str]:
        """The release stating ``version``'s facts and a note when it is inherited
        (``""``: stated). ``None``: the newest stated release."""
        if not self.releases:
            raise MoeplanError(f"{self.label} has no capability table read from its source")
        if version is None:
            return self.releases[-1], ""
        key = version_key(version)
        older = [r for r in self.releases if version_key(r.version) <= key]
        r = older[-1] if older else self.releases[0]
        if r.version == version:
            return r, ""
        return r, f"{self.label} {version} inherits the capabilities read from {r.version}"

    def family(self, architecture: str, version: str | None) -> tuple[Family | None, Release]:
        """``architecture``'s facts in ``version`` (None: the release has no model class)."""
        r, _ = self.release(version)
        return r.families.get(architecture), r

    def blocker(self, capability: str, architecture: str, version: str | None) -> str | None:
        """Why ``version`` cannot run ``capability`` (:data:`CAPABILITIES`) for
        ``architecture``, naming the source (None: it can)."""
        fam, r = self.family(architecture, version)
        what = CAPABILITY_LABELS[capability]
        name = self.named(r, version)
        if fam is None:
            return f"{name} has no model class for {architecture} ({r.registry}), so no {what}"
        fact: Fact = getattr(fam, capability)
        if fact.ok:
            return None
        return f"{name} has no {what} for {architecture} ({fact.source})"

    def named(self, release: Release, version: str | None) -> str:
        """How a message names ``version`` answered by ``release``: ``SGLang 0.5.4.post2 (as
        0.5.3, the nearest release read)`` when inherited."""
        if version is None or version == release.version:
            return f"{self.label} {release.version}"
        return f"{self.label} {version} (as {release.version}, the nearest release read)"


VERSION_PARTS = 6  # major.minor.patch, rc/post marker, its number: padded for comparison


def version_key(version: str) -> tuple[int, ...]:
    """A sortable key of a release string (``0.5.5.post1`` after ``0.5.5``, ``1.3.0rc20``
    before ``1.3.0``)."""
    out = [
        int(p) if p.lstrip("-").isdigit() else 0
        for p in version.replace("rc", ".-1.").replace("post", ".").split(".")
    ]
    return tuple(out + [0] * (VERSION_PARTS - len(out)))


def family(
    deepep: tuple[bool, str],
    attn_dp: tuple[bool, str],
    tbo: tuple[bool, str],
    mtp: tuple[bool, str],
) -> Family:
    """A :class:`Family` from ``(ok, source)`` pairs."""
    return Family(Fact(*deepep), Fact(*attn_dp), Fact(*tbo), Fact(*mtp))
