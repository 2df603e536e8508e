"""The pricing record a command's ``plan.json`` carries (engine, tables, source mix)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from moeplan.planners.plan import Plan


def with_pricing(plan: Plan, price: dict[str, Any]) -> Plan:
    """``plan`` with ``details.pricing`` set (``price``: :func:`moeplan.kernel_tables.pricing`)."""
    return replace(plan, details={**plan.details, "pricing": price})
