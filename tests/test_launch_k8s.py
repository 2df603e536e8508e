"""launch/k8s/<engine>.yaml: valid against the pinned schemas, the same server commands as
launch.sh, and the deployment's GPUs requested.

Oracles: the schemas of Kubernetes 1.31 (kubernetes-validate) and of the LeaderWorkerSet CRD
(tests/data/k8s_schemas, with their source); the shell scripts' own server commands; the
deployment's GPU count in deployment.json; Dynamo's TensorRT-LLM worker's flags and the LLM API
arguments they set, read from its source (tests/data/k8s_schemas/dynamo_trtllm_args.json)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import jsonschema
import pytest
import yaml

from k8s_schemas import SCHEMAS, validate
from moeplan.backends.trtllm import TRTLLM
from moeplan.errors import MoeplanError
from moeplan.export import constraints as cons
from moeplan.export import k8s
from moeplan.export.deployment import Pool, node_addr
from moeplan.export.plan_export import PREFILL_UNIT, ExportContext, Option, engine_export
from moeplan.planners.layout import Layout
from moeplan.specs import load_cluster, load_model

MODEL_PATH = "/models/$(HOME)/${HERE}/m"  # a user's path: nothing in it may be expanded
DYNAMO_TRTLLM = json.loads((SCHEMAS / "dynamo_trtllm_args.json").read_text())
#: ``trtllm-serve`` flag -> the LLM API argument it sets (NVIDIA/TensorRT-LLM
#: tensorrt_llm/commands/serve.py @ 00209af1, the commit of bench/data/trtllm_1.2_llm_api.json:
#: each click option's parameter passed to ``get_llm_args``; ``--tp_size`` is an alias of
#: ``--tensor_parallel_size``, ``--kv_cache_free_gpu_memory_fraction`` of
#: ``--free_gpu_memory_fraction``, which builds ``KvCacheConfig(free_gpu_memory_fraction=)``)
SERVE_SETS = {
    "--backend": "backend",
    "--tp_size": "tensor_parallel_size",
    "--pp_size": "pipeline_parallel_size",
    "--ep_size": "moe_expert_parallel_size",
    "--max_batch_size": "max_batch_size",
    "--max_num_tokens": "max_num_tokens",
    "--max_seq_len": "max_seq_len",
    "--kv_cache_free_gpu_memory_fraction": "kv_cache_config.free_gpu_memory_fraction",
}
SERVE_SERVER = ("--host", "--port")  # trtllm-serve's HTTP server: Dynamo's frontend owns it


def _export(engine: str, model: str, cluster: str, nodes: int, opt: Option):
    m, c = load_model(model), load_cluster(cluster, nodes)
    ctx = ExportContext(model_path=MODEL_PATH, target=cons.Target.of(m, c),
                        planned_layers=m.num_layers, full_layers=m.num_layers)  # fmt: skip
    return engine_export(engine, SimpleNamespace(model=m, cluster=c), ctx, [opt])


def _colocated(lay: Layout, replicas: int) -> Option:
    return Option(strategy=lay, label="x", family="strategy", per_gpu=1.0, unit=PREFILL_UNIT,
                  replicas=replicas)  # fmt: skip


def _pd() -> Option:
    pre = Pool(role="prefill", strategy=Layout(attn_dp=4, moe_ep=4), count=2, max_running=64,
               mem_fraction=0.8, chunk=8192)  # fmt: skip
    dec = Pool(role="decode", strategy=Layout(attn_dp=8, moe_ep=8), count=1, max_running=256,
               mem_fraction=0.85)  # fmt: skip
    return Option(strategy=None, label="pd", family="pd", per_gpu=1.0, unit=PREFILL_UNIT,
                  pools=(pre, dec))  # fmt: skip


CASES = {
    "sglang-replicas": ("sglang", "qwen3-30b-a3b", "h100-sxm-8", 1,
                        _colocated(Layout(attn_tp=2, moe_tp=2), 4)),
    "vllm-replicas": ("vllm", "qwen3-30b-a3b", "h100-sxm-8", 1,
                      _colocated(Layout(attn_tp=1, attn_dp=2, moe_tp=2), 4)),
    "sglang-two-nodes": ("sglang", "deepseek-v3", "h100-sxm-8", 2,
                         _colocated(Layout(attn_tp=16, moe_tp=16), 1)),
    "sglang-pd": ("sglang", "deepseek-v2-lite", "h100-sxm-8", 2, _pd()),
    "vllm-pd": ("vllm", "deepseek-v2-lite", "h100-sxm-8", 2, _pd()),
    "trtllm-replicas": ("trtllm", "qwen3-30b-a3b", "h100-sxm-8", 1,
                        _colocated(Layout(attn_tp=4, moe_tp=4), 2)),
}  # fmt: skip


def _shell_form(a: str, back: dict[str, str]) -> str:
    """A container argument written back as launch.sh passes it."""
    if a == MODEL_PATH.replace("$(", "$$("):
        return MODEL_PATH
    for k, v in back.items():
        a = a.replace(k, v)
    return a


@pytest.mark.parametrize("case", sorted(CASES))
def test_manifests_validate_match_the_scripts_and_request_the_gpus(case):
    engine, model, cluster, nodes, opt = CASES[case]
    ex = _export(engine, model, cluster, nodes, opt)
    assert ex.k8s is not None and ex.deployment is not None, ex.text
    objs = [o for o in yaml.safe_load_all(ex.k8s) if o]
    assert objs, ex.k8s
    for o in objs:
        validate(o)
    assert k8s.gpus(objs) == ex.deployment["gpus"]
    kinds = sorted(o["kind"] for o in objs)
    servers = ex.deployment["servers"]
    multi = sum(len(s["nodes"]) > 1 for s in servers)
    router = 1 if ex.deployment["router"] else 0
    assert kinds.count("LeaderWorkerSet") == multi
    assert kinds.count("Deployment") == len(servers) - multi + router
    assert kinds.count("Service") == len(servers) + router
    # every container runs launch.sh's command of its server and rank
    by_name = {o["metadata"]["name"]: o for o in objs if o["kind"] != "Service"}
    for srv, argvs in zip(servers, ex.servers, strict=True):
        o = by_name[f"moeplan-{engine}-{srv['name']}"]
        back = {k8s.MOUNT: "${HERE}", "$(MOEPLAN_IB_DEVICE)": "${MOEPLAN_IB_DEVICE}",
                "$(LWS_LEADER_ADDRESS)": node_addr(srv["nodes"][0])}  # fmt: skip
        pods = [p["spec"]["containers"][0] for p in (
            [o["spec"]["template"]] if o["kind"] == "Deployment" else
            [o["spec"]["leaderWorkerTemplate"]["leaderTemplate"]] +
            [o["spec"]["leaderWorkerTemplate"]["workerTemplate"]] * (len(argvs) - 1))]  # fmt: skip
        for rank, (c, want) in enumerate(zip(pods, argvs, strict=True)):
            got = [_shell_form(a.replace("$(LWS_WORKER_INDEX)", str(rank)), back)
                   for a in c["command"] + c["args"]]  # fmt: skip
            w = list(want)
            if "--base-gpu-id" in w:
                i = w.index("--base-gpu-id")
                del w[i : i + 2]
            assert got == w, (srv["name"], rank)


def test_a_wrong_manifest_fails_its_schema():
    """The controls: an unknown field of a Service, a LeaderWorkerSet without its size type."""
    engine, model, cluster, nodes, opt = CASES["sglang-two-nodes"]
    objs = [o for o in yaml.safe_load_all(_export(engine, model, cluster, nodes, opt).k8s) if o]
    svc = next(o for o in objs if o["kind"] == "Service")
    lws = next(o for o in objs if o["kind"] == "LeaderWorkerSet")
    svc["spec"]["portz"] = []
    lws["spec"]["leaderWorkerTemplate"]["size"] = "two"
    for o in (svc, lws):
        with pytest.raises(jsonschema.ValidationError):
            validate(o)


def _serve_settings(argv: list[str]) -> dict[str, object]:
    """The LLM API arguments of ``trtllm-serve MODEL ...`` (:data:`SERVE_SETS`; the YAML as
    ``yaml``); its HTTP server's flags left out."""
    out: dict[str, object] = {"model": argv[1]}
    i = 2
    while i < len(argv):
        if argv[i] == "--trust_remote_code":
            out["trust_remote_code"] = True
            i += 1
            continue
        flag, value = argv[i], argv[i + 1]
        if flag == "--extra_llm_api_options":
            out["yaml"] = value
        elif flag not in SERVE_SERVER:
            out[SERVE_SETS[flag]] = value
        i += 2
    return out


