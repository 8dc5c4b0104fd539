"""Padding variable-length examples to a few lengths, so that XLA compiles a few programs.

`pad_to_buckets` batches examples into a small, fixed set of padded shapes
(one XLA compilation each), whatever holds them:

- a `tf.data.Dataset` (when TensorFlow is installed): a thin layer over
  `bucket_by_sequence_length`, which does the batching, padding and
  bucketing; the result is a `tf.data.Dataset`;
- NumPy arrays or lists, a generator or other iterable of examples, or a
  `keras.utils.PyDataset`: the examples are read once, into memory, and a
  `keras.utils.PyDataset` serves the padded batches. `model.fit` takes it
  on every Keras 3 backend, and nothing here needs TensorFlow.

TensorFlow and Keras are imported when a function is called, not at import time.
"""

from __future__ import annotations

import bisect
import functools
import operator
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from keras_xla_guard._checks import check_bool, check_int

__all__ = ["pad_to_buckets"]

_ACCEPTED = (
    "a tf.data.Dataset, NumPy arrays or lists of examples (alone, or as a tuple or dict of them), "
    "a generator or other iterable of examples, or a keras.utils.PyDataset"
)


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


def _instance_of(value: Any, module: str, *path: str) -> bool:
    """Whether `value` is an instance of `module.path...`, without importing `module`.

    A value of a class from a module nobody imported cannot exist, so a
    module not in `sys.modules` answers False.
    """
    cls: Any = sys.modules.get(module)
    for name in path:
        cls = getattr(cls, name, None)
    return isinstance(cls, type) and isinstance(value, cls)


def pad_to_buckets(
    data: Any,
    boundaries: Sequence[int],
    batch_size: int,
    *,
    length_fn: Callable[..., Any] | None = None,
    padding_values: Any = None,
    drop_remainder: bool = True,
) -> Any:
    """Batches variable-length examples into a few fixed padded shapes.

    Each example goes to the smallest bucket whose length is at least its
    own and is padded to exactly that length, so the batches have at most
    `len(boundaries)` different shapes (with `drop_remainder=True`, no
    short last batches either): XLA compiles at most that many programs.

    On a `tf.data.Dataset` this is `dataset.bucket_by_sequence_length(...,
    pad_to_bucket_boundary=True)` with TensorFlow's exclusive upper bounds
    computed from the padded lengths. Anything else is read once, into
    memory, and padded with NumPy; the batches come in the order their
    buckets fill (except that the second batch is the first of another
    bucket, which Keras on TensorFlow needs), each bucket's examples in
    their order in `data`.

    Args:
        data: The *unbatched* examples (one per element), e.g. `(tokens,
            label)` pairs with variable-length tokens, as
            - a `tf.data.Dataset` of examples;
            - a NumPy array or a list of examples (a list inside an
              example is one array: `[3, 1, 4]` is a sequence of 3);
            - a tuple or dict of such arrays or lists, one entry per
              example each, e.g. `(token_lists, labels)`;
            - a generator or other iterable of examples;
            - a `keras.utils.PyDataset`, whose batches are split into
              their examples.
        boundaries: The padded lengths, e.g. `(16, 32, 64)`; as printed by
            the guard's recommendation. An example longer than the largest
            one makes the tf.data iterator raise a TensorFlow error
            ("elements must have length < max(bucket_boundaries)"), and
            other data a `ValueError` here.
        batch_size: Examples per batch.
        length_fn: Function of an example (a tuple's parts as arguments,
            as tf.data calls it) returning its length. Defaults to `None`:
            on tf.data, dimension 0 of the first component whose dimension
            0 is variable; else the first dimension that varies between
            examples, in the first component that has one.
        padding_values: On tf.data, passed to `bucket_by_sequence_length`;
            else one number for every padded component. Defaults to
            `None` (zeros).
        drop_remainder: Drop each bucket's final short batch. Defaults to
            `True` (a short batch is one more shape to compile).

    Returns:
        On a `tf.data.Dataset`, the batched, padded `tf.data.Dataset`; else
        a `keras.utils.PyDataset` of the padded batches, each with the
        examples' structure (arrays stacked along a new dimension 0, every
        dimension that varies between examples padded to the bucket
        length). `model.fit` takes either.

    Raises:
        ValueError: If `boundaries` is empty, unsorted or not positive, if
            `batch_size` is not a positive int, `drop_remainder` not `True`
            or `False`, if `data` is none of the
            types above, holds examples of different structures, or no full
            batch, if no length can be derived, or (except on tf.data) if
            an example is longer than the largest boundary.

    Example:

    ```python
    import numpy as np
    from keras_xla_guard import pad_to_buckets

    lengths = [5, 7, 9, 11, 13] * 8
    tokens = [np.ones(n, "int32") for n in lengths]
    labels = np.array(lengths, "float32")
    batches = pad_to_buckets((tokens, labels), boundaries=(7, 11, 13), batch_size=8)
    print({x.shape for x, _ in batches})  # {(8, 7), (8, 11), (8, 13)}
    # model.fit(batches, epochs=3): at most 3 train compilations
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
    bounds = [int(b) for b in boundaries]
    if not _instance_of(data, "tensorflow", "data", "Dataset"):
        examples = _examples(data)
        return _pad_examples(examples, bounds, batch_size, length_fn, padding_values, bool(drop_remainder))
    if length_fn is None:
        length_fn = _default_length_fn(data.element_spec)
    # TensorFlow buckets by exclusive upper bounds and pads to bound - 1;
    # the extra last bucket (>= the largest bound) is never used here.
    return data.bucket_by_sequence_length(
        element_length_func=length_fn,
        bucket_boundaries=[b + 1 for b in bounds],
        bucket_batch_sizes=[batch_size] * (len(bounds) + 1),
        padding_values=padding_values,
        pad_to_bucket_boundary=True,
        drop_remainder=drop_remainder,
    )


# ----------------------------------------------------------- in memory, with NumPy


def _leaves(example: Any) -> list[Any]:
    """An example's arrays, in `Signature` order: tuples in order, dict keys sorted."""
    if isinstance(example, dict):
        return [leaf for key in sorted(example) for leaf in _leaves(example[key])]
    if isinstance(example, tuple):
        return [leaf for part in example for leaf in _leaves(part)]
    return [example]


