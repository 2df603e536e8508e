"""launch/k8s/<engine>.yaml: valid against the pinned schemas, the same server commands as
launch.sh, and the deployment's GPUs requested.

Oracles: the schemas of Kubernetes 1.31 (kubernetes-validate) and of the LeaderWorkerSet CRD
(tests/data/k8s_schemas, with their source); the shell scripts' own server commands; the
deployment's GPU count in deployment.json."""

from __future__ import annotations

from types import SimpleNamespace

import jsonschema
import pytest
import yaml

from k8s_schemas import validate
from moeplan.export import constraints as cons
from moeplan.export import k8s
from moeplan.export.deployment import Pool, node_addr
from moeplan.export.plan_export import PREFILL_UNIT, ExportContext, Option, engine_export
from moeplan.planners.layout import Layout
from moeplan.specs import load_cluster, load_model

MODEL_PATH = "/models/$(HOME)/${HERE}/m"  # a user's path: nothing in it may be expanded


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


@pytest.mark.parametrize("case", ["sglang-replicas", "sglang-two-nodes", "sglang-pd", "vllm-pd"])
def test_dynamo_graph_validates_and_runs_each_pool_as_launch_sh_does(case):
    """The DynamoGraphDeployment: valid against the CRD excerpt and, its pods, Kubernetes
    1.31; one service per pool with the pool's servers as replicas, the deployment's GPUs,
    and the first server's engine arguments less what Dynamo owns (host, port, GPU base,
    multi-node rendezvous)."""
    engine, model, cluster, nodes, opt = CASES[case]
    ex = _export(engine, model, cluster, nodes, opt)
    assert ex.dynamo is not None, ex.k8s
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
