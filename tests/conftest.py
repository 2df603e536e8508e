"""Shared test configuration: the hypothesis profile every property test runs under, and
the kernel cache the tests use.

The profiles and each test's example count: :mod:`hypothesis_budget`.

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

import hypothesis_budget

TEST_CACHE = Path(__file__).resolve().parent.parent / "build" / "test-cache"
os.environ.setdefault("MOEPLAN_CACHE_DIR", str(TEST_CACHE))

hypothesis_budget.load()
