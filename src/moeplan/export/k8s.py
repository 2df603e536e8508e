"""Kubernetes manifests of one engine's launch folder (pure: placed servers in, YAML out).

``launch/k8s/<engine>.yaml`` starts what ``launch/<engine>/launch.sh`` starts, with the same
server arguments:

- a server on one node: a ``Deployment`` of one pod requesting its GPUs (``nvidia.com/gpu``);
  the pod sees only those GPUs, so ``--base-gpu-id`` and ``CUDA_VISIBLE_DEVICES`` are left
  out;
- a server over several nodes: a ``LeaderWorkerSet`` (kubernetes-sigs/lws, API
  ``leaderworkerset.x-k8s.io/v1``) of ``size`` = its nodes, one pod per node; the node rank
  is the pod's ``LWS_WORKER_INDEX`` and the rendezvous host its ``LWS_LEADER_ADDRESS``, both
  set by LWS in every container (Kubernetes expands ``$(VAR)`` in ``args``); a server whose
  ranks differ in more than that (vLLM's Ray cluster, TensorRT-LLM's MPI job) is not written
  as one, and the file says why;
- a ``Service`` per server (its HTTP port, and a prefill server's KV bootstrap port) selecting
  its pod (a LeaderWorkerSet's leader), and the router as a ``Deployment`` and ``Service`` in
  front of them, its worker URLs naming the servers' Services.

The launch folder's files the servers read (``expert_location.json``, TensorRT-LLM's YAML)
come from the ConfigMap ``moeplan-<engine>-files`` mounted at :data:`MOUNT`; a P/D server's
RDMA devices from key ``MOEPLAN_IB_DEVICE`` of ConfigMap ``moeplan-rdma`` (a pod does not
start until it exists: the cluster's counterpart of launch.sh's check). Both are the user's to
create (the file's head says how). A user's string (the model path) is passed as is, its
``$(`` written ``$$(`` so that Kubernetes does not expand it.

``launch/k8s/<engine>-dynamo.yaml`` (:func:`dynamo`) runs the same pools as one Dynamo
``DynamoGraphDeployment``: SGLang's and vLLM's Dynamo workers take the engine's own arguments,
TensorRT-LLM's worker flags of its own, each setting the LLM API argument of a
``trtllm-serve`` flag (:meth:`moeplan.backends.trtllm.TRTLLMBackend.dynamo_args`); what Dynamo
owns (:data:`DYNAMO_DROPPED`, TensorRT-LLM's ``--backend pytorch``) is left out, anything
else the worker cannot take means no graph, and the file says why. A TensorRT-LLM server over
several nodes gets none (:data:`moeplan.backends.trtllm.DYNAMO_MULTINODE`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from moeplan.backends import backend
from moeplan.errors import MoeplanError
from moeplan.export.deployment import Slot, node_addr, url
from moeplan.export.launch_servers import ServerCommands

MOUNT = "/moeplan"  # where the ConfigMap of the launch folder's files is mounted
LWS_API = "leaderworkerset.x-k8s.io/v1"
GPU_RESOURCE = "nvidia.com/gpu"  # the NVIDIA device plugin's resource name
SERVER_LABEL = "moeplan.server"
#: the router's image: sglang-router at the release the shell scripts' router commands were
#: checked with (bench/check_exports.py PINNED)
ROUTER_IMAGE = "lmsysorg/sglang-router:v0.3.2"
RDMA_CONFIGMAP = "moeplan-rdma"
_VAR = re.compile(r"\$\{(\w+)\}")
#: keys written bare (every other key and every string value is double-quoted); YAML 1.1's
#: boolean and null words are not among the keys the manifests use
_PLAIN_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_./-]*")


def _name(engine: str, server: str) -> str:
    return f"moeplan-{engine}-{server}"


def _k8s_text(a: str, literal: bool, subst: Mapping[str, str]) -> str | None:
    """One argument for a container: a literal's ``$(`` escaped, else the shell variables
    replaced by ``subst`` (None: a variable the cluster has no value for)."""
    if literal:
        return a.replace("$(", "$$(")
    for k, v in subst.items():
        a = a.replace(k, v)
    return None if _VAR.search(a) else a


def _args(
    argv: Sequence[str],
    literals: Collection[str],
    subst: Mapping[str, str],
    dropped: Collection[str] = ("--base-gpu-id",),
) -> list[str] | None:
    """``argv`` for a container (module docstring): each flag of ``dropped`` left out with its
    value (``--base-gpu-id`` by default); None where a shell variable has no value here."""
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in dropped:
            skip = True
            continue
        t = _k8s_text(a, a in literals, subst)
        if t is None:
            return None
        out.append(t)
    return out


def _env(sc: ServerCommands, argv: Iterable[str]) -> list[dict[str, Any]]:
    env = [{"name": k, "value": v} for k, v in sc.env if k != "CUDA_VISIBLE_DEVICES"]
    if any("$(MOEPLAN_IB_DEVICE)" in a for a in argv):
        ref = {"name": RDMA_CONFIGMAP, "key": "MOEPLAN_IB_DEVICE"}
        env.append({"name": "MOEPLAN_IB_DEVICE", "valueFrom": {"configMapKeyRef": ref}})
    return env


def _pod(
    engine: str, image: str, argv: list[str], env: list[dict[str, Any]], gpus: int, port: int
) -> dict[str, Any]:
    """A pod spec running ``argv`` on ``gpus`` GPUs, with shared memory and the files."""
    container: dict[str, Any] = {
        "name": "server",
        "image": image,
        "command": argv[:1],
        "args": argv[1:],
        "ports": [{"containerPort": port, "name": "http"}],
        "resources": {"limits": {GPU_RESOURCE: gpus}, "requests": {GPU_RESOURCE: gpus}},
        "volumeMounts": [
            {"name": "shm", "mountPath": "/dev/shm"},
            {"name": "files", "mountPath": MOUNT, "readOnly": True},
        ],
    }
    if env:
        container["env"] = env
    return {
        "containers": [container],
        "volumes": [
            {"name": "shm", "emptyDir": {"medium": "Memory"}},
            {
                "name": "files",
                "configMap": {"name": f"moeplan-{engine}-files", "optional": True},
            },
        ],
    }


def _service(name: str, selector: dict[str, str], ports: list[tuple[str, int]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {
            "selector": selector,
            "ports": [{"name": n, "port": p, "targetPort": p} for n, p in ports],
        },
    }


def _server(
    engine: str, sc: ServerCommands, literals: Collection[str], hosts: Mapping[str, str]
) -> tuple[list[dict[str, Any]], str | None]:
    """The objects of one server and why none can be written (None: they are)."""
    s = sc.slot
    name = _name(engine, s.name)
    image = backend(engine).image
    if image is None:
        return [], f"{engine} names no container image"
    if any(len(n) != 1 for n in sc.nodes):
        return [], f"{s.name} runs several commands on a node (e.g. a Ray or MPI job)"
    subst = {"${HERE}": MOUNT, "${MOEPLAN_IB_DEVICE}": "$(MOEPLAN_IB_DEVICE)", **hosts}
    labels = {"app": "moeplan", SERVER_LABEL: name}
    ports = [("http", s.port)]
    if s.bootstrap_port is not None:
        ports.append(("bootstrap", s.bootstrap_port))
    svc = _service(name, labels, ports)
    if len(s.nodes) == 1:
        argv = _args(sc.nodes[0][0], literals, subst)
        if argv is None:
            return [], f"{s.name} names a shell variable the cluster has no value for"
        pod = _pod(engine, image, argv, _env(sc, argv), len(s.gpus), s.port)
        return [_deployment(name, labels, pod), svc], None
    lead = {**subst, node_addr(s.nodes[0]): "$(LWS_LEADER_ADDRESS)"}
    ranks = [_args(n[0], literals, lead) for n in sc.nodes]
    if any(r is None for r in ranks):
        return [], f"{s.name} names a shell variable the cluster has no value for"
    leader, worker = ranks[0], _worker_template(ranks[1:])  # type: ignore[arg-type]
    if leader is None or worker is None:
        return [], f"{s.name}'s node commands differ in more than the node rank"
    lws = {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "labels": {"app": "moeplan"}},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": len(s.nodes),
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {
                    "metadata": {"labels": labels},
                    "spec": _pod(engine, image, leader, _env(sc, leader), len(s.gpus), s.port),
                },
                "workerTemplate": {
                    "metadata": {"labels": {"app": "moeplan"}},
                    "spec": _pod(engine, image, worker, _env(sc, worker), len(s.gpus), s.port),
                },
            },
        },
    }
    return [lws, svc], None


def _worker_template(ranks: Sequence[list[str]]) -> list[str] | None:
    """One argument list for every worker rank (1..): the first worker's with its rank
    written ``$(LWS_WORKER_INDEX)``; None when another worker's differs in more."""
    first = ranks[0]
    tpl = [
        "$(LWS_WORKER_INDEX)" if i > 0 and first[i - 1] == "--node-rank" else a
        for i, a in enumerate(first)
    ]
    for r, argv in enumerate(ranks, start=1):
        if [a.replace("$(LWS_WORKER_INDEX)", str(r)) for a in tpl] != argv:
            return None
    return tpl


