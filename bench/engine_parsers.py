"""Child of ``bench/check_exports.py``: run the pinned engines' own argument handling.

Run by the project's Python with ``PYTHONPATH`` = the scratch folder where the SGLang, vLLM and
sglang-router wheels were installed ``--no-deps``. Their imports that are not installed
(kernels, tokenizers' heavy deps, web servers) resolve to inert stand-ins, and CUDA is faked as
8 GPUs of the chosen compute capability (and one RDMA device, :data:`IB_DEVICE`), so that
exactly the engines' own code reads the arguments:

- SGLang: ``sglang.srt.server_args.prepare_server_args`` (``ServerArgs.add_cli_args``, then
  ``ServerArgs(...)`` and its ``__post_init__`` resolution and checks);
- vLLM: ``vllm serve``'s parser (``vllm.entrypoints.openai.cli_args.make_arg_parser``) and
  ``AsyncEngineArgs.from_cli_args``;
- sglang-router: ``sglang_router.launch_router.parse_router_args``;
- TensorRT-LLM: ``trtllm-serve``'s click command (``tensorrt_llm.commands.serve.serve``,
  parsed with ``make_context``) and its YAML through ``TorchLlmArgs`` where the wheel is
  installed, else :func:`trtllm_source_check` against the options and fields read from its
  source (``bench/data/trtllm_1.2_llm_api.json``: the 1.2.1 wheel is not on the package index,
  only a stub that downloads from NVIDIA's index).

Reads JSON lines ``{"id", "kind", "argv", "sm", "gpus"}`` on stdin, writes
``{"id", "ok", "error", "resolved"}`` lines on stdout (``resolved``: for SGLang and vLLM, the
values the launch files pin as the engine resolved them; else null).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import io
import json
import os
import sys
import traceback
import types
from contextlib import redirect_stderr, redirect_stdout


class _Any:
    """A stand-in for anything a missing module exports: callable, subclassable, indexable."""

    def __init__(self, *a, **k):
        pass

    def __call__(self, *a, **k):
        return _Any()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Any()

    def __getitem__(self, k):
        return _Any()

    def __iter__(self):
        return iter(())

    def __bool__(self):
        return False

    def __len__(self):
        return 0

    def __or__(self, other):
        return _Any()

    __ror__ = __or__

    def __mro_entries__(self, bases):
        return (object,)


class _Stub(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Any()


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec):
        m = _Stub(spec.name)
        m.__path__ = []
        return m

    def exec_module(self, module):
        pass


#: packages the engines import at module level that the ``--no-deps`` install leaves out
#: and that play no part in reading arguments (serialisation, kernels, web and RPC stacks)
STUBBED = frozenset(os.environ.get("MOEPLAN_STUBS", "").split(",")) - {""}


class _StubFinder(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path``: a :data:`STUBBED` module (or package) is a stand-in."""

    def find_spec(self, name, path, target=None):
        if not any(name == s or name.startswith(s + ".") for s in STUBBED):
            return None
        return importlib.machinery.ModuleSpec(name, _StubLoader(), is_package=True)


