"""`warm_up` for Keras on JAX: each function run once per signature on a copy of the model's state.

Keras' JAX trainer is stateless: a step takes the model's state and returns
the new one. So the warm-up never changes the model: each run gets a fresh
copy of the state (which the jitted step donates) and its outputs are
dropped (`seam.keras3_jax.run_on_copy`). The programs land in the same
`jax.jit` caches `fit` then looks up, for batches of the same shapes and
dtypes. Signatures are given as shapes or arrays: no TensorFlow, no
`tf.data`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from keras_xla_guard.signatures.signature import Signature

__all__ = ["warm_up_jax"]

_ROOT_NAMES = ("x", "y", "sample_weight")


def _is_shape(value: Any) -> bool:
    return isinstance(value, (tuple, list)) and all(
        isinstance(d, int) and not isinstance(d, bool) for d in value
    )


def _zeros(structure: Any, floatx: str) -> Any:
    """Zeros for every shape leaf of one signature (arrays keep their dtype)."""
    import numpy as np

    if hasattr(structure, "shape") and hasattr(structure, "dtype"):
        if any(d is None for d in structure.shape):
            raise ValueError(f"Signatures need fully known shapes. Received: {structure!r}")
        return np.zeros(tuple(structure.shape), dtype=str(getattr(structure.dtype, "name", structure.dtype)))
    if _is_shape(structure):
        return np.zeros(tuple(structure), dtype=floatx)
    if isinstance(structure, dict):
        return {key: _zeros(value, floatx) for key, value in structure.items()}
    if isinstance(structure, (tuple, list)) and structure:
        return tuple(_zeros(item, floatx) for item in structure)
    raise ValueError(
        "Each signature must be a nested structure (tuples, dicts) of shapes (tuples of ints) or "
        f"arrays. Received: {structure!r}"
    )


def warm_up_jax(
    model: Any, shapes: Any, *, element_spec: Any, steps: Sequence[str]
) -> tuple[tuple[Signature, ...], float, tuple[str, ...]]:
    """`warm_up` on Keras' JAX backend (see `keras_xla_guard.warm_up`).

    Returns:
        `(signatures warmed, seconds, notes)`, for `warm_up`'s report.

    Raises:
        ValueError: If `shapes` is not a list of signatures, or
            `element_spec` is given (a `tf.data` notion).
    """
    import keras

    from keras_xla_guard.seam import keras3_jax

    if element_spec is not None:
        raise ValueError(
            f"`element_spec` is a tf.data notion; under JAX give the signatures' arrays or shapes. "
            f"Received: element_spec={element_spec!r}"
        )
    if not isinstance(shapes, (list, tuple)) or not shapes:
        raise ValueError(
            "Under JAX, `shapes_or_dataset` must be a non-empty list of signatures, each the structure "
            f"of one batch, e.g. [((32, 16), (32, 1))]. Received: shapes_or_dataset={shapes!r}"
        )
    started = time.perf_counter()
    floatx = keras.config.floatx()
    from keras_xla_guard import seam

    batches = [_zeros(item, floatx) for item in shapes]
    notes = []
    # As on TensorFlow: a predict step creates no variables of its own.
    trains = any(step != "predict" for step in steps)
    # Keras' fit builds what is unbuilt from its first batch, drawing a shuffle; once built
    # here it would not, and would shuffle differently: the next build draws anyway.
    draws = keras3_jax.builds_from_a_batch(model) if trains else False
    reason = seam.build_for_training(model, batches[0]) if trains else None
    if reason is not None:
        notes.append(f"{seam.keras_version(model)}: could not build the model ahead ({reason})")
    if draws is None or (draws and keras3_jax.keep_first_draw(model) is not None):
        notes.append(
            f"{seam.keras_version(model)}: the next fit may shuffle its batches differently than without "
            "the warm-up (Keras' build step that draws the first shuffle is not where the guard knows it)"
        )
    for step in steps:
        runs = [(b[0],) if step == "predict" and isinstance(b, tuple) else b for b in batches]
        reason = keras3_jax.run_on_copy(model, step, runs)
        if reason is not None:
            notes.append(f"{step} not warmed: {reason}")
    signatures = tuple(Signature.of(b, root_names=_ROOT_NAMES) for b in batches)
    return signatures, time.perf_counter() - started, tuple(notes)
