"""The deployment a plan recommends, as servers on GPUs (pure: pools in, placed servers out).

A deployment is one or more **pools**, each ``count`` instances of one layout: colocated
replicas of one instance, or a prefill pool and a decode pool (P/D). :func:`place` puts every
instance on GPUs and ports:

- Instances sit on consecutive GPUs in pool order (prefill first). An instance of ``W`` GPUs
  stays inside one node when ``W <= GPUs per node`` (it moves to the next node rather than
  straddle two), else takes ``W / GPUs per node`` whole nodes (the engines' multi-node
  launch: one command per node).
- Ports: the ``k``-th server (in launch order) listens on ``SERVER_PORT + k``, rendezvous on
  ``DIST_PORT + k`` and, for a prefill server, bootstraps KV transfers on
  ``BOOTSTRAP_PORT + k``: unique over the deployment, so servers sharing a host never collide.
  The router listens on ``ROUTER_PORT`` on node 0.

:func:`summary` is what ``launch/deployment.json`` records and what the tests compare with
the plan: GPUs used, replicas, pools, and TP/DP/EP/PP of every server.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from moeplan.errors import require
from moeplan.planners.layout import Layout

SERVER_PORT = 30000  # SGLang's default --port; vLLM servers get the same numbering
DIST_PORT = 5000  # torch.distributed rendezvous of a multi-node server (--dist-init-addr)
BOOTSTRAP_PORT = 8998  # SGLang's default --disaggregation-bootstrap-port
ROUTER_PORT = 8000  # sglang-router's default --port
ROLES = ("colocated", "prefill", "decode")


@dataclass(frozen=True, kw_only=True)
class Pool:
    """A launched pool: ``count`` instances of ``strategy`` in ``role`` (what one instance
    can serve is :class:`moeplan.search.disagg.pools.InstanceCapacity`); ``knobs``: the instance
    knobs the plan priced (:class:`moeplan.serve.iteration.instance_knobs.InstanceKnobs`, None: engine
    defaults); ``redundant``: redundant experts per MoE layer of the layout."""

    role: str
    strategy: Layout
    count: int
    knobs: Any = None
    redundant: int = 0
    pp_partition: tuple[int, ...] | None = None  # layers per stage (None: the engine's split)
    chunk: int | None = None  # the prefill chunk (tokens) the plan priced (None: engine default)
    #: the running-request cap the plan simulated (the instance's total; None: engine default)
    max_running: int | None = None
    #: the memory fraction its KV pool was sized at (None: no engine rule)
    mem_fraction: float | None = None

    def __post_init__(self) -> None:
        require(self.role in ROLES, f"pool.role ({self.role!r}) must be one of {ROLES}")
        require(
            isinstance(self.count, int) and self.count >= 1,
            f"pool.count ({self.count!r}) must be a positive integer",
        )


@dataclass(frozen=True, kw_only=True)
class Slot:
    """One server of a pool, placed: the nodes it spans and its GPUs on each (local ids)."""

    role: str
    instance: int
    pool: Pool
    nodes: tuple[int, ...]
    gpus: tuple[int, ...]  # local GPU ids on each of ``nodes``
    port: int
    dist_port: int
    bootstrap_port: int | None

    @property
    def name(self) -> str:
        return f"{self.role}-{self.instance}"

    @property
    def strategy(self) -> Layout:
        return self.pool.strategy

    @property
    def gpu_count(self) -> int:
        return len(self.nodes) * len(self.gpus)


def place(
    pools: Sequence[Pool], *, gpus_per_node: int, num_nodes: int, nodes_per_domain: int = 1
) -> list[Slot]:
    """Every instance of ``pools`` on GPUs and ports (module docstring); refuses a deployment
    that needs more GPUs than the cluster has. An instance that spans several nodes but fits
    one NVLink domain of ``nodes_per_domain`` nodes (the trays of an NVL72 rack) starts on a
    domain's first free node so that its ranks never straddle two racks."""
    need = sum(p.count * p.strategy.world_size for p in pools)
    require(
        need <= gpus_per_node * num_nodes,
        f"deployment GPUs ({need}) must fit the cluster's {num_nodes} x {gpus_per_node}",
    )
    out: list[Slot] = []
    node, gpu = 0, 0  # next free GPU
    seen: dict[str, int] = {}  # servers per role so far: names stay unique over the pools
    for pool in pools:
        w = pool.strategy.world_size
        for _ in range(pool.count):
            i = seen.get(pool.role, 0)
            seen[pool.role] = i + 1
            if w <= gpus_per_node:
                if gpu + w > gpus_per_node:
                    node, gpu = node + 1, 0
                nodes, gpus = (node,), tuple(range(gpu, gpu + w))
                gpu += w
                if gpu == gpus_per_node:
                    node, gpu = node + 1, 0
            else:
                require(
                    w % gpus_per_node == 0,
                    f"instance GPUs ({w}) must be a multiple of the node's {gpus_per_node}",
                )
                if gpu:
                    node, gpu = node + 1, 0
                span = w // gpus_per_node
                if span <= nodes_per_domain < node % nodes_per_domain + span:
                    node += nodes_per_domain - node % nodes_per_domain  # the next rack
                nodes, gpus = tuple(range(node, node + span)), tuple(range(gpus_per_node))
                node += span
            require(
                max(nodes) < num_nodes,
                f"deployment ({need} GPUs in instances of {w}) must fit {num_nodes} nodes",
            )
            k = len(out)
            out.append(
                Slot(
                    role=pool.role,
                    instance=i,
                    pool=pool,
                    nodes=nodes,
                    gpus=gpus,
                    port=SERVER_PORT + k,
                    dist_port=DIST_PORT + k,
                    bootstrap_port=BOOTSTRAP_PORT + k if pool.role == "prefill" else None,
                )
            )
    return out


def node_addr(node: int) -> str:
    """The shell variable holding node ``node``'s address in the launch scripts."""
    return f"${{NODE_{node}_ADDR}}"


def url(slot: Slot) -> str:
    """Where the router reaches ``slot`` (its first node)."""
    return f"http://{node_addr(slot.nodes[0])}:{slot.port}"


def summary(
    slots: Sequence[Slot],
    engine: str,
    router: bool,
    pinned: Sequence[dict[str, Any]] | None = None,
    copies: int = 1,
) -> dict[str, Any]:
    """``launch/deployment.json`` for one engine: every server's role, nodes, GPUs, port and
    degrees with what its command pins (``pinned``, one dict per slot: memory fraction,
    running cap, CUDA-graph batch, chunk, knobs), the pools, the copies of the planned
    deployment they make and the total GPUs (module docstring)."""
    pools: dict[str, dict[str, Any]] = {}
    servers = []
    for k, s in enumerate(slots):
        st = s.strategy
        servers.append(
            {
                **({} if pinned is None else {"pinned": pinned[k]}),
                "name": s.name,
                "role": s.role,
                "nodes": list(s.nodes),
                "gpus_per_node": list(s.gpus),
                "gpus": s.gpu_count,
                "port": s.port,
                "attn_tp": st.attn_tp,
                "attn_dp": st.attn_dp,
                "moe_tp": st.moe_tp,
                "moe_ep": st.moe_ep,
                "pp": st.pp,
            }
        )
        p = pools.setdefault(s.role, {"instances": 0, "layout": st.label})
        p["instances"] += 1
    return {
        "engine": engine,
        "gpus": sum(s.gpu_count for s in slots),
        "servers": servers,
        "pools": pools,
        "copies": copies,
        "router": {"node": 0, "port": ROUTER_PORT} if router else None,
    }
