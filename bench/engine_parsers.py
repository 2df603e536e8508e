"""Child of ``bench/check_exports.py``: run the pinned engines' own argument handling.

Run by the project's Python with ``PYTHONPATH`` = the scratch folder where the SGLang, vLLM and
sglang-router wheels were installed ``--no-deps``. Their imports that are not installed
(kernels, tokenizers' heavy deps, web servers) resolve to inert stand-ins, and CUDA is faked as
8 GPUs of the chosen compute capability, so that exactly the engines' own code reads the
arguments:

- SGLang: ``sglang.srt.server_args.prepare_server_args`` (``ServerArgs.add_cli_args``, then
  ``ServerArgs(...)`` and its ``__post_init__`` resolution and checks);
- vLLM: ``vllm serve``'s parser (``vllm.entrypoints.openai.cli_args.make_arg_parser``) and
  ``AsyncEngineArgs.from_cli_args``;
- sglang-router: ``sglang_router.launch_router.parse_router_args``.

Reads JSON lines ``{"id", "kind", "argv", "sm", "gpus"}`` on stdin, writes
``{"id", "ok", "error"}`` lines on stdout.
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


def _sglang(argv: list[str]) -> None:
    from sglang.srt.server_args import prepare_server_args

    server_args = prepare_server_args(argv)
    server_args.resolve_once()  # what launch_server.run_server does before starting
    server_args.check_server_args()


def _vllm(argv: list[str]) -> None:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.openai.cli_args import make_arg_parser

    try:
        from vllm.utils import FlexibleArgumentParser
    except ImportError:  # newer releases moved it
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    _vllm_cuda()
    parser = make_arg_parser(FlexibleArgumentParser())
    args = parser.parse_args(["--model", argv[0], *argv[1:]])
    AsyncEngineArgs.from_cli_args(args)


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


CHECKS = {"sglang": _sglang, "vllm": _vllm, "router": _router}


def main() -> None:
    import torch  # noqa: F401 (real, before any stand-in exists)
    import torch._dynamo  # noqa: F401 (loaded before the triton stand-in: torch probes it)
    import torch._functorch.aot_autograd  # noqa: F401
    import torch._inductor.compile_fx  # noqa: F401

    sys.meta_path.insert(0, _StubFinder())
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
                CHECKS[job["kind"]](job["argv"])
            out = {"id": job["id"], "ok": True, "error": ""}
        except BaseException as err:  # SystemExit from argparse included
            tb = traceback.extract_tb(err.__traceback__)[-int(os.environ.get("MOEPLAN_TB", 2)) :]
            where = " <- ".join(f"{f.filename.split('site-packages/')[-1]}:{f.lineno}" for f in tb)
            tail = traceback.format_exception_only(type(err), err)[-1].strip() + f" at {where}"
            out = {"id": job["id"], "ok": False, "error": f"{tail} | {sink.getvalue()[-400:]}"}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