def fake_cuda(sm: int, gpus: int, mem_gib: int) -> None:
    import torch

    props = types.SimpleNamespace(
        major=sm // 10, minor=sm % 10, total_memory=mem_gib << 30, name="NVIDIA GPU",
        multi_processor_count=132,
    )  # fmt: skip
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: gpus
    torch.cuda.get_device_capability = lambda *a, **k: (sm // 10, sm % 10)
    torch.cuda.get_device_properties = lambda *a, **k: props
    torch.cuda.get_device_name = lambda *a, **k: "NVIDIA H100 80GB HBM3"
    torch.cuda.mem_get_info = lambda *a, **k: (mem_gib << 30, mem_gib << 30)
    torch.version.cuda = torch.version.cuda or "12.8"


#: the RDMA device the bench's launch folders name (MOEPLAN_IB_DEVICE) and the sysfs folder
#: SGLang 0.5.23 lists devices from before it accepts --disaggregation-ib-device
#: (arg_groups/validation_hook.py validate_ib_devices)
IB_DEVICE = "mlx5_0"
IB_SYSFS = "/sys/class/infiniband"


def fake_ib() -> None:
    """One RDMA device, :data:`IB_DEVICE`, in the sysfs folder SGLang reads."""
    isdir, listdir = os.path.isdir, os.listdir
    os.path.isdir = lambda p: p == IB_SYSFS or isdir(p)
    os.listdir = lambda p=".": [IB_DEVICE] if p == IB_SYSFS else listdir(p)


def _sglang(argv: list[str]) -> dict:
    from sglang.srt.server_args import prepare_server_args

    server_args = prepare_server_args(argv)
    server_args.resolve_once()  # what launch_server.run_server does before starting
    server_args.check_server_args()
    return _sglang_resolved(server_args)


def _sglang_resolved(server_args) -> dict:
    """The resolved values the launch files pin (bench/check_exports.py compares them with
    deployment.json), read from SGLang's resolved view of the arguments
    (arg_groups/model_override_base.py ``resolved_view``); the decode CUDA-graph batch is
    None where the decode graphs are disabled."""
    from sglang.srt.arg_groups.model_override_base import resolved_view
    from sglang.srt.runtime_context import attn_dp_enabled_of

    a = resolved_view(server_args)
    dec = a.cuda_graph_config.decode
    # with DP attention SGLang keeps each rank's chunk, the flag // attn_dp_size
    # (arg_groups/parallel_hook.py _handle_data_parallelism); deployment.json pins the
    # instance's, so the rank's is read back as the instance's
    chunk = a.chunked_prefill_size
    if chunk is not None and chunk > 0 and attn_dp_enabled_of(a):
        chunk *= a.attn_dp_size
    return {
        "mem_fraction": a.mem_fraction_static,
        "max_running_flag": a.max_running_requests,
        "chunk_tokens": chunk,
        "cuda_graph_max_bs": None if str(dec.backend) == "disabled" else dec.max_bs,
        "tbo": bool(a.enable_two_batch_overlap),
        "mtp": int(a.speculative_num_steps or 0),
        "redundant_experts": int(a.ep_num_redundant_experts or 0),
        "expert_location": a.init_expert_location,
        "ib_device": a.disaggregation_ib_device,
    }


def _vllm(argv: list[str]) -> dict:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.openai.cli_args import make_arg_parser

    try:
        from vllm.utils import FlexibleArgumentParser
    except ImportError:  # newer releases moved it
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    _vllm_cuda()
    parser = make_arg_parser(FlexibleArgumentParser())
    args = parser.parse_args(["--model", argv[0], *argv[1:]])
    e = AsyncEngineArgs.from_cli_args(args)
    return {  # the values the launch files pin, as vLLM's engine arguments hold them
        "mem_fraction": e.gpu_memory_utilization,
        "max_running_flag": e.max_num_seqs,
        "cuda_graph_max_bs": max(e.cuda_graph_sizes) if e.cuda_graph_sizes else None,
    }


def _vllm_cuda() -> None:
    """vLLM picks its platform by probing NVML; here it is told: CUDA."""
    import vllm.platforms as platforms

    if getattr(platforms, "_current_platform", None) is None or not getattr(
        platforms._current_platform, "device_type", ""
    ):
        from vllm.platforms.cuda import CudaPlatform

        platforms._current_platform = CudaPlatform()


def _router(argv: list[str]) -> None:
    from sglang_router.launch_router import parse_router_args

    parse_router_args(argv)


#: the TensorRT-LLM 1.2 argument facts read from its source (see the file's "source")
TRTLLM_FACTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data",
                            "trtllm_1.2_llm_api.json")  # fmt: skip


def _trtllm(argv: list[str]) -> None:
    """``trtllm-serve``'s own click command and ``TorchLlmArgs`` where ``tensorrt_llm`` is
    installed, else :func:`trtllm_source_check` (the facts read from its source)."""
    try:
        from tensorrt_llm.commands.serve import serve
        from tensorrt_llm.llmapi.llm_args import TorchLlmArgs, update_llm_args_with_extra_dict
    except ImportError:
        trtllm_source_check(argv)
        return
    import yaml

    ctx = serve.make_context("trtllm-serve", list(argv))
    p = ctx.params
    with open(p["extra_llm_api_options"]) as f:
        extra = yaml.safe_load(f) or {}
    base = TorchLlmArgs(model=p["model"], tensor_parallel_size=p["tensor_parallel_size"],
                        pipeline_parallel_size=p["pipeline_parallel_size"],
                        moe_expert_parallel_size=p["moe_expert_parallel_size"],
                        max_batch_size=p["max_batch_size"], max_num_tokens=p["max_num_tokens"],
                        gpus_per_node=8).model_dump()  # fmt: skip
    TorchLlmArgs(**update_llm_args_with_extra_dict(base, extra))


