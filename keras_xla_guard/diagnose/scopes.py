"""Which Keras layer an op belongs to, read from its name scope.

TensorFlow names each op of a traced Keras step after the name scopes
around it: `sequential_1/dense_1_2/MatMul` is an op of the layer `dense_1`
(its gradient `gradient_tape/sequential_1/dense_1_2/MatMul/MatMul` too).
`explain` names the layer of each op XLA cannot compile with it, and the
guard names the layer of each op of a window's op table (the HTML page's
"layer" column). Pure: the layer names come from the caller.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

__all__ = ["op_layers", "owner_layer", "scopes_are_suffixed"]

_SUFFIX_RE = re.compile(r"_\d+$")
# Scopes TensorFlow wraps a whole traced step in: they name no layer.
_CALL_SCOPES = frozenset({"StatefulPartitionedCall", "PartitionedCall"})


def owner_layer(op_name: str, layer_names: frozenset[str], suffixed: bool) -> str | None:
    """The deepest Keras layer whose name scope holds `op_name`.

    Inside a traced step Keras 3.15 and earlier enter each layer's scope
    after its name was already taken once, so TensorFlow adds a `_N` suffix
    (`dense` -> `dense_1`, `dense_1` -> `dense_1_2`); there dropping one
    suffix comes first. Keras 3.16 enters the layer's own name: there the
    exact name comes first (`strings_1` is the layer `strings_1`).
    """
    for part in reversed(op_name.split("/")[:-1]):
        stripped = _SUFFIX_RE.sub("", part)
        for candidate in (stripped, part) if suffixed else (part, stripped):
            if candidate in layer_names:
                return candidate
    return None


def scopes_are_suffixed(op_names: Iterable[str], layer_names: frozenset[str]) -> bool:
    """Whether layer scopes carry TensorFlow's `_N` suffix in this trace.

    Evidence is a scope that is no layer's name but is one with the suffix
    dropped (`py_layer_1` for the layer `py_layer`).
    """
    for name in op_names:
        for part in name.split("/")[:-1]:
            if part not in layer_names and _SUFFIX_RE.sub("", part) in layer_names:
                return True
    return False


def op_layers(
    op_names: Sequence[str], layer_names: Iterable[str], optimizer: str | None = None
) -> tuple[str | None, ...]:
    """The Keras layer of each op, by its name scope.

    Args:
        op_names: The ops' full names, as a trace holds them.
        layer_names: The names of the model and all its nested layers.
        optimizer: The optimizer's name (its update ops sit in a scope of
            that name, e.g. `adam/truediv`). Defaults to `None`.

    Returns:
        Per op, the deepest layer whose scope holds it, `"optimizer
        <name>"` for the optimizer's update, or `None`.

    Example:

    ```python
    from keras_xla_guard.diagnose.scopes import op_layers

    op_layers(["StatefulPartitionedCall/gradient_tape/sequential_1/dense_1_2/MatMul/MatMul",
               "StatefulPartitionedCall/adam/truediv_5"],
              ["sequential", "dense", "dense_1"], optimizer="adam")
    # ('dense_1', 'optimizer adam')
    ```
    """
    names = frozenset(layer_names)
    suffixed = scopes_are_suffixed(op_names, names)
    found: list[str | None] = []
    for op_name in op_names:
        layer = owner_layer(op_name, names, suffixed)
        if layer is None and optimizer:
            scopes = [s for s in op_name.split("/")[:-1] if s not in _CALL_SCOPES]
            if scopes and _SUFFIX_RE.sub("", scopes[0]) == optimizer:
                layer = f"optimizer {optimizer}"
        found.append(layer)
    return tuple(found)