def _rebuild(template: Any, leaves: Iterator[Any]) -> Any:
    """`template`'s structure with its leaves taken from `leaves`, in `_leaves` order."""
    if isinstance(template, dict):
        return {key: _rebuild(template[key], leaves) for key in sorted(template)}
    if isinstance(template, tuple):
        return tuple(_rebuild(part, leaves) for part in template)
    return next(leaves)


def _split(components: Any, what: str) -> list[Any]:
    """The examples of arrays (or lists) holding one entry per example, each with their structure."""
    leaves = _leaves(components)
    counts = set()
    for leaf in leaves:
        if not hasattr(leaf, "__len__") or getattr(leaf, "ndim", 1) == 0:
            raise ValueError(
                f"Each part of {what} must hold one entry per example (an array or a list). "
                f"Received a part of type {type(leaf).__name__}: {leaf!r}"
            )
        counts.add(len(leaf))
    if len(counts) != 1:
        raise ValueError(f"The parts of {what} hold different numbers of examples: {sorted(counts)}.")
    return [_rebuild(components, iter([leaf[i] for leaf in leaves])) for i in range(counts.pop())]


def _examples(data: Any) -> list[Any]:
    """The examples `data` holds, read once; a clear error for anything `pad_to_buckets` does not take."""
    import numpy as np

    if isinstance(data, (tuple, dict)):
        return _split(data, "`data`")
    if isinstance(data, np.ndarray) and data.ndim >= 1:
        return list(data)
    if _instance_of(data, "keras", "utils", "PyDataset"):
        count = data.num_batches
        if count is None:
            raise ValueError(
                "`data` is an infinite keras.utils.PyDataset (num_batches is None): it has no last example."
            )
        examples = []
        for index in range(count):
            batch = data[index]
            batch = tuple(batch) if isinstance(batch, list) else batch
            examples += _split(batch, f"batch {index} of the PyDataset")
        return examples
    if isinstance(data, list):
        return data
    if isinstance(data, Iterable) and not isinstance(data, (str, bytes, np.ndarray)):
        return list(data)
    raise ValueError(f"`data` must be {_ACCEPTED}. Received: data of type {type(data).__name__}")


def _pad_examples(
    examples: list[Any],
    bounds: list[int],
    batch_size: int,
    length_fn: Callable[..., Any] | None,
    padding_values: Any,
    drop_remainder: bool,
) -> Any:
    import numpy as np

    if not examples:
        raise ValueError("`data` holds no examples.")
    if padding_values is None:
        padding_values = 0
    if isinstance(padding_values, (bool, np.bool_)) or not isinstance(
        padding_values, (int, float, np.number)
    ):
        raise ValueError(
            "`padding_values` must be one number for data other than a tf.data.Dataset. "
            f"Received: padding_values={padding_values!r}"
        )
    template = examples[0]
    arrays = [[np.asarray(leaf) for leaf in _leaves(example)] for example in examples]
    _check_structure(arrays, examples)
    varying = [
        tuple(d for d in range(first.ndim) if len({a[j].shape[d] for a in arrays}) > 1)
        for j, first in enumerate(arrays[0])
    ]
    lengths, varying = _lengths(examples, arrays, varying, length_fn)
    too_long = [n for n in lengths if n > bounds[-1]]
    if too_long:
        raise ValueError(
            f"An example has length {max(too_long)}, longer than the largest boundary {bounds[-1]} "
            f"({len(too_long)} of {len(lengths)} examples are): make it the longest your data has. "
            f"Received: boundaries={tuple(bounds)}"
        )
    bucket_of = [bounds[bisect.bisect_left(bounds, n)] for n in lengths]
    for i, bound in enumerate(bucket_of):
        for j, dims in enumerate(varying):
            wider = [arrays[i][j].shape[d] for d in dims if arrays[i][j].shape[d] > bound]
            if wider:
                raise ValueError(
                    f"Example {i} has length {lengths[i]} (bucket {bound}), but part {j} of it has size "
                    f"{wider[0]} in a dimension that varies: pass `length_fn` returning the longest."
                )
    plan = _plan(bucket_of, batch_size, drop_remainder)
    if not plan:
        raise ValueError(
            f"No bucket fills one batch of batch_size={batch_size} from {len(examples)} examples "
            "(drop_remainder=False keeps short batches)."
        )

    def build(bound: int, indices: tuple[int, ...]) -> Any:
        stacked = []
        for j, dims in enumerate(varying):
            parts = [arrays[i][j] for i in indices]
            if dims:
                parts = [
                    np.pad(
                        part,
                        [(0, bound - part.shape[d]) if d in dims else (0, 0) for d in range(part.ndim)],
                        constant_values=padding_values,
                    )
                    for part in parts
                ]
            stacked.append(np.stack(parts))
        return _rebuild(template, iter(stacked))

    return _padded_batches_class()(plan, build)