def _dynamo_trtllm_settings(args: list[str]) -> dict[str, object]:
    """The LLM API arguments Dynamo's TensorRT-LLM worker runs with ``args``, by its stored
    parser and ``arg_map`` (dynamo_trtllm_args.json): a flag the parser lacks, or a value
    not of its kind, fails here."""
    d = DYNAMO_TRTLLM
    out: dict[str, object] = dict(d["fixed"])
    i = 0
    while i < len(args):
        flag = args[i]
        assert flag in d["flags"], f"Dynamo's parser has no {flag}"
        kind = d["flags"][flag]
        assert kind != "flag", flag  # no switch is written
        value = args[i + 1]
        if isinstance(kind, list):
            assert value in kind, (flag, value)
        elif kind in ("int", "float"):
            (int if kind == "int" else float)(value)
        if flag == d["extra_engine_args"]:
            out["yaml"] = value
        elif flag == d["override_engine_args"]:
            out.update(json.loads(value))
        else:
            out[d["sets"][flag]] = value
        i += 2
    return out


@pytest.mark.parametrize(
    "case", ["sglang-replicas", "sglang-two-nodes", "sglang-pd", "vllm-pd", "trtllm-replicas"]
)
def test_dynamo_graph_validates_and_runs_each_pool_as_launch_sh_does(case):
    """The DynamoGraphDeployment: valid against the CRD excerpt and, its pods, Kubernetes
    1.31; one service per pool with the pool's servers as replicas, the deployment's GPUs,
    and the first server's engine arguments less what Dynamo owns (host, port, GPU base,
    multi-node rendezvous); TensorRT-LLM's worker, whose flags are its own, runs with the
    same LLM API arguments as launch.sh's trtllm-serve, read through each one's source."""
    engine, model, cluster, nodes, opt = CASES[case]
    ex = _export(engine, model, cluster, nodes, opt)
    assert ex.dynamo is not None, ex.k8s
    # the workers read the launch folder's files (TensorRT-LLM's YAML) from its ConfigMap
    assert f"kubectl create configmap moeplan-{engine}-files" in ex.dynamo
    (obj,) = [o for o in yaml.safe_load_all(ex.dynamo) if o]
    validate(obj)
    assert k8s.dynamo_gpus(obj) == ex.deployment["gpus"]
    services = obj["spec"]["services"]
    roles = {s["role"] for s in ex.deployment["servers"]}
    assert set(services) == {"Frontend"} | {{"colocated": "worker"}.get(r, r) for r in roles}
    for role in roles:
        svc = services[{"colocated": "worker"}.get(role, role)]
        first = next(i for i, s in enumerate(ex.deployment["servers"]) if s["role"] == role)
        assert svc["replicas"] == ex.deployment["pools"][role]["instances"]
        want, drop = list(ex.servers[first][0]), set(k8s.DYNAMO_DROPPED)
        want = [a for i, a in enumerate(want) if a not in drop and want[i - 1] not in drop]
        got = [_shell_form(a, {k8s.MOUNT: "${HERE}",
                               "$(MOEPLAN_IB_DEVICE)": "${MOEPLAN_IB_DEVICE}"})
               for a in svc["extraPodSpec"]["mainContainer"]["args"]]  # fmt: skip
        if engine == "vllm":  # vllm serve MODEL ... -> --model MODEL ...
            assert got[:2] == ["--model", want[2]] and got[2:] == want[3:]
        elif engine == "trtllm":  # trtllm-serve MODEL ... -> Dynamo's own flags
            assert svc["extraPodSpec"]["mainContainer"]["command"][-1] == "dynamo.trtllm"
            assert obj["spec"]["backendFramework"] == "trtllm"
            full = list(ex.servers[first][0])
            assert _dynamo_trtllm_settings(got) == _serve_settings(full)
        else:
            assert got == want[3:]


