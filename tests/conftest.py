"""Shared test configuration: the hypothesis profile every property test runs under.

Profile ``ci`` (the default) is derandomized: the examples are derived from each test's
name, so a run is the same on every machine and every time; ``database=None`` keeps a local
``.hypothesis`` folder from replaying examples another checkout never saw; ``deadline=None``
because a shared or slow machine must not turn a slow example into a failure.

``HYPOTHESIS_PROFILE=dev`` keeps the same settings but draws fresh random examples each run
(useful to hunt for new counterexamples locally; a failure prints its ``@example`` to pin).
A test's own ``@settings(max_examples=...)`` inherits the loaded profile for every setting it
does not name; tests must not set ``derandomize`` or ``database`` themselves.

Kernel cache: tests never read or write the user's ``~/.cache/moeplan``. Unless
``MOEPLAN_CACHE_DIR`` is already set (a caller's explicit choice, e.g. a CI cache), it is set
here, before moeplan is imported and for every subprocess a test starts, to
:data:`TEST_CACHE` under the checkout (``build/``, which ``make clean`` removes). A folder
kept between runs, not a per-session temporary one: the test suite builds about 190 MB of
kernel variants, which takes most of a cold run (tens of minutes on a loaded machine against
a few minutes warm).
"""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import settings

TEST_CACHE = Path(__file__).resolve().parent.parent / "build" / "test-cache"
os.environ.setdefault("MOEPLAN_CACHE_DIR", str(TEST_CACHE))

settings.register_profile("ci", derandomize=True, deadline=None, database=None, print_blob=True)
settings.register_profile("dev", derandomize=False, deadline=None, database=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or "ci")
