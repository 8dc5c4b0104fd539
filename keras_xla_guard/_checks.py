"""Argument checks shared by every public entry point.

One wording for one mistake: `ValueError("`name` must be an integer >= 1.
Received: name=0")`, whoever raises it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["check_int", "is_int"]


def is_int(value: Any) -> bool:
    """Whether `value` is an `int` and not a `bool` (which Python counts as one)."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_int(name: str, value: Any, *, minimum: int, allow_none: bool = False) -> Any:
    """Returns `value` if it is an integer >= `minimum` (or `None` when allowed).

    Args:
        name: The argument's name, quoted in the error.
        value: The value to check.
        minimum: The smallest allowed value.
        allow_none: Whether `None` is allowed. Defaults to `False`.

    Returns:
        `value`, unchanged.

    Raises:
        ValueError: Naming the argument, what is allowed and the value received.
    """
    if value is None and allow_none:
        return None
    if not is_int(value) or value < minimum:
        allowed = f"an integer >= {minimum}" + (" or None" if allow_none else "")
        raise ValueError(f"`{name}` must be {allowed}. Received: {name}={value!r}")
    return value
