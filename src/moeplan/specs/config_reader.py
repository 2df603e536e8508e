"""Typed, bounded access to one (sub-)object of a model ``config.json``.

Every read names what it read: a bad value is one :class:`~moeplan.errors.MoeplanError` line
``config[<file>].<path>.<key> (<value>) must ...`` — the file, the key, the value, the rule.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from moeplan.errors import MoeplanError, check_float, check_int, show
from moeplan.specs.limits import MAX_LAYERS


class Cfg:
    """One JSON object of the config file ``name`` at key path ``at`` (``""``: the root)."""

    def __init__(self, data: Any, name: str, at: str = "") -> None:
        if not isinstance(data, dict):
            where = f".{at.rstrip('.')}" if at else ""
            raise MoeplanError(f"config[{name}]{where} must be a JSON object, got "
                               f"{type(data).__name__}")  # fmt: skip
        self.data, self.name, self.at = data, name, at

    def field(self, key: str) -> str:
        return f"config[{self.name}].{self.at}{key}"

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def raw(self, key: str, default: Any = None) -> Any:
        v = self.data.get(key)
        return default if v is None else v

    def sub(self, key: str) -> Cfg | None:
        """The object under ``key`` (``None`` when absent or null)."""
        v = self.data.get(key)
        return None if v is None else Cfg(v, self.name, f"{self.at}{key}.")

    def int(self, *keys: str, default: int | None = None, lo: int = 0,
            hi: int | None = None) -> int:  # fmt: skip
        """The first of ``keys`` present, as an int in ``[lo, hi]``; else ``default`` (a
        missing key without a default is an error naming every key tried)."""
        for k in keys:
            if self.has(k):
                return check_int(self.field(k), self.data[k], lo, hi)
        if default is None:
            raise MoeplanError(f"config[{self.name}] is missing required key "
                               f"{' or '.join(self.at + k for k in keys)!r}")  # fmt: skip
        return default

    def float(self, key: str, default: float, hi: float | None = None) -> float:
        if not self.has(key):
            return default
        return check_float(self.field(key), self.data[key], 0.0, hi)

    def flag(self, key: str, default: bool) -> bool:
        if not self.has(key):
            return default
        v = self.data[key]
        if not isinstance(v, bool):
            raise MoeplanError(f"{self.field(key)} ({show(v)}) must be true or false")
        return v

    def text(self, key: str, default: str, allowed: Iterable[str] | None = None) -> str:
        if not self.has(key):
            return default
        v = self.data[key]
        if not isinstance(v, str) or len(v) > 200:
            raise MoeplanError(f"{self.field(key)} ({show(v)}) must be a short string")
        if allowed is not None and v not in allowed:
            raise MoeplanError(f"{self.field(key)} ({show(v)}) is not supported: supported "
                               f"values are {', '.join(allowed)}")  # fmt: skip
        return v

    def per_layer(self, key: str, n: int, allowed: Iterable[Any], *, at_least: bool = False
                  ) -> tuple[Any, ...]:  # fmt: skip
        """A list of one value per layer (``at_least``: extra trailing entries, e.g. for
        multi-token-prediction layers, are allowed and dropped), each in ``allowed``."""
        v = self.data.get(key)
        ok_len = isinstance(v, list) and (len(v) >= n if at_least else len(v) == n)
        if not ok_len or len(v) > MAX_LAYERS:  # type: ignore[arg-type]
            raise MoeplanError(f"{self.field(key)} ({show(v)}) must list one value per layer "
                               f"({n})")  # fmt: skip
        allowed = tuple(allowed)
        for i, x in enumerate(v[:n]):  # type: ignore[index]
            if isinstance(x, bool) or x not in allowed:
                raise MoeplanError(
                    f"{self.field(key)}[{i}] ({show(x)}) is not supported: "
                    f"supported values are {', '.join(map(str, allowed))}"
                )
        return tuple(v[:n])  # type: ignore[index]

    def must_be(self, key: str, allowed: tuple[Any, ...], why: str) -> None:
        """A key that would change the model's shape in a way moeplan does not model: when
        present it must hold one of ``allowed`` (``why``: what other values would mean)."""
        if key in self.data and self.data[key] not in allowed:
            raise MoeplanError(
                f"{self.field(key)} ({show(self.data[key])}) is not supported: "
                f"{why}; supported values are {', '.join(map(repr, allowed))}"
            )
