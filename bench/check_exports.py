"""Every launch file of the preset winners, read by the pinned engines' own code.

1. A scratch virtual environment outside the repository (``--venv``, default
   ``~/.cache/moeplan/engines``) gets the pinned wheels ``--no-deps`` (SGLang, vLLM,
   sglang-router; not moeplan dependencies) and the few light pure packages their argument
   modules import at load time (:data:`LIGHT`); GPU kernels and web stacks are stand-ins
   (:data:`STUBS`, see ``bench/engine_parsers.py``).
2. Launch folders: for every preset model on every preset cluster it fits, the analytic
   winner of the colocated family (what ``tests/test_launchable_presets.py`` plans) written by
   :func:`moeplan.export.plan_export.engine_export`; and for each ``--serving MODEL:CLUSTER``
   pair, ``moeplan plan``'s own ``launch/`` folder (serving ranking included: replicas, P/D).
3. Each ``launch.sh`` runs once per node rank with recording stand-ins for ``python``,
   ``vllm``, ``trtllm-serve``, ``ray`` and ``curl`` (nothing starts); every recorded server and
   router command, every container command of ``launch/k8s/<engine>.yaml`` (each
   LeaderWorkerSet worker rank written in) and every Dynamo worker of
   ``launch/k8s/<engine>-dynamo.yaml`` goes to the engine's own argument handling (CUDA
   faked as one node's GPUs of the cluster's compute capability: a rack's tray of 4, a
   server's 8; TensorRT-LLM's YAML beside the script is read too; Dynamo's TensorRT-LLM worker
   as the ``trtllm-serve`` command of the same LLM API arguments, by Dynamo's source:
   :func:`dynamo_trtllm_serve`). Five deliberately wrong commands must fail (controls).
4. Each server command's values as SGLang / vLLM resolve them (memory fraction, running cap,
   decode CUDA-graph batch, chunk, TBO, MTP, redundant experts, placement file) must equal
   what ``deployment.json`` says the command pins (:func:`pinned_differences`).

Prints the count that pass per engine, the pinned values that differ, and ``PASS n/N``. Usage::

    python bench/check_exports.py [--venv DIR] [--serving mixtral-8x7b:a100-sxm-8 ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PINNED = ["sglang==0.5.23", "vllm==0.11.0", "sglang-router==0.3.2"]
LIGHT = [  # pure / small packages the engines' argument modules import at load time
    "orjson", "psutil", "pybase64", "requests", "msgspec", "setproctitle", "cachetools",
    "starlette", "fastapi", "pyzmq", "aiohttp", "uvloop", "pydantic", "pydantic-core",
    "typing-inspection", "annotated-types", "cloudpickle", "blake3", "partial-json-parser",
    "prometheus-client", "urllib3", "multidict", "attrs", "yarl", "cbor2", "idna",
    "charset-normalizer", "certifi", "propcache", "aiohappyeyeballs", "aiosignal", "frozenlist",
    "openai", "openai-harmony", "jiter", "httpx", "anyio", "distro", "sniffio", "httpcore",
    "h11", "dill",
]  # fmt: skip
MAX_NODES = 1024  # node addresses given to every recorded launch.sh run
IB_DEVICE = "mlx5_0"  # MOEPLAN_IB_DEVICE of the runs: the device engine_parsers.py fakes
STUBS = (  # GPU kernels, compilers and optional front ends: never reached by argument handling
    "triton,IPython,uvicorn,opentelemetry,vllm._C,vllm._moe_C,torchvision,tvm_ffi,"
    "sentencepiece,pynvml,compressed_tensors,sgl_kernel,gguf"
)
ENGINES = ("sglang", "vllm", "trtllm")
RECORDER = (
    '#!/bin/sh\n{ printf "%s\\0" "$(basename "$0")" "$@"; printf "<end>\\0"; } >> "$ARGV_LOG"\n'
)
CONTROLS = [  # must fail: attention DP not dividing TP; an unknown flag; an unknown policy
    ("sglang", ["--model-path", "MODEL", "--tp-size", "8", "--attn-dp-size", "3"]),
    ("vllm", ["m", "--tensor-parallel-size", "2", "--no-such-flag"]),
    ("router", ["--worker-urls", "http://a:1", "--policy", "no_such_policy"]),
    ("trtllm", ["MODEL", "--tp_size", "8", "--no_such_flag", "1"]),
]


def ensure_venv(venv: Path) -> Path:
    """The scratch venv's site-packages, installing the pinned wheels there when missing."""
    if not (venv / "bin" / "pip").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    site = next(venv.glob("lib/python3*/site-packages"))
    if not (site / "sglang").is_dir():
        pip = [str(venv / "bin" / "pip"), "install", "-q", "--no-deps"]
        subprocess.run([*pip, *PINNED, *LIGHT], check=True)
    # transformers asks the stand-in torchvision for its installed version
    meta = site / "torchvision-0.0.0.dist-info"
    meta.mkdir(exist_ok=True)
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: torchvision\nVersion: 0.0.0\n")
    return site


