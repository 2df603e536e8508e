"""The one ``Plan`` type: what every planner returns and what ``plan.json`` holds.

Every family builds a :class:`Plan`; ``plan.json`` is written from it (:meth:`Plan.to_json`)
and read back into it (:meth:`Plan.from_json`) here and nowhere else; the runtime's mesh
builder, the report and the launch-script exports consume it. Pure: strings in and out, no
file I/O (the CLI and :mod:`moeplan.io` read and write the file).

Schema ``moeplan.plan/1`` (docs/API.md)::

    {"schema": "moeplan.plan/1", "family": "strategy" | "ep" | "pipeline" | "dep",
     "model": str, "cluster": str, "layout": {...}, "details": {...},
     "predicted": {...}, "baselines": {...}}

``layout`` carries ``world_size`` for every family; its other keys are family-specific. Here
the envelope is validated (schema, family, the types of every section, a positive integer
world size) and :meth:`Plan.from_dict` then checks every family field against the schema
(:func:`moeplan.planners.plan_schema.check_plan`: types, ranges, sums) — so a tampered file
gets one line naming the field, never an ``AttributeError`` or a silently wrong answer.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from moeplan.errors import MoeplanError, require
from moeplan.planners.families import PLAN_FAMILIES
from moeplan.planners.plan_schema import check_plan

SCHEMA = "moeplan.plan/1"
MAX_WORLD_SIZE = 1 << 20  # far beyond any cluster; rejects absurd files before any allocation
MAX_PLAN_BYTES = 64 << 20  # a plan.json is a few kB; refuse to parse anything larger


@dataclass(frozen=True, kw_only=True)
class Plan:
    """A deployment of one family with its predicted metrics (see module docstring)."""

    family: str
    model: str
    cluster: str
    layout: dict[str, Any]
    details: dict[str, Any] = field(default_factory=dict)
    predicted: dict[str, Any] = field(default_factory=dict)
    baselines: dict[str, Any] = field(default_factory=dict)
    ranking: list[dict[str, Any]] = field(default_factory=list)
    """Every family's best plan on the common footing, best first (``moeplan plan`` only)."""

    def __post_init__(self) -> None:
        require(
            self.family in PLAN_FAMILIES,
            f"plan.family ({self.family!r}) must be one of {', '.join(PLAN_FAMILIES)}",
        )
        for name in ("model", "cluster"):
            value = getattr(self, name)
            require(isinstance(value, str), f"plan.{name} ({value!r}) must be a string")
        require(
            isinstance(self.ranking, list),
            f"plan.ranking ({type(self.ranking).__name__}) must be a list",
        )
        for name in ("layout", "details", "predicted", "baselines"):
            value = getattr(self, name)
            require(
                isinstance(value, Mapping),
                f"plan.{name} ({type(value).__name__}) must be a JSON object",
            )
        world = self.layout.get("world_size")
        require(
            isinstance(world, int) and not isinstance(world, bool) and 1 <= world <= MAX_WORLD_SIZE,
            f"plan.layout.world_size ({world!r}) must be an integer in 1..{MAX_WORLD_SIZE}",
        )

    @property
    def world_size(self) -> int:
        return int(self.layout["world_size"])

    def to_dict(self) -> dict[str, Any]:
        """The ``plan.json`` object (keys in schema order)."""
        return {
            "schema": SCHEMA,
            "family": self.family,
            "model": self.model,
            "cluster": self.cluster,
            "layout": self.layout,
            "details": self.details,
            "predicted": self.predicted,
            "baselines": self.baselines,
            **({"ranking": self.ranking} if self.ranking else {}),
        }

    def to_json(self) -> str:
        """``plan.json`` text; non-finite floats become ``null`` (JSON has no inf/nan)."""
        return json.dumps(_finite(self.to_dict()), indent=2) + "\n"

    @classmethod
    def from_dict(cls, data: Any) -> Plan:
        """Validate a decoded ``plan.json`` object (envelope and every family field) and build
        the :class:`Plan`."""
        if not isinstance(data, Mapping):
            raise MoeplanError(f"plan ({type(data).__name__}) must be a JSON object")
        require(
            data.get("schema") == SCHEMA, f"plan.schema ({data.get('schema')!r}) must be {SCHEMA!r}"
        )
        for key in ("family", "model", "cluster", "layout"):
            require(key in data, f"plan.{key} (missing) is required")
        plan = cls(
            family=data["family"],
            model=data["model"],
            cluster=data["cluster"],
            layout=dict(data["layout"]) if isinstance(data["layout"], Mapping) else data["layout"],
            details=_section(data, "details"),
            predicted=_section(data, "predicted"),
            baselines=_section(data, "baselines"),
            ranking=_ranking(data),
        )
        check_plan(data)  # the family's fields: types, ranges and sums (plan_schema.py)
        return plan

    @classmethod
    def from_json(cls, text: str | bytes, where: str = "plan.json") -> Plan:
        """Parse ``plan.json`` text (bounded size and depth) into a :class:`Plan`."""
        require(
            len(text) <= MAX_PLAN_BYTES,
            f"{where} ({len(text)} bytes) must be at most {MAX_PLAN_BYTES} bytes",
        )
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as err:
            msg = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise MoeplanError(f"{where} is not valid JSON ({msg})") from None
        return cls.from_dict(data)


def _section(data: Mapping[str, Any], key: str) -> Any:
    value = data.get(key)
    if value is None:
        return {}
    return dict(value) if isinstance(value, Mapping) else value


def _ranking(data: Mapping[str, Any]) -> Any:
    value = data.get("ranking")
    return [] if value is None else value


def _finite(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by None (valid, portable JSON)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    if hasattr(obj, "tolist"):  # numpy scalars and arrays
        return _finite(obj.tolist())
    return obj