def test_a_wrong_dynamo_graph_fails_its_schema():
    engine, model, cluster, nodes, opt = CASES["sglang-two-nodes"]
    (obj,) = [o for o in yaml.safe_load_all(_export(engine, model, cluster, nodes, opt).dynamo)
              if o]  # fmt: skip
    svc = obj["spec"]["services"]["worker"]
    for bad in ({"multinode": {"nodeCount": 1}}, {"replicas": "1"}, {"gpus": 8}):
        with pytest.raises(jsonschema.ValidationError):
            validate({**obj, "spec": {**obj["spec"], "services": {"worker": {**svc, **bad}}}})


def test_vllm_data_parallel_over_two_nodes_is_a_leader_worker_set_and_no_dynamo_graph():
    """vLLM's data parallelism over two nodes: the second node's command differs in more than
    its rank (--data-parallel-start-rank 8, --headless): a LeaderWorkerSet of size 2 holds it
    as its one worker's template; a Dynamo service has one pod template and no address of
    its first node, so no DynamoGraphDeployment is written and the file says why."""
    ex = _export("vllm", "deepseek-v2-lite", "h100-sxm-8", 2,
                 _colocated(Layout(attn_tp=1, attn_dp=16, moe_tp=1, moe_ep=16), 1))  # fmt: skip
    objs = [o for o in yaml.safe_load_all(ex.k8s) if o]
    assert sorted(o["kind"] for o in objs) == ["LeaderWorkerSet", "Service"]
    for o in objs:
        validate(o)
    lws = objs[0] if objs[0]["kind"] == "LeaderWorkerSet" else objs[1]
    worker = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    assert "--headless" in worker["args"] and "--data-parallel-start-rank" in worker["args"]
    assert ex.dynamo is None and "no DynamoGraphDeployment: colocated-0" in ex.k8s


