"""The busiest EP rank of one batch: :mod:`moeplan.cost.ep_spread` against sampled batches.

Tokens pick 8 of DeepSeek-V3's 256 experts — uniformly, or group-limited (4 of the 8 groups,
then 8 experts of those 128, the lmsys blog's "random expert selection following
group-limited routing semantics") — and a replicated expert's copy goes to one of its
replicas uniformly; EPLB places 256 equally loaded experts + 32 replicas. Prints the sampled
busiest rank over the mean (mean +- standard error) and the computed one: the product the
wide-EP price takes (placement x balanced spread) and the spread on the placement's shares.

Run: ``PYTHONPATH=src python bench/bench_ep_spread.py`` (about a minute).
"""

from __future__ import annotations

import numpy as np

from moeplan.cost.ep_spread import balanced_spread, spread
from moeplan.planners.placement.eplb import rebalance_experts

E, GROUPS, TOPK_GROUPS, K, R = 256, 8, 4, 8, 32


def _placement(ep: int, nodes: int) -> tuple[np.ndarray, np.ndarray]:
    groups = GROUPS if GROUPS % nodes == 0 else 1
    phy2log, _, cnt = rebalance_experts(np.ones((1, E)), E + R, groups, nodes, ep)
    return phy2log[0], cnt[0]


def sampled(ep: int, nodes: int, tokens: int, grouped: bool, trials: int = 60, seed: int = 0):
    """Mean and standard error of the busiest rank's copies over the mean."""
    rng = np.random.default_rng(seed)
    phy2log, cnt = _placement(ep, nodes)
    gpu = np.arange(E + R) // ((E + R) // ep)
    slots = [np.flatnonzero(phy2log == e) for e in range(E)]
    first = np.array([s[0] for s in slots])
    second = np.array([s[-1] for s in slots])
    out = []
    for _ in range(trials):
        if grouped:
            g = np.argsort(rng.random((tokens, GROUPS)), axis=1)[:, :TOPK_GROUPS]
            per = E // GROUPS
            cand = (g[:, :, None] * per + np.arange(per)).reshape(tokens, -1)
            pick = np.argsort(rng.random(cand.shape), axis=1)[:, :K]
            ex = np.take_along_axis(cand, pick, 1).ravel()
        else:
            ex = np.argsort(rng.random((tokens, E)), axis=1)[:, :K].ravel()
        other = (cnt[ex] > 1) & (rng.random(ex.size) < 0.5)  # at most two replicas here
        slot = np.where(other, second[ex], first[ex])
        counts = np.bincount(gpu[slot], minlength=ep)
        out.append(counts.max() / (tokens * K / ep))
    return float(np.mean(out)), float(np.std(out) / np.sqrt(trials))


CASES = ((72, 9, 128), (32, 4, 2048))  # (EP, nodes, tokens per GPU): decode and prefill halves


def _case(ep: int, nodes: int, per_gpu: int) -> dict[str, float]:
    phy2log, cnt = _placement(ep, nodes)
    assert cnt.max() <= 2
    shares = (1.0 / cnt[phy2log]).reshape(ep, -1).sum(axis=1) / E
    n = per_gpu * ep
    place = float(shares.max() * ep)
    uni, uni_se = sampled(ep, nodes, n, False)
    grp, grp_se = sampled(ep, nodes, n, True)
    return {
        "placement": place,
        "product": place * balanced_spread(n, ep, K, E),
        "shares": spread(n, shares, K, E),
        "uniform": uni,
        "uniform_se": uni_se,
        "grouped": grp,
        "grouped_se": grp_se,
    }


def run() -> list[dict]:
    """Rows for bench/run_all.py: computed on the shares vs sampled group-limited batches."""
    rows = []
    for ep, nodes, per_gpu in CASES:
        c = _case(ep, nodes, per_gpu)
        rows.append(
            {
                "name": f"busiest rank, EP{ep}+R{R}, {per_gpu} tokens per GPU",
                "value": c["shares"],
                "unit": "busiest rank's copies / mean (computed on the shares)",
                "reference": c["grouped"],
                "ratio": c["shares"] / c["grouped"],
                "target": "",
                "note": f"sampled group-limited +- {c['grouped_se']:.4f}; "
                f"uniform {c['uniform']:.4f}; product {c['product']:.4f}",
            }
        )
    return rows


def main() -> None:
    for ep, nodes, per_gpu in CASES:
        c = _case(ep, nodes, per_gpu)
        print(
            f"EP{ep}+R{R}, {per_gpu} tokens per GPU: placement {c['placement']:.4f}; "
            f"product {c['product']:.4f}; on the shares {c['shares']:.4f}; sampled uniform "
            f"{c['uniform']:.4f} +- {c['uniform_se']:.4f}, group-limited {c['grouped']:.4f} "
            f"+- {c['grouped_se']:.4f}"
        )


if __name__ == "__main__":
    main()
