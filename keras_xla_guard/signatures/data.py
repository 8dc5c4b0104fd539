"""tf.data helpers that keep XLA from recompiling for every batch shape.

A thin layer over `tf.data.Dataset.bucket_by_sequence_length` and
`tf.data.Dataset.padded_batch`: batching, padding and bucketing are
TensorFlow's own; these functions only choose the arguments so that a
dataset yields a small, fixed set of batch shapes (one XLA compilation each).
TensorFlow is imported when a function is called, not at import time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from keras_xla_guard._checks import check_bool, check_int

__all__ = ["pad_to_buckets"]


def _default_length_fn(element_spec: Any) -> Callable[..., Any]:
    """Length of the first component whose dimension 0 is unknown."""
    import tensorflow as tf

    flat = tf.nest.flatten(element_spec)
    index = next(
        (
            i
            for i, spec in enumerate(flat)
            if isinstance(spec, tf.TensorSpec) and spec.shape.rank and spec.shape[0] is None
        ),
        None,
    )
    if index is None:
        raise ValueError(
            "`length_fn` is required: no component of the dataset has a variable first "
            f"dimension to bucket by. Received a dataset with element_spec={element_spec!r}"
        )

    def length(*element: Any) -> Any:
        parts = element[0] if len(element) == 1 else element
        return tf.shape(tf.nest.flatten(parts)[index])[0]

    return length


def pad_to_buckets(
    dataset: Any,
    boundaries: Sequence[int],
    batch_size: int,
    *,
    length_fn: Callable[..., Any] | None = None,
    padding_values: Any = None,
    drop_remainder: bool = True,
) -> Any:
    """Batches variable-length examples into a few fixed padded shapes.

    Each example goes to the smallest bucket whose length is at least its
    own and is padded to exactly that length, so the batched dataset has at
    most `len(boundaries)` different shapes (with `drop_remainder=True`, no
    short last batches either): XLA compiles at most that many programs.
    This is `dataset.bucket_by_sequence_length(...,
    pad_to_bucket_boundary=True)` with TensorFlow's exclusive upper bounds
    computed from the padded lengths.

    Args:
        dataset: An *unbatched* `tf.data.Dataset` (one example per element),
            e.g. `(features, label)` pairs with variable-length features.
        boundaries: The padded lengths, e.g. `(16, 32, 64)`; as printed by
            the guard's recommendation. An example longer than the largest
            one makes the iterator raise a TensorFlow error
            ("elements must have length < max(bucket_boundaries)").
        batch_size: Examples per batch.
        length_fn: Function of an element returning its length (a scalar
            int tensor). Defaults to `None`: dimension 0 of the first
            component whose dimension 0 is variable.
        padding_values: Passed to `bucket_by_sequence_length`. Defaults to
            `None` (zeros).
        drop_remainder: Drop each bucket's final short batch. Defaults to
            `True` (a short batch is one more shape to compile).

    Returns:
        The batched, padded `tf.data.Dataset`.

    Raises:
        ValueError: If `boundaries` is empty, unsorted or not positive, if
            `batch_size` is not a positive int, `drop_remainder` not `True`
            or `False`, or if no length can be derived.

    Example:

    ```python
    import numpy as np
    import tensorflow as tf
    from keras_xla_guard import pad_to_buckets

    lengths = [5, 7, 9, 11, 13] * 8
    ds = tf.data.Dataset.from_generator(
        lambda: ((np.ones(n, "int32"), np.float32(n)) for n in lengths),
        output_signature=(tf.TensorSpec([None], tf.int32), tf.TensorSpec([], tf.float32)),
    )
    batched = pad_to_buckets(ds, boundaries=(7, 11, 13), batch_size=8)
    print({tuple(x.shape) for x, _ in batched})  # {(8, 7), (8, 11), (8, 13)}
    ```
    """
    if isinstance(boundaries, (str, bytes)) or not isinstance(boundaries, Sequence) or not boundaries:
        raise ValueError(
            f"`boundaries` must be a non-empty sequence of lengths. Received: boundaries={boundaries!r}"
        )
    for b in boundaries:
        check_int("boundaries", b, minimum=1)
    if list(boundaries) != sorted(set(boundaries)):
        raise ValueError(f"`boundaries` must be strictly increasing. Received: boundaries={boundaries!r}")
    check_int("batch_size", batch_size, minimum=1)
    check_bool("drop_remainder", drop_remainder)
    if length_fn is None:
        length_fn = _default_length_fn(dataset.element_spec)
    # TensorFlow buckets by exclusive upper bounds and pads to bound - 1;
    # the extra last bucket (>= the largest bound) is never used here.
    return dataset.bucket_by_sequence_length(
        element_length_func=length_fn,
        bucket_boundaries=[int(b) + 1 for b in boundaries],
        bucket_batch_sizes=[batch_size] * (len(boundaries) + 1),
        padding_values=padding_values,
        pad_to_bucket_boundary=True,
        drop_remainder=drop_remainder,
    )
