"""Argument checks shared by every public entry point.

One wording for one mistake: `ValueError("`name` must be an integer >= 1.
Received: name=0")`, whoever raises it; a flag is `True` or `False`, never a
value Python would read as one (`bool("no")` is `True`).
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["check_bool", "check_int", "check_model", "is_int"]


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


def check_bool(name: str, value: Any) -> bool:
    """Returns `value` if it is `True` or `False`.

    A flag given as a string, a number or `None` is refused rather than
    read by its truth value: `fail_fast="no"` would otherwise turn the flag on.

    Args:
        name: The argument's name, quoted in the error.
        value: The value to check.

    Returns:
        `value`, unchanged.

    Raises:
        ValueError: Naming the argument and the value received.
    """
    if not isinstance(value, bool):
        raise ValueError(f"`{name}` must be True or False. Received: {name}={value!r}")
    return value


def check_model(name: str, value: Any) -> Any:
    """Returns `value` if it is a built Keras model instance (Keras 3 or tf_keras), or `None`.

    Keras is not imported: a model instance exists only once its Keras is,
    so the classes are looked up among the modules already loaded. A model
    class, an object that only looks like a model (`layers` and a
    `count_params`) and a model not built yet (no variables to count or
    name layers by) are refused.

    Args:
        name: The argument's name, quoted in the error.
        value: The value to check.

    Returns:
        `value`, unchanged.

    Raises:
        ValueError: Naming the argument, what is allowed and the value received.
    """
    if value is None:
        return None
    classes = [
        model
        for module in ("keras", "tf_keras")
        if (model := getattr(sys.modules.get(module), "Model", None)) is not None and isinstance(model, type)
    ]
    if isinstance(value, type) or not isinstance(value, tuple(classes)):
        what = "a model class" if isinstance(value, type) else f"a {type(value).__name__}, not a Keras model"
        raise ValueError(
            f"`{name}` must be a Keras model instance (keras.Model or tf_keras.Model) or None; got {what}. "
            f"Received: {name}={value!r}"
        )
    if getattr(value, "built", False) is not True:
        raise ValueError(
            f"`{name}` must be a built Keras model: build it first (call it on a batch, or "
            f"model.build(input_shape)). Received: {name}={value!r}"
        )
    return value
