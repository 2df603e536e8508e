"""Shared test configuration: the hypothesis profile every property test runs under
(:mod:`hypothesis_budget` describes the profiles and each test's example count)."""

from __future__ import annotations

import hypothesis_budget

hypothesis_budget.load()