def model_folder(name: str, out: Path) -> Path:
    """A local model folder holding the preset's ``config.json`` (what SGLang's resolution
    reads; no weights are needed to resolve the arguments). The folder ships no remote code,
    so the config's ``auto_map`` (naming the checkpoint's own ``configuration_*.py``, which
    ``--trust-remote-code`` would import) is left out: transformers resolves its own class
    of the ``model_type``, as for a checkpoint without code files."""
    from moeplan.specs.presets import model_config

    folder = out / "models" / name
    if not folder.is_dir():
        folder.mkdir(parents=True)
        cfg = {k: v for k, v in model_config(name).items() if k != "auto_map"}
        (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def analytic_folders(out: Path) -> list[tuple[str, str, Path, int, float, int]]:
    """``(model, cluster, launch folder, sm, GPU memory, GPUs per node)`` of every preset
    pair's colocated winner."""
    sys.path.insert(0, str(REPO / "src"))
    from moeplan.cost import cost_model_for
    from moeplan.errors import MoeplanError
    from moeplan.planners.rank import plan
    from moeplan.report.plan_report import launch_exports, write_launch_folder
    from moeplan.specs import Workload, cluster_names, load_cluster, load_model, model_names

    w = Workload(phase="both", batch=32, isl=2048, osl=256)
    rows = []
    for mn in model_names():
        for cn in cluster_names():
            m, c = load_model(mn), load_cluster(cn)
            try:
                r = plan(m, c, w, cost_model_for(c, None), families=("strategy",))
            except MoeplanError:
                continue
            path = str(model_folder(mn, out))
            ex = launch_exports(r, r.winner.plan, model_path=path, full_layers=m.num_layers)
            out.mkdir(parents=True, exist_ok=True)
            folder = write_launch_folder(out / f"{mn}@{cn}", ex, None)
            rows.append((mn, cn, folder, c.gpu.sm_version or 90, c.gpu.mem_bytes, c.gpus_per_node))
    return rows


def serving_folders(pairs: list[str], out: Path) -> list[tuple[str, str, Path, int, float, int]]:
    """``moeplan plan``'s own launch folders (serving ranking included)."""
    from moeplan.specs import load_cluster

    rows = []
    out.mkdir(parents=True, exist_ok=True)
    for pair in pairs:
        mn, cn = pair.split(":")
        dst = out / f"plan-{mn}@{cn}"
        env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
        path = str(model_folder(mn, out))
        subprocess.run([sys.executable, "-m", "moeplan", "plan", "--model", mn, "--cluster", cn,
                        "--model-path", path, "--out", str(dst), "--quiet", "--requests", "300"],
                       check=True, env=env, capture_output=True)  # fmt: skip
        cl = load_cluster(cn)
        g = cl.gpu
        rows.append((mn, cn, dst / "launch", g.sm_version or 90, g.mem_bytes, cl.gpus_per_node))
    return rows


def rack_folder(out: Path) -> list[tuple[str, str, Path, int, float, int]]:
    """SGLang's GB200 NVL72 deployment of DeepSeek-V3 (LMSYS blog, GB200 NVL72 part II:
    prefill instances of 4 ranks, one decode instance of 48 ranks with 32 redundant experts)
    as a P/D launch folder on one ``gb200-nvl72`` rack: 3 prefill servers on a tray each,
    the decode server over 12 trays of 4 GPUs with the MNNVL environment. Its serving
    figures are a stand-in (the folder's commands are what is checked, not its ranking)."""
    from types import SimpleNamespace

    from moeplan.export import constraints as cons
    from moeplan.export.plan_export import ExportContext, engine_export, serving_options
    from moeplan.planners.layout import Layout
    from moeplan.report.plan_report import write_launch_folder
    from moeplan.search.ranking.entries import Entry
    from moeplan.serve.deployment import PDLayout
    from moeplan.specs import load_cluster, load_model

    mn, cn = "deepseek-v3", "gb200-nvl72"
    m, c = load_model(mn), load_cluster(cn)
    pd = PDLayout(
        prefill=Layout(attn_dp=4, moe_ep=4),
        decode=Layout(attn_dp=48, moe_ep=48, redundant_experts=32),
        x=3,
        y=1,
    )
    served = SimpleNamespace(
        entry=Entry(family="pd", label=pd.label, layout=pd, plan=None),
        metrics=SimpleNamespace(output_tokens_per_s_per_gpu=1.0),
        result=SimpleNamespace(knobs=None, engine=None, setup=None),
    )
    (opt,) = serving_options(SimpleNamespace(ranked=[served]))
    ctx = ExportContext(
        model_path=str(model_folder(mn, out)), target=cons.Target.of(m, c),
        planned_layers=m.num_layers, full_layers=m.num_layers,
    )  # fmt: skip
    res = SimpleNamespace(model=m, cluster=c)
    ex = {e: engine_export(e, res, ctx, [opt]) for e in ("sglang", "vllm")}
    out.mkdir(parents=True, exist_ok=True)
    folder = write_launch_folder(out / f"rack-{mn}@{cn}", ex, None)
    return [(mn, cn, folder, c.gpu.sm_version or 100, c.gpu.mem_bytes, c.gpus_per_node)]


def recorded(script: Path, nodes: int, work: Path) -> list[list[str]]:
    """Every command ``script`` runs on every node rank (stand-in executables record them)."""
    bin_dir = work / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for exe in ("python", "python3", "vllm", "ray", "curl", "trtllm-serve", "mpirun"):
        (bin_dir / exe).write_text(RECORDER)
        (bin_dir / exe).chmod(0o755)
    cmds: list[list[str]] = []
    for rank in range(nodes):
        log = work / f"argv{rank}"
        log.unlink(missing_ok=True)  # the stand-ins append: a log is one run's commands
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "ARGV_LOG": str(log), "NODE_RANK": str(rank),
               "MOEPLAN_IB_DEVICE": IB_DEVICE}  # fmt: skip
        # a script asks for every node of its cluster (a rack's 18 trays), used or not
        env |= {f"NODE_{r}_ADDR": f"10.0.{r // 250}.{r % 250 + 1}" for r in range(MAX_NODES)}
        subprocess.run(["bash", str(script)], env=env, capture_output=True, timeout=120)
        cur: list[str] = []
        for item in log.read_bytes().split(b"\0")[:-1] if log.exists() else []:
            if item == b"<end>":
                cmds.append(cur)
                cur = []
            else:
                cur.append(item.decode())
    return cmds