def trtllm_source_check(argv: list[str], facts_path: str = TRTLLM_FACTS) -> None:
    """``trtllm-serve`` arguments and their ``--extra_llm_api_options`` YAML against the
    click options and LLM API fields read from TensorRT-LLM's source (raises ValueError):
    every flag an option of ``serve`` with a value of its type, every YAML key a field of
    its class (``StrictBaseModel``: unknown keys are refused), the MoE backend one of its
    choices, and the parallel sizes a valid ``Mapping`` (``moe_tp x moe_ep = tp_size``)."""
    import yaml

    with open(facts_path) as f:
        facts = json.load(f)
    opts = facts["serve_options"]
    if not argv or argv[0].startswith("--"):
        raise ValueError("trtllm-serve: the MODEL argument is missing")
    got: dict[str, str] = {}
    i = 1
    while i < len(argv):
        flag = argv[i]
        kind = opts.get(flag)
        if kind is None:
            raise ValueError(f"trtllm-serve: no such option: {flag}")
        if kind == "flag":
            got[flag], i = "", i + 1
            continue
        if i + 1 >= len(argv):
            raise ValueError(f"trtllm-serve: option {flag} requires an argument")
        value = argv[i + 1]
        if isinstance(kind, list) and value not in kind:
            raise ValueError(f"trtllm-serve: {flag} {value!r} is not one of {kind}")
        if kind in ("int", "float"):
            int(value) if kind == "int" else float(value)
        got[flag], i = value, i + 2
    tp = int(got.get("--tp_size", got.get("--tensor_parallel_size", 1)))
    ep = int(got.get("--ep_size", got.get("--moe_expert_parallel_size", 1)))
    frac = float(got.get("--kv_cache_free_gpu_memory_fraction",
                         got.get("--free_gpu_memory_fraction", 0.9)))  # fmt: skip
    if not 0 <= frac <= 1:  # KvCacheConfig.free_gpu_memory_fraction: ge=0, le=1
        raise ValueError(f"free_gpu_memory_fraction ({frac}) must be in [0, 1]")
    path = got.get("--extra_llm_api_options", got.get("--config"))
    extra = {}
    if path is not None:
        with open(path) as f:
            extra = yaml.safe_load(f) or {}
    _fields(extra, facts["TorchLlmArgs"], "TorchLlmArgs")
    _fields(extra.get("kv_cache_config", {}), facts["KvCacheConfig"], "KvCacheConfig")
    moe = extra.get("moe_config", {})
    _fields(moe, facts["MoeConfig"], "MoeConfig")
    if "backend" in moe and moe["backend"] not in facts["MoeConfig.backend"]:
        raise ValueError(f"moe_config.backend ({moe['backend']!r}) is not a MoeConfig choice")
    lb = moe.get("load_balancer") or {}
    _fields(lb, facts["MoeLoadBalancerConfig"], "MoeLoadBalancerConfig")
    if "num_slots" in lb and lb["num_slots"] % ep:  # MoeLoadBalancerConfig.setup
        raise ValueError(f"num_slots ({lb['num_slots']}) must be divisible by ep_size ({ep})")
    spec = extra.get("speculative_config")
    if spec is not None:
        if spec.get("decoding_type") != "MTP":
            raise ValueError(f"speculative_config: decoding_type {spec.get('decoding_type')!r}")
        _fields(spec, facts["MTPDecodingConfig"], "MTPDecodingConfig")
        if int(spec.get("num_nextn_predict_layers", 1)) < 1:  # PositiveInt
            raise ValueError("num_nextn_predict_layers must be positive")
    for key in ("enable_attention_dp", "enable_chunked_prefill"):
        if not isinstance(extra.get(key, False), bool):
            raise ValueError(f"{key} ({extra[key]!r}) must be a boolean")
    moe_tp = int(extra.get("moe_tensor_parallel_size", tp // max(1, ep)))
    if moe_tp * ep != tp:  # Mapping: moe_tp_size * moe_ep_size * moe_cluster_size == tp_size
        raise ValueError(f"moe_tp ({moe_tp}) x moe_ep ({ep}) must equal tp_size ({tp})")


def _fields(d: dict, fields: list[str], cls: str) -> None:
    unknown = sorted(set(d) - set(fields))
    if unknown:
        raise ValueError(f"{cls}: extra inputs are not permitted: {unknown}")


CHECKS = {"sglang": _sglang, "vllm": _vllm, "router": _router, "trtllm": _trtllm}


def main() -> None:
    import torch  # noqa: F401 (real, before any stand-in exists)
    import torch._dynamo  # noqa: F401 (loaded before the triton stand-in: torch probes it)
    import torch._functorch.aot_autograd  # noqa: F401
    import torch._inductor.compile_fx  # noqa: F401

    sys.meta_path.insert(0, _StubFinder())
    fake_ib()
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", ",".join(map(str, range(8))))
    done_sm = None
    for line in sys.stdin:
        job = json.loads(line)
        if (job["sm"], job.get("mem_gib")) != done_sm:
            fake_cuda(job["sm"], job["gpus"], job.get("mem_gib", 80))
            done_sm = (job["sm"], job.get("mem_gib"))
        sink = io.StringIO()
        try:
            with redirect_stdout(sink), redirect_stderr(sink):
                resolved = CHECKS[job["kind"]](job["argv"])
            out = {"id": job["id"], "ok": True, "error": "", "resolved": resolved}
        except BaseException as err:  # SystemExit from argparse included
            tb = traceback.extract_tb(err.__traceback__)[-int(os.environ.get("MOEPLAN_TB", 2)) :]
            where = " <- ".join(f"{f.filename.split('site-packages/')[-1]}:{f.lineno}" for f in tb)
            tail = traceback.format_exception_only(type(err), err)[-1].strip() + f" at {where}"
            out = {"id": job["id"], "ok": False, "error": f"{tail} | {sink.getvalue()[-400:]}"}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
