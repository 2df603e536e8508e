"""Offline validation of Kubernetes objects against pinned schemas (tests/data/k8s_schemas/).

Core objects (Deployment, Service) and every pod template, as a Pod, by ``kubernetes-validate``
(the Kubernetes OpenAPI schemas of release :data:`K8S`, unknown fields refused); custom
resources by ``jsonschema`` against their CRD's ``openAPIV3Schema`` as shipped (SOURCE.md)."""

from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate

SCHEMAS = Path(__file__).parent / "data" / "k8s_schemas"
K8S = "1.31.0"
CRDS = {
    "LeaderWorkerSet": "leaderworkerset.json.gz",
    "DynamoGraphDeployment": "dynamographdeployment.excerpt.json",  # an excerpt: SOURCE.md
}


@cache
def crd(kind: str) -> dict[str, Any]:
    path = SCHEMAS / CRDS[kind]
    if path.suffix == ".gz":
        with gzip.open(path, "rt") as f:
            return json.load(f)
    return json.loads(path.read_text())


def pod_templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod templates of a Deployment or a LeaderWorkerSet."""
    spec = obj.get("spec", {})
    if obj["kind"] == "Deployment":
        return [spec["template"]]
    if obj["kind"] == "LeaderWorkerSet":
        t = spec["leaderWorkerTemplate"]
        return [t.get("leaderTemplate", t["workerTemplate"]), t["workerTemplate"]]
    if obj["kind"] == "DynamoGraphDeployment":  # extraPodSpec: a PodSpec and its main container
        out = []
        for svc in spec["services"].values():
            pod = dict(svc.get("extraPodSpec", {}))
            pod["containers"] = [pod.pop("mainContainer"), *pod.get("containers", [])]
            out.append({"spec": pod})
        return out
    return []


def validate(obj: dict[str, Any]) -> None:
    """Raise (a jsonschema ValidationError) when ``obj`` breaks its pinned schema."""
    kind = obj["kind"]
    if kind in CRDS:
        c = crd(kind)
        assert obj["apiVersion"] == f"{c['group']}/{c['version']}", obj["apiVersion"]
        jsonschema.Draft7Validator(c["openAPIV3Schema"]).validate(obj)
    else:
        kubernetes_validate.validate(obj, K8S, strict=True)
    for i, t in enumerate(pod_templates(obj)):
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}"}, "spec": t["spec"]}
        kubernetes_validate.validate(pod, K8S, strict=True)