def k8s_commands(folder: Path, engine: str) -> list[list[str]]:
    """Every container command of ``launch/k8s/<engine>.yaml``, with what the cluster
    supplies written in: each worker's ``LWS_WORKER_INDEX`` (1 .. size - 1), the leader's
    address, the files' ConfigMap mounted at the launch folder, the RDMA device, and ``$$``
    read as ``$`` (Kubernetes' escape)."""
    import yaml

    from moeplan.export.k8s import MOUNT

    path = folder / "k8s" / f"{engine}.yaml"
    if not path.exists():
        return []
    out = []
    for o in yaml.safe_load_all(path.read_text()):
        if not o or o["kind"] not in ("Deployment", "LeaderWorkerSet"):
            continue
        if o["kind"] == "Deployment":
            pods = [(o["spec"]["template"]["spec"], [0])]
        else:
            t = o["spec"]["leaderWorkerTemplate"]
            pods = [(t["leaderTemplate"]["spec"], [0]),
                    (t["workerTemplate"]["spec"], list(range(1, t["size"])))]  # fmt: skip
        for pod, ranks in pods:
            for c in pod["containers"]:
                for r in ranks:
                    sub = {"$(LWS_WORKER_INDEX)": str(r), "$(LWS_LEADER_ADDRESS)": "10.0.0.1",
                           "$(MOEPLAN_IB_DEVICE)": IB_DEVICE, MOUNT: str(folder / engine)}  # fmt: skip
                    argv = []
                    for a in c["command"] + c["args"]:
                        for k, v in sub.items():
                            a = a.replace(k, v)
                        argv.append(a.replace("$$(", "$("))
                    out.append(argv)
    return out