def _check_structure(arrays: list[list[Any]], examples: list[Any]) -> None:
    """Every example has the first one's parts, each of the same rank and dtype kind."""
    first = arrays[0]
    for i, parts in enumerate(arrays):
        if len(parts) != len(first) or any(p.ndim != f.ndim for p, f in zip(parts, first, strict=False)):
            raise ValueError(
                f"Every example must have the structure of the first: example {i} is {examples[i]!r}, "
                f"the first {examples[0]!r}."
            )


def _lengths(
    examples: list[Any],
    arrays: list[list[Any]],
    varying: list[tuple[int, ...]],
    length_fn: Callable[..., Any] | None,
) -> tuple[list[int], list[tuple[int, ...]]]:
    """Each example's length, and the dimensions to pad per part.

    The length is `length_fn`'s, else the first varying dimension's. When no
    dimension varies, it is the first array's dimension 0, which is then
    padded to the bucket like a varying one.
    """
    if length_fn is not None:
        lengths = []
        for example in examples:
            n = length_fn(*example) if isinstance(example, tuple) else length_fn(example)
            try:
                value = operator.index(n)
            except TypeError:
                value = -1
            if value < 0:
                raise ValueError(f"`length_fn` must return an integer >= 0 per example. Received: {n!r}")
            lengths.append(value)
        return lengths, varying
    where = next(((j, dims[0]) for j, dims in enumerate(varying) if dims), None)
    if where is None:
        where = next(((j, 0) for j, a in enumerate(arrays[0]) if a.ndim >= 1), None)
        if where is None:
            raise ValueError(
                "`length_fn` is required: no part of the examples is an array to take a length from. "
                f"Received a first example {examples[0]!r}"
            )
        varying = [(0,) if j == where[0] else dims for j, dims in enumerate(varying)]
    j, d = where
    return [int(a[j].shape[d]) for a in arrays], varying


def _plan(bucket_of: list[int], batch_size: int, drop_remainder: bool) -> list[tuple[int, tuple[int, ...]]]:
    """`(bucket length, example indices)` per batch, each emitted as its bucket fills."""
    pending: dict[int, list[int]] = {}
    plan = []
    for index, bound in enumerate(bucket_of):
        members = pending.setdefault(bound, [])
        members.append(index)
        if len(members) == batch_size:
            plan.append((bound, tuple(members)))
            pending[bound] = []
    if not drop_remainder:
        plan += [(bound, tuple(members)) for bound, members in sorted(pending.items()) if members]
    # Keras on TensorFlow turns a PyDataset into a tf.data pipeline whose element spec it infers
    # from the first two batches (keras/src/trainers/data_adapters/py_dataset_adapter.py,
    # `get_tf_dataset`): a length both share is fixed in that spec, and every batch of another
    # bucket is then rejected. So the first two batches come from two buckets when there are two.
    other = next((k for k, (bound, _) in enumerate(plan) if bound != plan[0][0]), None)
    if other is not None and other > 1:
        plan.insert(1, plan.pop(other))
    return plan


@functools.cache
def _padded_batches_class() -> type:
    """`PaddedBatches`, a `keras.utils.PyDataset` (defined on first use: it imports Keras)."""
    import keras

    class PaddedBatches(keras.utils.PyDataset):
        """The padded batches `pad_to_buckets` planned, built from the examples on demand."""

        def __init__(self, plan: list[tuple[int, tuple[int, ...]]], build: Callable[..., Any]) -> None:
            super().__init__()
            self._plan = plan
            self._build = build

        def __len__(self) -> int:
            return len(self._plan)

        def __getitem__(self, index: int) -> Any:
            return self._build(*self._plan[index])

    PaddedBatches.__qualname__ = "PaddedBatches"
    return PaddedBatches
