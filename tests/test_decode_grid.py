"""The decode grid priced as far as its lower bound needs (``DecodeGrid``) gives the envelope
of the whole grid (``decode_envelope``) at every context, bit for bit, with the bound or
without it, whatever contexts are asked in whatever order; the kernel database's bound is
never above a price; and on a real table the bound spares blocks."""

from __future__ import annotations

import math
from bisect import bisect_left

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from moeplan.kernel_tables import engine_cost_model
from moeplan.serve.iteration.grid import bucket_grid
from moeplan.serve.iteration.model import (
    FLOOR_HORIZON,
    DecodeGrid,
    _grid_block,
    _horizon_end,
    decode_envelope,
)
from moeplan.specs import load_cluster, load_model

BEYOND = 300_000  # the grid is asked past the horizon up to here


def _full_grid() -> list[int]:
    grid, end = [], 0
    while end < BEYOND:
        block = _grid_block(end)
        grid += block
        end = block[-1]
    return grid


class _Prices:
    """Prices per context from a seed (a noisy trend: dips and spikes both), and bounds at
    a fraction of each; counts the rows priced."""

    def __init__(self, seed: int, trend: float, slack: float) -> None:
        rng = np.random.default_rng(seed)
        grid = _full_grid()
        noise = rng.lognormal(0.0, 0.3, len(grid))
        self.price = {
            c: (1.0 + trend * c / 1024) * 1e-4 * n for c, n in zip(grid, noise, strict=True)
        }
        self.bound = {c: p * slack for c, p in self.price.items()}
        self.rows = 0

    def blocks(self, blocks: list[tuple[int, ...]]) -> list[list[float]]:
        self.rows += sum(len(b) for b in blocks)
        return [[self.price[c] for c in b] for b in blocks]

    def floors(self, ctxs: list[int]) -> list[float]:
        return [self.bound[c] for c in ctxs]


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    trend=st.sampled_from([0.0, 0.01, 1.0, 50.0]),
    slack=st.sampled_from([0.2, 0.7, 1.0]),
    mode=st.sampled_from(["bound", "no bound", "not asked"]),
    asked=st.lists(st.integers(0, 10_000), min_size=1, max_size=12),
)
def test_the_grid_envelope_equals_the_whole_grids(seed, trend, slack, mode, asked):
    prices = _Prices(seed, trend, slack)
    grid = _full_grid()
    whole = decode_envelope(grid, [prices.price[c] for c in grid])
    floors = {"bound": prices.floors, "no bound": lambda ctxs: None, "not asked": None}[mode]
    lazy = DecodeGrid(prices.blocks, floors)
    for a in asked:
        i = a * (len(grid) - 1) // 10_000
        lazy.extend(grid[i])
        assert lazy.grid == grid[: len(lazy.grid)]
        assert lazy.top(i) == whole[i], (i, grid[i])
    if mode == "no bound":  # the whole grid within the horizon priced at the first ask
        assert prices.rows >= sum(1 for c in grid if c <= _horizon_end())


def test_a_bound_spares_blocks_of_a_growing_price():
    """Prices growing with the context: asking one context near the start prices its block
    and the next octave or two, not the ~400 contexts up to the horizon."""
    prices = _Prices(1, 50.0, 0.7)
    lazy = DecodeGrid(prices.blocks, prices.floors)
    lazy.top(bisect_left(lazy.grid, 1536))
    assert 0 < prices.rows <= 4 * len(_grid_block(1023))
    horizon = bucket_grid(FLOOR_HORIZON)
    assert prices.rows < len(horizon) / 4


def test_the_tables_bound_is_never_above_a_price():
    """``decode_core_floors`` (the kernel database's model and datasheet floor, the least
    residual's factor) is at most ``decode_core_prices`` at every grid context, for full and
    sliding-window attention of several batch sizes, on a GPU with tables and on one that
    borrows them; and it is not vacuous: within 3x of the price on most contexts."""
    grid = bucket_grid(FLOOR_HORIZON)
    model = load_model("gpt-oss-120b")
    for cluster in ("h100-sxm-8", "h200-sxm-8"):
        cm = engine_cost_model(load_cluster(cluster, 1), None, engine="vllm")
        for seqs in (1, 7, 100, 517):
            for layer in (None, model.sliding_layers[0]):
                price = np.array(cm.decode_core_prices(model, seqs, grid, 2, layer))
                floor = np.array(cm.decode_core_floors(model, seqs, grid, 2, layer))
                assert np.all(floor <= price), (cluster, seqs, layer)
                assert np.median(price / floor) < 3.0
                assert all(math.isfinite(x) for x in floor)
