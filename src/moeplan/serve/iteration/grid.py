"""The engine's context grid: decode (and prefill chunk) contexts are rounded to it before an
iteration is priced, so iteration times are memoised per grid cell (:mod:`.engine`)."""

from __future__ import annotations

__all__ = ["bucket", "bucket_grid"]


def bucket(ctx: int) -> int:
    """``ctx`` rounded to the midpoint of its cell on a grid of relative step 1/32 to 1/64
    (cells of ``2^s`` tokens for contexts of ``s + 6`` bits; exact below 64): the memo key.
    A context on a cell boundary moves up by half a cell (2,048 -> 2,080)."""
    s = ctx.bit_length() - 6
    if s <= 0:
        return ctx
    return ((ctx >> s) << s) + (1 << (s - 1))


def bucket_grid(limit: int) -> list[int]:
    """Every value :func:`bucket` returns that is ``<= limit``, ascending (1..63, then 32
    cell midpoints per octave)."""
    out = list(range(1, min(limit, 63) + 1))
    bits = 7
    while (1 << (bits - 1)) <= limit:
        s = bits - 6
        start = (1 << (bits - 1)) + (1 << (s - 1))
        out.extend(range(start, min(limit, (1 << bits) - 1) + 1, 1 << s))
        bits += 1
    return out
