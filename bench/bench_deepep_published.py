"""DeepEP's normal (prefill) kernels on H800 against DeepEP's published bandwidths
(``tests/data/deepep_published_bandwidth.json``, the DeepEP README's ``v1_normal_h800`` rows):
4096 tokens, hidden 7168, top-8 of 256 experts.

- Intra-node EP8 (NVLink): the H100 DeepEP tables transferred to ``h800-sxm-8`` (NVLink
  200 GB/s per direction) against the time the published 153 / 158 GB/s (fp8 dispatch / bf16
  combine) imply with moeplan's byte count (per destination rank, remote copies only; and
  counting the local copy too). ``tests/test_cost_kerneldb.py`` holds the ratio within 30 %.
- Inter-node EP16/32/64 (CX7 RDMA): the intra-node model moved to the RDMA link
  (``kerneldb/comm.py: internode_seconds``) against the published RDMA dispatch bandwidth,
  bytes counted once per remote node; ``tests/test_cost_kerneldb_internode.py`` holds the
  ratio between 0.48 and 0.82. Beside them the link efficiency the transferred models learned
  on NVLink.

    python bench/bench_deepep_published.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from moeplan.cost.kerneldb import device_for
from moeplan.cost.kerneldb.comm import DEEPEP_OPS, DEEPEP_SMS, internode_seconds
from moeplan.cost.kerneldb.families import dest_ranks
from moeplan.kernel_tables import kernel_db
from moeplan.specs import load_cluster

PUBLISHED = Path(__file__).parents[1] / "tests" / "data" / "deepep_published_bandwidth.json"
TOKENS, HIDDEN, TOPK, EXPERTS = 4096, 7168, 8, 256


def run() -> list[dict]:
    pub = json.loads(PUBLISHED.read_text(encoding="utf-8"))["v1_normal_h800"]["rows"]
    db = kernel_db()
    h100, h800 = device_for(load_cluster("h100-sxm-8")), device_for(load_cluster("h800-sxm-8"))
    rows = []
    intra = next(r for r in pub if r[0] == "intranode" and r[1] == 8)
    for op, gbps, elem_bytes in ((DEEPEP_OPS[0], intra[2], 1), (DEEPEP_OPS[1], intra[4], 2)):
        p = db.predict(
            op, h800, "sglang", num_token=TOKENS, hidden_size=HIDDEN, num_topk=TOPK,
            num_experts=EXPERTS, sms=int(DEEPEP_SMS),
        )  # fmt: skip
        ranks = dest_ranks(np.array([EXPERTS]), np.array([TOPK]))[0]
        implied = TOKENS * HIDDEN * ranks * 7 / 8 * elem_bytes / (gbps * 1e9)
        rows.append({
            "name": f"{op}, h800 intranode EP8 (transferred from h100)",
            "value": p.seconds * 1e3, "unit": "ms", "reference": implied * 1e3,
            "ratio": p.seconds / implied, "ratio_with_local_copy": p.seconds / (implied * 8 / 7),
            "published_gbps": gbps, "source": p.source, "target": "within 30 %",
            "note": "reference: the time the published bandwidth implies (remote copies)",
        })  # fmt: skip
    for op in DEEPEP_OPS:
        key = db.choose(h800.reference, "sglang", op, {"sms": DEEPEP_SMS})
        rows.append({
            "name": f"{op}: link efficiency learned on NVLink",
            "value": db.variant(h800.reference, "sglang", op, key).model.bw_eff, "unit": "fraction",
        })  # fmt: skip
    model = db.variant(
        h800.reference, "sglang", DEEPEP_OPS[0],
        db.choose(h800.reference, "sglang", DEEPEP_OPS[0], {"sms": DEEPEP_SMS}),
    ).model  # fmt: skip
    for kind, ep, gbps, link, *_ in pub:
        if kind != "internode":
            continue
        nodes = ep // 8
        per_node = EXPERTS / nodes
        # a node is missed by all k experts with this probability (uniform, without repeats)
        miss = np.prod([(EXPERTS - per_node - i) / (EXPERTS - i) for i in range(TOPK)])
        rdma_bytes = TOKENS * (nodes - 1) * (1 - miss) * HIDDEN * 1.0  # fp8 dispatch
        cl = load_cluster("h800-sxm-8", nodes)
        t = internode_seconds(model, h100, h800, cl.inter.bw, rdma_bytes * ep / (ep - 8), ep, nodes)
        rows.append({
            "name": f"deepep_normal_dispatch, h800 internode EP{ep} ({link})",
            "value": rdma_bytes / t / 1e9, "unit": "GB/s", "reference": gbps,
            "ratio": rdma_bytes / t / (gbps * 1e9), "target": "0.48-0.82 (pinned)",
        })  # fmt: skip
    return rows


if __name__ == "__main__":
    for r in run():
        print(r)