#: Dynamo's worker module -> the engine command whose arguments it takes (TensorRT-LLM's
#: worker has flags of its own: :func:`dynamo_trtllm_serve` writes them as trtllm-serve's)
DYNAMO_WORKERS = {"dynamo.sglang": ["python", "-m", "sglang.launch_server"],
                  "dynamo.vllm": ["vllm", "serve"], "dynamo.trtllm": ["trtllm-serve"]}  # fmt: skip
#: Dynamo's TensorRT-LLM worker as read from its source (its SOURCE.md): the flags of its
#: parser and the LLM API argument each sets
DYNAMO_TRTLLM = REPO / "tests" / "data" / "k8s_schemas" / "dynamo_trtllm_args.json"


def dynamo_trtllm_serve(args: list[str]) -> list[str]:
    """Dynamo's TensorRT-LLM worker arguments as the ``trtllm-serve`` command setting the
    same LLM API arguments, by Dynamo's source (:data:`DYNAMO_TRTLLM`), not moeplan's
    mapping: each flag through the argument it sets in Dynamo's ``arg_map`` to the serve
    option of that name (serve.py names its click options after them; the KV pool's
    ``free_gpu_memory_fraction`` is ``--free_gpu_memory_fraction``), the model first, the
    YAML as ``--extra_llm_api_options``, the ``--override-engine-args`` object's ``true``
    values as switches, and the backend Dynamo sets. A flag Dynamo's parser lacks becomes
    an option no parser has, so the check fails."""
    d = json.loads(DYNAMO_TRTLLM.read_text())
    model, out = "", []
    i = 0
    while i < len(args):
        flag = args[i]
        if d["flags"].get(flag) in (None, "flag") or i + 1 >= len(args):
            out.append(f"--not-a-dynamo-trtllm-flag{flag}")
            i += 1
            continue
        value = args[i + 1]
        if flag == d["extra_engine_args"]:
            out += ["--extra_llm_api_options", value]
        elif flag == d["override_engine_args"]:
            for k, v in json.loads(value).items():
                out.append(f"--{k}" if v is True else f"--not-a-switch-{k}")
        elif d["sets"].get(flag) == "model":
            model = value
        elif flag in d["sets"]:
            out += [f"--{d['sets'][flag].split('.')[-1]}", value]
        else:  # a Dynamo setting outside the LLM API
            out.append(f"--dynamo-only{flag}")
        i += 2
    return ["trtllm-serve", model, *out, "--backend", d["fixed"]["backend"]]


def dynamo_commands(folder: Path, engine: str) -> list[list[str]]:
    """The workers of ``launch/k8s/<engine>-dynamo.yaml`` as engine commands (Dynamo's vLLM
    worker takes the model as ``--model``, ``vllm serve`` as its first argument; TensorRT-LLM's
    through :func:`dynamo_trtllm_serve`)."""
    import yaml

    from moeplan.export.k8s import MOUNT

    path = folder / "k8s" / f"{engine}-dynamo.yaml"
    if not path.exists():
        return []
    out = []
    for o in yaml.safe_load_all(path.read_text()):
        for svc in (o or {}).get("spec", {}).get("services", {}).values():
            c = svc["extraPodSpec"]["mainContainer"]
            head = DYNAMO_WORKERS.get(c["command"][-1])
            if head is None:  # the frontend
                continue
            args = [a.replace("$(MOEPLAN_IB_DEVICE)", IB_DEVICE).replace(MOUNT, str(folder / engine))
                    .replace("$$(", "$(") for a in c["args"]]  # fmt: skip
            if head == ["trtllm-serve"]:
                out.append(dynamo_trtllm_serve(args))
                continue
            if args[:1] == ["--model"]:
                args = args[1:]
            out.append([*head, *args])
    return out