def test_trtllm_dynamo_worker_keeps_every_setting_or_refuses():
    """Each trtllm-serve setting moeplan writes reaches Dynamo's worker with the same LLM API
    argument (the remote-code switch through --override-engine-args); a flag the worker has
    none for, a backend other than the one it runs, or a P/D role is refused, not dropped."""
    argv = ["trtllm-serve", "/m", "--backend", "pytorch", "--tp_size", "8", "--pp_size", "2",
            "--ep_size", "4", "--max_batch_size", "64", "--max_num_tokens", "4096",
            "--max_seq_len", "8192", "--kv_cache_free_gpu_memory_fraction", "0.85",
            "--extra_llm_api_options", "/moeplan/s.yaml", "--trust_remote_code"]  # fmt: skip
    got = TRTLLM.dynamo_args(argv, "colocated")
    assert _dynamo_trtllm_settings(got) == _serve_settings(argv)
    for bad, role in (
        ([*argv[:2], "--log_level", "info"], "colocated"),
        ([*argv[:2], "--backend", "tensorrt"], "colocated"),
        (argv, "prefill"),
    ):
        with pytest.raises(MoeplanError):
            TRTLLM.dynamo_args(bad, role)


def test_trtllm_over_two_nodes_writes_no_dynamo_graph_and_says_why():
    """A TensorRT-LLM server over two nodes is one MPI job from its first node (launch.sh);
    Dynamo's operator would run its own mpirun instead, so no graph is written and the
    Kubernetes file says why."""
    ex = _export("trtllm", "deepseek-v3", "h100-sxm-8", 2,
                 _colocated(Layout(attn_tp=16, moe_tp=16), 1))  # fmt: skip
    assert ex.deployment is not None and len(ex.deployment["servers"][0]["nodes"]) == 2
    assert ex.dynamo is None
    assert "no DynamoGraphDeployment: colocated-0 spans 2 nodes" in ex.k8s
    assert "backend_trtllm.go" in ex.k8s
