"""The hypothesis profiles every property test runs under, and each test's example count.

Profile ``ci`` (the default, ``make test``) is derandomized: the examples are derived from
each test's name, so a run is the same on every machine and every time; ``database=None``
keeps a local ``.hypothesis`` folder from replaying examples another checkout never saw;
``deadline=None`` because a shared or slow machine must not turn a slow example into a
failure. It runs :data:`CI_SHARE` of each test's full example count, at least
:data:`CI_MIN_EXAMPLES`, so the suite fits its time budget (CONTRIBUTING.md, Test).

Profile ``full`` (``make test-slow`` runs every property test under it) has the same settings
and each test's full example count. ``HYPOTHESIS_PROFILE=dev`` keeps the full count but draws
fresh random examples each run (useful to hunt for new counterexamples locally; a failure
prints its ``@example`` to pin).

A test names its full count as ``@settings(max_examples=examples(N))`` and inherits the loaded
profile for every setting it does not name; tests must not set ``derandomize`` or ``database``
themselves.
"""

from __future__ import annotations

import os

from hypothesis import settings

# make test's share of a property test's full example count, and its floor. Measured on five
# property-heavy files (specs patterns, robust config, strategy comm, unpreempted engine, EPLB
# reference): a quarter reaches 4,166 of the 4,178 src/ lines the full counts reach, in about
# half the CPU time; the full counts run under make test-slow.
CI_SHARE = 0.25
CI_MIN_EXAMPLES = 10

for _name in ("ci", "full", "dev"):
    settings.register_profile(
        _name, derandomize=_name != "dev", deadline=None, database=None, print_blob=True
    )
PROFILE = os.environ.get("HYPOTHESIS_PROFILE") or "ci"


def load() -> None:
    """Load the profile named by ``HYPOTHESIS_PROFILE`` (``ci`` when unset)."""
    settings.load_profile(PROFILE)


def examples(full: int) -> int:
    """A property test's example count: ``full`` under ``full``/``dev``, a share under ``ci``."""
    if PROFILE != "ci":
        return full
    return min(full, max(CI_MIN_EXAMPLES, round(full * CI_SHARE)))