def pinned_differences(resolved: dict, pinned: dict) -> list[str]:
    """Where an engine's resolution of a server command differs from what deployment.json
    says the command pins (keys both state; a pinned None is the engine's default)."""
    out = []
    for k, want in pinned.items():
        if want is None or k not in resolved:
            continue
        got = resolved[k]
        if k == "expert_location":
            same = str(got).endswith("expert_location.json")
        elif isinstance(want, float):
            same = got is not None and abs(float(got) - want) < 1e-9
        else:
            same = got == want
        if not same:
            out.append(f"{k}: engine {got!r}, deployment.json {want!r}")
    return out


def jobs_of(cmds: list[list[str]], sm: int, mem: float, gpn: int) -> list[dict]:
    """The engine-parser jobs of the recorded commands (CUDA faked as the cluster's GPU,
    ``gpn`` of them per node: a rack's tray of 4, a server's 8)."""
    gpu = {"sm": sm, "gpus": gpn, "mem_gib": int(mem) >> 30}
    out = []
    for c in cmds:
        port = c[c.index("--port") + 1] if "--port" in c[:-1] else None
        gpu = {**gpu, "port": port}
        if c[:3] == ["python", "-m", "sglang.launch_server"]:
            out.append({"kind": "sglang", "argv": c[3:], **gpu})
        elif c[:3] == ["python", "-m", "sglang_router.launch_router"]:
            out.append({"kind": "router", "argv": c[3:], **gpu})
        elif c[:2] == ["vllm", "serve"]:
            out.append({"kind": "vllm", "argv": c[2:], **gpu})
        elif c[:1] in (["trtllm-serve"], ["mpirun"]) and "trtllm-serve" in c:
            # trtllm-serve alone, or behind its MPI launch (mpirun ... trtllm-llmapi-launch)
            out.append({"kind": "trtllm", "argv": c[c.index("trtllm-serve") + 1 :], **gpu})
    return out


