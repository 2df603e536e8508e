"""The project's one user-facing error type.

Every mistake a user can make (bad config, impossible layout, unknown preset, corrupt file)
raises :class:`MoeplanError` with one line that names the field, the value and the rule,
e.g. ``model.num_experts (63) must be divisible by ep (8)``. The CLI prints that line on
stderr and exits with code 2; nothing else is shown.
"""

from __future__ import annotations


class MoeplanError(ValueError):
    """A user-facing validation error: one line naming field, value and rule."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


def require(cond: bool, message: str) -> None:
    """Raise :class:`MoeplanError` with ``message`` unless ``cond`` holds."""
    if not cond:
        raise MoeplanError(message)
