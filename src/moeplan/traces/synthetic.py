"""Seeded synthetic routing traces with the structure Sem-MoE observes in real models.

Sem-MoE (paper 002) App. A reports four regularities of real MoE routing; the generator builds
each one in explicitly, with a knob per effect (all in :class:`SynthConfig`):

1. **Zipf token frequencies** (``zipf_s``) over a vocabulary of ``vocab_size`` tokens.
2. **Topic-dependent requests** (App. A.1): a request draws a topic; with probability
   ``topic_share`` a token comes from the topic's vocabulary (tokens of the topic's
   ``groups_per_topic`` semantic groups), else from the global Zipf law. Topics also add
   ``topic_strength`` to the gate logits of their groups' experts.
3. **Context-independent token-expert preference with high kurtosis** (App. A.2): every token
   belongs to one of ``num_groups`` semantic groups; per layer it favours ``favored`` experts,
   each drawn from its group's expert community with probability ``group_fidelity``
   (else uniformly); they get ``pref_strength`` added to the gate logits.
4. **Context noise**: ``noise_scale`` x standard normal noise on every logit.
5. **Inter-layer Markov correlation** (App. A.2, B.1): every expert e of layer l-1 has a
   successor at layer l (in the same group community); the successors of the experts chosen at
   l-1 get ``markov_strength`` added at layer l.

Routing is top-k of the logits (ordered by logit, highest first). Everything is drawn from one
``numpy.random.Generator`` seeded with ``seed``; the same config gives the same trace.
Departure from the paper: the paper measures real models; this is a model of those
measurements, and :mod:`moeplan.traces.stats` reports the same statistics so a user can tune
the knobs to match a real dump.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from moeplan.errors import require
from moeplan.traces.format import RoutingTrace, concat


@dataclass(frozen=True, kw_only=True, slots=True)
class SynthConfig:
    """Knobs of the synthetic generator (defaults: DeepSeek-V2-Lite shape, acceptance trace).

    The shape defaults are the model's; the locality strengths (``topic_share``,
    ``topic_strength``, ``group_fidelity``, ``pref_strength``, ``noise_scale``,
    ``markov_strength``) have no source: they build in the effects Sem-MoE App. A reports, at
    strengths not fitted to a real routing dump, so what a placement gains on this trace
    (docs/benchmarks/placement.md) is a property of these values."""

    num_layers: int = 26
    num_experts: int = 64
    top_k: int = 6
    vocab_size: int = 32000
    num_requests: int = 1024
    min_len: int = 64
    max_len: int = 448
    zipf_s: float = 1.1
    num_topics: int = 64
    groups_per_topic: int = 2
    topic_share: float = 0.6
    topic_strength: float = 0.8
    num_groups: int = 16
    favored: int = 4
    group_fidelity: float = 0.85
    pref_strength: float = 3.0
    noise_scale: float = 1.0
    markov_strength: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in (
            "num_layers",
            "num_experts",
            "top_k",
            "vocab_size",
            "num_requests",
            "min_len",
            "num_topics",
            "num_groups",
            "favored",
        ):
            require(getattr(self, name) >= 1, f"synth.{name} ({getattr(self, name)}) must be >= 1")
        require(
            self.top_k <= self.num_experts,
            f"synth.top_k ({self.top_k}) must be <= num_experts ({self.num_experts})",
        )
        require(
            self.num_experts % self.num_groups == 0,
            f"synth.num_experts ({self.num_experts}) must be divisible by num_groups "
            f"({self.num_groups})",
        )
        require(
            self.max_len >= self.min_len,
            f"synth.max_len ({self.max_len}) must be >= min_len ({self.min_len})",
        )
        require(
            self.groups_per_topic <= self.num_groups,
            f"synth.groups_per_topic ({self.groups_per_topic}) must be <= num_groups",
        )
        for name in ("topic_share", "group_fidelity"):
            v = getattr(self, name)
            require(0.0 <= v <= 1.0, f"synth.{name} ({v}) must lie in [0, 1]")


@dataclass(frozen=True, kw_only=True, slots=True)
class _World:
    """The hidden structure drawn once per seed."""

    token_prob: np.ndarray  # [V] global Zipf probabilities
    topic_cdf: list[tuple[np.ndarray, np.ndarray]]  # per topic: (token ids, cdf)
    fav: np.ndarray  # [V, L, m] favoured experts
    topic_bias: np.ndarray  # [T, L, E]
    succ: np.ndarray  # [L, E] successor at layer l of expert e at l-1


def _world(cfg: SynthConfig, rng: np.random.Generator) -> _World:
    v, num_l, e, g = cfg.vocab_size, cfg.num_layers, cfg.num_experts, cfg.num_groups
    ranks = rng.permutation(v)
    prob = 1.0 / (ranks + 1.0) ** cfg.zipf_s
    prob /= prob.sum()
    group = rng.integers(0, g, size=v)
    # community of each group per layer: members[l, g, :] = experts of group g at layer l
    members = np.stack([rng.permutation(e).reshape(g, e // g) for _ in range(num_l)])
    comm = np.empty((num_l, e), dtype=np.int64)
    for layer in range(num_l):
        comm[layer, members[layer].ravel()] = np.repeat(np.arange(g), e // g)
    pick = rng.integers(0, e // g, size=(v, num_l, cfg.favored))
    in_group = members[np.arange(num_l)[None, :, None], group[:, None, None], pick]
    anywhere = rng.integers(0, e, size=(v, num_l, cfg.favored))
    faithful = rng.random((v, num_l, cfg.favored)) < cfg.group_fidelity
    fav = np.where(faithful, in_group, anywhere).astype(np.int16)
    topic_groups = np.stack(
        [rng.choice(g, cfg.groups_per_topic, replace=False) for _ in range(cfg.num_topics)]
    )
    topic_bias = np.zeros((cfg.num_topics, num_l, e), dtype=np.float32)
    topic_cdf = []
    for z in range(cfg.num_topics):
        topic_bias[z] = cfg.topic_strength * np.isin(comm, topic_groups[z])
        ids = np.flatnonzero(np.isin(group, topic_groups[z]))
        if len(ids) == 0:
            ids = np.arange(v)
        cdf = np.cumsum(prob[ids])
        topic_cdf.append((ids, cdf / cdf[-1]))
    succ = np.zeros((num_l, e), dtype=np.int64)
    for layer in range(1, num_l):
        slot = rng.integers(0, e // g, size=e)
        succ[layer] = members[layer, comm[layer - 1], slot]
    return _World(token_prob=prob, topic_cdf=topic_cdf, fav=fav, topic_bias=topic_bias, succ=succ)


def _draw_tokens(
    cfg: SynthConfig,
    world: _World,
    rng: np.random.Generator,
    topic: np.ndarray,
    lengths: np.ndarray,
) -> np.ndarray:
    n = int(lengths.sum())
    tok_topic = np.repeat(topic, lengths)
    global_cdf = np.cumsum(world.token_prob)
    tokens = np.searchsorted(global_cdf, rng.random(n) * global_cdf[-1]).clip(
        max=cfg.vocab_size - 1
    )
    from_topic = rng.random(n) < cfg.topic_share
    for z in np.unique(tok_topic[from_topic]):
        sel = np.flatnonzero(from_topic & (tok_topic == z))
        ids, cdf = world.topic_cdf[z]
        tokens[sel] = ids[np.searchsorted(cdf, rng.random(len(sel))).clip(max=len(ids) - 1)]
    return tokens.astype(np.int64)


def _route(
    cfg: SynthConfig,
    world: _World,
    rng: np.random.Generator,
    tokens: np.ndarray,
    tok_topic: np.ndarray,
) -> np.ndarray:
    n, k, e = len(tokens), cfg.top_k, cfg.num_experts
    experts = np.empty((n, cfg.num_layers, k), dtype=np.int16)
    rows = np.arange(n)[:, None]
    prev: np.ndarray | None = None
    for layer in range(cfg.num_layers):
        logits = rng.standard_normal((n, e), dtype=np.float32) * np.float32(cfg.noise_scale)
        logits += world.topic_bias[tok_topic, layer]
        fav = world.fav[tokens, layer]
        for j in range(fav.shape[1]):
            logits[rows[:, 0], fav[:, j]] += np.float32(cfg.pref_strength)
        if prev is not None and cfg.markov_strength:
            logits[rows, world.succ[layer, prev]] += np.float32(cfg.markov_strength)
        top = np.argpartition(-logits, k - 1, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(logits, top, axis=1), axis=1, kind="stable")
        chosen = np.take_along_axis(top, order, axis=1)
        experts[:, layer] = chosen
        prev = chosen
    return experts


def iter_synthesize(cfg: SynthConfig, chunk_requests: int = 256) -> Iterator[RoutingTrace]:
    """Generate the trace as chunks of whole requests (bounded memory)."""
    rng = np.random.default_rng(cfg.seed)
    world = _world(cfg, rng)
    topics = rng.integers(0, cfg.num_topics, size=cfg.num_requests)
    lengths = rng.integers(cfg.min_len, cfg.max_len + 1, size=cfg.num_requests)
    for lo in range(0, cfg.num_requests, chunk_requests):
        hi = min(cfg.num_requests, lo + chunk_requests)
        crng = np.random.default_rng([cfg.seed, lo])
        tokens = _draw_tokens(cfg, world, crng, topics[lo:hi], lengths[lo:hi])
        tok_topic = np.repeat(topics[lo:hi], lengths[lo:hi])
        experts = _route(cfg, world, crng, tokens, tok_topic)
        rid = np.repeat(np.arange(lo, hi, dtype=np.int64), lengths[lo:hi])
        starts = np.repeat(np.cumsum(lengths[lo:hi]) - lengths[lo:hi], lengths[lo:hi])
        pos = (np.arange(len(tokens)) - starts).astype(np.int32)
        yield RoutingTrace(
            request_id=rid,
            position=pos,
            token_id=tokens,
            experts=experts,
            num_experts=cfg.num_experts,
        )


def synthesize(cfg: SynthConfig | None = None, **overrides: object) -> RoutingTrace:
    """The whole synthetic trace as arrays (``synthesize(num_requests=64, seed=1)``)."""
    if cfg is None:
        cfg = SynthConfig(**overrides)  # type: ignore[arg-type]
    return concat(list(iter_synthesize(cfg)))


def uniform_trace(
    *,
    num_requests: int,
    length: int,
    num_layers: int,
    num_experts: int,
    top_k: int,
    vocab_size: int = 1000,
    seed: int = 0,
) -> RoutingTrace:
    """A trace with no structure: tokens and their k experts drawn uniformly at random."""
    rng = np.random.default_rng(seed)
    n = num_requests * length
    keys = rng.random((n * num_layers, num_experts))
    experts = np.argpartition(keys, top_k - 1, axis=1)[:, :top_k].astype(np.int16)
    return RoutingTrace(
        request_id=np.repeat(np.arange(num_requests, dtype=np.int64), length),
        position=np.tile(np.arange(length, dtype=np.int32), num_requests),
        token_id=rng.integers(0, vocab_size, size=n).astype(np.int64),
        experts=experts.reshape(n, num_layers, top_k),
        num_experts=num_experts,
    )