def check(site: Path, jobs: list[dict]) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(site), "MOEPLAN_STUBS": STUBS}
    text = "".join(json.dumps({**j, "id": i}) + "\n" for i, j in enumerate(jobs))
    p = subprocess.run([sys.executable, str(REPO / "bench" / "engine_parsers.py")], input=text,
                       env=env, capture_output=True, text=True, check=False)  # fmt: skip
    got = {}
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            got[r["id"]] = r
    return [got.get(i, {"ok": False, "error": p.stderr[-300:]}) for i in range(len(jobs))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--venv", type=Path, default=Path.home() / ".cache/moeplan/engines")
    ap.add_argument("--serving", nargs="*", default=["mixtral-8x7b:a100-sxm-8"])
    ap.add_argument("--engines", nargs="*", default=list(ENGINES), choices=ENGINES,
                    help="engines whose launch folders are checked (trtllm alone installs "
                    "nothing: its facts are read from its source, bench/data)")  # fmt: skip
    ap.add_argument("--keep", type=Path, default=None,
                    help="write the launch folders here (kept) instead of a temporary folder")  # fmt: skip
    ap.add_argument("--rack", action="store_true",
                    help="also check SGLang's GB200 NVL72 P/D deployment (decode on 48 ranks "
                    "over 12 trays) exported on gb200-nvl72")  # fmt: skip
    ap.add_argument("--serving-only", action="store_true",
                    help="check only the --serving plans' folders (not every preset pair's)")  # fmt: skip
    a = ap.parse_args()
    wheels = bool({"sglang", "vllm"} & set(a.engines))
    site = ensure_venv(a.venv) if wheels else Path(tempfile.gettempdir())
    with tempfile.TemporaryDirectory() as tmp:
        out = a.keep or Path(tmp)
        rows = [] if a.serving_only else analytic_folders(out / "a")
        rows += serving_folders(a.serving, out / "s")
        rows += rack_folder(out / "r") if a.rack else []
        jobs, where, pins, unchecked, refused = [], [], [], 0, {}
        for row, (mn, cn, folder, sm, mem, gpn) in enumerate(rows):
            dep = json.loads((folder / "deployment.json").read_text())
            for engine in a.engines:
                refused[engine] = refused.get(engine, 0) + (dep[engine] is None)
                servers = (dep[engine] or {}).get("servers", [])
                by_port = {str(s["port"]): s.get("pinned") for s in servers}
                nodes = max((n for s in servers for n in s["nodes"]), default=0) + 1
                cmds = recorded(folder / engine / "launch.sh", nodes, out / "w" / str(row) / engine)
                for src, cs in (("launch.sh", cmds), ("k8s", k8s_commands(folder, engine)),
                                ("dynamo", dynamo_commands(folder, engine))):  # fmt: skip
                    for j in jobs_of(cs, sm, mem, gpn):
                        if j["kind"] == "router" and not wheels:  # no sglang-router wheel
                            unchecked += 1
                            continue
                        jobs.append(j)
                        where.append(f"{mn}@{cn} {engine} {src}")
                        pins.append(by_port.get(j["port"]) if j["kind"] != "router" else None)
        q = str(model_folder("qwen3-30b-a3b", out))
        kinds = {*a.engines, *(["router"] if wheels else [])}
        # and a Dynamo TensorRT-LLM worker whose EP size does not divide its TP size
        wrong = dynamo_trtllm_serve(["--model-path", "MODEL", "--tensor-parallel-size", "8",
                                     "--expert-parallel-size", "3"])[1:]  # fmt: skip
        controls = [{"kind": k, "argv": [q if a == "MODEL" else a for a in v], "sm": 90,
                     "gpus": 8} for k, v in [*CONTROLS, ("trtllm", wrong)] if k in kinds]  # fmt: skip
        res = check(site, jobs + controls)
    got, ctl = res[: len(jobs)], res[len(jobs) :]
    assert not any(r["ok"] for r in ctl), f"a control passed: {ctl}"
    by: dict[str, list[int]] = {}
    for j, r in zip(jobs, got, strict=True):
        by.setdefault(j["kind"], [0, 0])[0] += r["ok"]
        by[j["kind"]][1] += 1
    for k, (ok, n) in sorted(by.items()):
        print(f"{k}: {ok}/{n} commands pass the engine's own argument handling")
    for src in ("launch.sh", "k8s", "dynamo"):
        mine = [r["ok"] for w, r in zip(where, got, strict=True) if w.endswith(f" {src}")]
        print(f"  from {src}: {sum(mine)}/{len(mine)}")
    for w, r in zip(where, got, strict=True):
        if not r["ok"]:
            print(f"FAIL {w}: {r['error'][:300]}")
    compared = differ = 0
    for w, r, p in zip(where, got, pins, strict=True):
        if not r["ok"] or not p or not r.get("resolved"):
            continue
        compared += 1
        d = pinned_differences(r["resolved"], p)
        if d:
            differ += 1
            print(f"PINNED {w}: " + "; ".join(d))
    print(
        f"pinned values: {compared} server commands resolved by their engine, {differ} "
        "differ from deployment.json"
    )
    for k, v in sorted(refused.items()):
        print(f"{k}: {v} of {len(rows)} launch folders launch nothing (a refusal script)")
    if unchecked:
        print(f"{unchecked} router commands not checked (sglang-router is not installed)")
    ok, n = sum(r["ok"] for r in got), len(got)
    print(f"PASS {ok}/{n} ({100 * ok / max(n, 1):.1f} %) over {len(rows)} launch folders; "
          f"{len(ctl)} wrong controls all refused")  # fmt: skip
    return 0 if ok == n and differ == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