def _router(engine: str, router: Sequence[str], hosts: Mapping[str, str]) -> list[dict[str, Any]]:
    name = _name(engine, "router")
    port = int(router[list(router).index("--port") + 1])
    argv = [a for a in (_k8s_text(a, False, hosts) for a in router) if a is not None]
    labels = {"app": "moeplan", SERVER_LABEL: name}
    pod = {
        "containers": [
            {
                "name": "router",
                "image": ROUTER_IMAGE,
                "command": argv[:1],
                "args": argv[1:],
                "ports": [{"containerPort": port, "name": "http"}],
            }
        ]
    }
    return [_deployment(name, labels, pod), _service(name, labels, [("http", port)])]


def _deployment(name: str, labels: dict[str, str], pod: dict[str, Any]) -> dict[str, Any]:
    """One replica of ``pod`` as an ``apps/v1`` Deployment selected by ``labels``."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }


def manifests(
    engine: str,
    servers: Sequence[ServerCommands],
    router: Sequence[str] | None,
    literals: Collection[str] = (),
) -> tuple[list[dict[str, Any]], list[str]]:
    """Every object of the deployment and why a server could not be written (empty: all
    were; then the objects start the whole deployment)."""
    slots: list[Slot] = [sc.slot for sc in servers]
    # a server's URL in the shell scripts -> its Service
    hosts = {url(s): f"http://{_name(engine, s.name)}:{s.port}" for s in slots}
    objs: list[dict[str, Any]] = []
    why: list[str] = []
    for sc in servers:
        o, w = _server(engine, sc, literals, hosts)
        objs += o
        if w:
            why.append(w)
    if router is not None and not why:
        objs += _router(engine, router, hosts)
    return ([] if why else objs), why


def gpus(objs: Iterable[Mapping[str, Any]]) -> int:
    """The GPUs the objects request (every pod of a LeaderWorkerSet counted)."""
    n = 0
    for o in objs:
        spec = o.get("spec", {})
        if o["kind"] == "Deployment":
            pods = [(spec["template"]["spec"], spec["replicas"])]
        elif o["kind"] == "LeaderWorkerSet":
            t = spec["leaderWorkerTemplate"]
            pods = [(t["leaderTemplate"]["spec"], spec["replicas"]),
                    (t["workerTemplate"]["spec"], spec["replicas"] * (t["size"] - 1))]  # fmt: skip
        else:
            continue
        for pod, count in pods:
            for c in pod["containers"]:
                n += count * int(c.get("resources", {}).get("requests", {}).get(GPU_RESOURCE, 0))
    return n


def render(objs: Sequence[Mapping[str, Any]], comments: Sequence[str]) -> str:
    """A multi-document YAML file of ``objs`` (block style, every string double-quoted)."""
    head = [f"# {c}" for c in comments]
    docs = ["\n".join(_yaml(o, 0)) for o in objs]
    return "\n".join(head) + "\n" + "".join(f"---\n{d}\n" for d in docs)


def _scalar(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, int | float):
        return str(v)
    return json.dumps(str(v), ensure_ascii=True)  # a YAML double-quoted scalar


def _yaml(v: Any, indent: int) -> list[str]:
    pad = " " * indent
    out: list[str] = []
    if isinstance(v, Mapping):
        for k, x in v.items():
            key = k if _PLAIN_KEY.fullmatch(k) else _scalar(k)
            if isinstance(x, Mapping | list) and x:
                out.append(f"{pad}{key}:")
                out += _yaml(x, indent + 2)
            else:
                out.append(f"{pad}{key}: {_empty(x)}")
        return out
    for x in v:
        if isinstance(x, Mapping | list) and x:
            sub = _yaml(x, indent + 2)
            out.append(f"{pad}- {sub[0].lstrip()}")
            out += sub[1:]
        else:
            out.append(f"{pad}- {_empty(x)}")
    return out


def _empty(x: Any) -> str:
    if isinstance(x, Mapping):
        return "{}"
    if isinstance(x, list):
        return "[]"
    return _scalar(x)


# ---- Dynamo (ai-dynamo/dynamo DynamoGraphDeployment, nvidia.com/v1alpha1) -------------------
DGD_API = "nvidia.com/v1alpha1"
#: Dynamo's runtime image per backend framework, without a tag: the Dynamo release whose image
#: carries the engine release the plan pinned is the user's choice
DYNAMO_IMAGE = "nvcr.io/nvidia/ai-dynamo/{framework}-runtime"
#: server flags Dynamo's worker does not take: its runtime owns the HTTP endpoint and the GPUs
#: of the pod, and its operator writes a multi-node server's rendezvous flags (spec.services
#: .<name>.multinode.nodeCount)
DYNAMO_DROPPED = (
    "--host",
    "--port",
    "--base-gpu-id",
    "--nnodes",
    "--node-rank",
    "--dist-init-addr",
)


def _dynamo_args(argv: Sequence[str], literals: Collection[str]) -> list[str] | None:
    """A server command's engine arguments for Dynamo's worker, less :data:`DYNAMO_DROPPED`
    (``python3 -m dynamo.<engine>`` takes SGLang's and vLLM's own arguments, the model as
    ``--model`` for vLLM; TensorRT-LLM's worker has flags of its own, which the backend's
    ``dynamo_args`` maps)."""
    subst = {"${HERE}": MOUNT, "${MOEPLAN_IB_DEVICE}": "$(MOEPLAN_IB_DEVICE)"}
    return _args(argv, literals, subst, DYNAMO_DROPPED)


def dynamo(
    engine: str, servers: Sequence[ServerCommands], literals: Collection[str] = ()
) -> tuple[dict[str, Any] | None, str | None]:
    """One ``DynamoGraphDeployment`` of the deployment: a frontend and one service per pool
    (its instances as ``replicas``, a multi-node instance as ``multinode.nodeCount``), each
    running the pool's first server's engine arguments under ``python3 -m dynamo.<engine>``;
    None and why when the engine's backend names no Dynamo worker, a server spans nodes its
    backend's Dynamo worker cannot (``dynamo_multinode``) or has a setting the worker cannot
    take."""
    b = backend(engine)
    if b.dynamo_worker is None:
        return None, f"{b.label} has no Dynamo worker moeplan writes"
    framework, module = b.dynamo_worker
    image = DYNAMO_IMAGE.format(framework=framework)
    services: dict[str, Any] = {
        "Frontend": {
            "componentType": "frontend",
            "replicas": 1,
            "extraPodSpec": {
                "mainContainer": {
                    "name": "main",
                    "image": image,
                    "command": ["python3", "-m", "dynamo.frontend"],
                    "args": ["--http-port", "8000"],
                }
            },
        }
    }
    firsts: dict[str, ServerCommands] = {}
    counts: dict[str, int] = {}
    for sc in servers:
        firsts.setdefault(sc.slot.role, sc)
        counts[sc.slot.role] = counts.get(sc.slot.role, 0) + 1
    for role, sc in firsts.items():
        if len(sc.slot.nodes) > 1 and b.dynamo_multinode is not None:
            return None, f"{sc.slot.name} spans {len(sc.slot.nodes)} nodes: {b.dynamo_multinode}"
        if any(len(n) != 1 for n in sc.nodes):
            return None, f"{sc.slot.name} runs several commands on a node (a Ray or MPI job)"
        per_node = [_dynamo_args(n[0], literals) for n in sc.nodes]
        argv = per_node[0]
        if argv is None:
            return None, f"{sc.slot.name} names a shell variable the cluster has no value for"
        if any(a != argv for a in per_node[1:]):  # one pod template for every node
            return None, f"{sc.slot.name}'s node commands differ in more than the rendezvous"
        try:
            argv = b.dynamo_args(argv, role)
        except MoeplanError as err:
            return None, f"{sc.slot.name}: {err}"
        svc: dict[str, Any] = {
            "componentType": "worker",
            "replicas": counts[role],
            "resources": {"limits": {"gpu": str(len(sc.slot.gpus))}},
            "extraPodSpec": {
                "mainContainer": {
                    "name": "main",
                    "image": image,
                    "command": ["python3", "-m", module],
                    "args": argv,
                    "volumeMounts": [{"name": "files", "mountPath": MOUNT, "readOnly": True}],
                },
                "volumes": [
                    {
                        "name": "files",
                        "configMap": {"name": f"moeplan-{engine}-files", "optional": True},
                    }
                ],
            },
        }
        if role != "colocated":
            svc["subComponentType"] = role
        if len(sc.slot.nodes) > 1:
            svc["multinode"] = {"nodeCount": len(sc.slot.nodes)}
        env = _env(sc, argv)
        if env:
            svc["envs"] = env
        services[{"colocated": "worker"}.get(role, role)] = svc
    name = f"moeplan-{engine}"
    obj = {
        "apiVersion": DGD_API,
        "kind": "DynamoGraphDeployment",
        "metadata": {"name": name},
        "spec": {"backendFramework": framework, "services": services},
    }
    return obj, None


def dynamo_gpus(obj: Mapping[str, Any]) -> int:
    """The GPUs a DynamoGraphDeployment requests: replicas x GPUs x nodes of each service."""
    n = 0
    for svc in obj["spec"]["services"].values():
        g = int(svc.get("resources", {}).get("limits", {}).get("gpu", 0))
        n += svc.get("replicas", 1) * g * svc.get("multinode", {}).get("nodeCount", 1)
    return n
