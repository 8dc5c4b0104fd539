"""The signature tap: the TensorFlow mechanics that record each batch's shape.

Keras 3 (TensorFlow backend) turns every input - tf.data datasets, NumPy
arrays, Python generators, `keras.utils.PyDataset` - into a `tf.data`
dataset and pulls each batch *inside* its compiled train function, so
neither callbacks nor Python ever see a batch.

`InputTap` records a batch's unknown dimensions: with a few host ops into
a ring buffer (`tf.Variable`) when the batch is a symbolic tensor inside a
traced function, or by reading `.shape` in Python when the batch is an
eager tensor. Where it records is decided by the flavour modules of this
seam (`attach`), or by the user: `InputTap.wrap(dataset)` maps the tap over
a `tf.data` dataset with no internals at all (`guard.observe(dataset)`).
The reader above the seam (`keras_xla_guard.signature_feed.SignatureFeed`)
drains it into the engine.
"""

from __future__ import annotations

from typing import Any

from keras_xla_guard._checks import check_int
from keras_xla_guard.signatures import Signature, flatten_leaves
from keras_xla_guard.trace.classify import GUARD_SCOPE

__all__ = ["KERAS_ROOT_NAMES", "InputTap"]

# Keras' names for the parts of a training batch, as signatures show them.
KERAS_ROOT_NAMES = ("x", "y", "sample_weight")


class InputTap:
    """Copies the unknown dimensions of each batch into a ring buffer.

    The tap numbers the batches with a counter variable that no iterator
    resets and writes `[index + 1, sizes...]` into row `(index + 1) % capacity`
    of an int64 `tf.Variable`: synchronous variable ops only (an async op
    such as a queue's enqueue pushes tf.data off its fast single-threaded
    function executor, which measured several times dearer). Readers copy
    the variable and keep the rows whose first column matches the index
    they expect, so they never wait.

    Args:
        element_spec: The batches' `element_spec`.
        capacity: Rows of the ring; must exceed the batches recorded
            between two reads. Defaults to `4096`.

    Attributes:
        template: The signature with `None` for every unknown dimension.
        host_recorded: Batches recorded in Python (`record_host`) so far.
        dims: `(leaf, dim)` pairs recorded per batch (dense tensors of
            known rank only; ragged and sparse parts stay unknown).

    Raises:
        ValueError: If `capacity` is not a positive int.
    """

    def __init__(self, element_spec: Any, capacity: int = 4096) -> None:
        import tensorflow as tf

        check_int("capacity", capacity, minimum=1)
        self.template = Signature.of(element_spec, root_names=KERAS_ROOT_NAMES)
        leaves = flatten_leaves(element_spec)
        self.dims = tuple(
            (leaf, dim)
            for leaf, dim in self.template.dynamic_dims()
            if isinstance(leaves[leaf], tf.TensorSpec)
        )
        self.capacity = capacity
        from keras_xla_guard.seam.tf_internals import local_variable

        self._ring = local_variable(tf.zeros([capacity, 1 + len(self.dims)], tf.int64)) if self.dims else None
        self._count = local_variable(tf.constant(0, tf.int64)) if self.dims else None
        self._read = 0
        # Batches recorded in Python (eager batches), oldest first.
        self._host: list[tuple[int, ...]] = []
        self.host_recorded = 0
        self._cache: dict[tuple[int, ...], Signature] = {}

    @property
    def static(self) -> bool:
        """Whether every batch has the template's signature (nothing to record)."""
        return self._ring is None

    @property
    def distinct(self) -> int:
        """Different signatures read so far."""
        return len(self._cache)

    def record_host(self, element: Any) -> tuple[int, ...] | None:
        """Records one eager batch's unknown dimensions from Python, with no TF op.

        Keras 3.16 pulls the batch in Python when `steps_per_execution == 1`;
        its shapes are then plain Python values. A symbolic batch (inside a
        traced function) goes to `record` instead.

        Args:
            element: A batch with the structure of `element_spec`.

        Returns:
            The recorded sizes (`()` for a static tap, which records
            nothing), or `None` when the batch was symbolic.
        """
        if self._ring is None:
            return ()
        leaves = flatten_leaves(element)
        sizes = tuple(leaves[leaf].shape[dim] for leaf, dim in self.dims)
        if any(size is None for size in sizes):
            self.record(element)
            return None
        key = tuple(int(size) for size in sizes)
        self._host.append(key)
        self.host_recorded += 1
        return key

    def record(self, element: Any) -> Any:
        """Writes one batch's unknown dimensions into the ring.

        Works in a `tf.function` (adding a few ops to its graph); an eager
        batch is recorded in Python (`record_host`). The batch itself is not
        touched.

        Args:
            element: A batch with the structure of `element_spec`.

        Returns:
            The batch's 1-based number, an int64 scalar tensor.

        Raises:
            RuntimeError: If the tap is static (has no ring).
        """
        # A tap has both variables or, when static, neither.
        if self._ring is None or self._count is None:
            raise RuntimeError("a static tap records nothing")
        import tensorflow as tf

        if not tf.inside_function():
            self.record_host(element)
            return tf.constant(len(self._host), tf.int64)
        leaves = flatten_leaves(element)
        # One absolute scope (the trailing "/"), never uniquified to
        # `xla_guard_tap_1`, so the analysis can book these ops as the
        # guard's own instead of the user's non-XLA op time.
        with tf.name_scope(GUARD_SCOPE + "/"):
            sizes = [tf.shape(leaves[leaf], out_type=tf.int64)[dim] for leaf, dim in self.dims]
            # A data dependency orders the counter after the batch (a control
            # dependency does not reach the AssignAddVariableOp in a
            # tf.function, and tf.ones_like of a scalar is a constant): a
            # `get_next` that fails at the end of the data must not count.
            tag = self._count.assign_add(tf.raw_ops.OnesLike(x=sizes[0]))
            # Batch `index` is row `tag % capacity` (tag = index + 1): the
            # fewest ops per batch, since every op here runs on every step.
            tf.raw_ops.ResourceScatterUpdate(
                resource=self._ring.handle,
                indices=tag % self.capacity,
                updates=tf.stack([tag, *sizes]),
            )
        return tag

    def wrap(self, dataset: Any, prefetch: bool = True) -> Any:
        """Returns `dataset` with the recording map appended (or unchanged).

        Args:
            dataset: The `tf.data.Dataset` whose element_spec built the tap.
            prefetch: Append `prefetch(1)`, which moves the map off the
                consumer's thread but records one batch ahead of the
                steps. Defaults to `True`.

        Returns:
            A dataset yielding the same elements in the same order.
        """
        if self._ring is None:
            return dataset
        unpack = type(dataset.element_spec) is tuple

        def record(*args: Any) -> Any:
            element = args if unpack else args[0]
            # A stateful op in a tf.data function runs without a data
            # dependency; the element is returned untouched.
            self.record(element)
            return element

        mapped = dataset.map(record)
        return mapped.prefetch(1) if prefetch else mapped

    def skip_recorded(self) -> None:
        """Moves the read position past every batch recorded so far.

        A tap reused by a later `fit` starts reading at that fit's first batch.
        """
        if self._count is not None:
            self._read = int(self._count.numpy())
        self._host.clear()

    def take(self, limit: int) -> list[tuple[Signature, int]]:
        """Reads up to `limit` recorded batches, oldest first.

        Args:
            limit: Most batches to read.

        Returns:
            Runs of consecutive batches with equal signatures, as
            `(signature, count)` in training order; fewer batches than
            `limit` when fewer were recorded.

        Raises:
            RuntimeError: If unread rows were overwritten (more than
                `capacity` batches recorded between two reads).
        """
        if self._ring is None or limit <= 0:
            return []
        import numpy as np

        if self._host:
            taken, self._host[:limit] = self._host[:limit], []
            return self._runs(np.asarray(taken, dtype=np.int64).reshape(len(taken), len(self.dims)))
        wanted = np.arange(self._read, self._read + limit, dtype=np.int64)
        rows = self._ring.numpy()[(wanted + 1) % self.capacity]
        valid = rows[:, 0] == wanted + 1
        if not valid.all():
            first = int(np.argmin(valid))
            if rows[first, 0] > wanted[first] + 1:
                raise RuntimeError(f"more than {self.capacity} batches were recorded between two reads")
            rows = rows[:first]
        self._read += len(rows)
        return self._runs(rows[:, 1:])

    def _runs(self, sizes: Any) -> list[tuple[Signature, int]]:
        """Runs of equal rows of `sizes` as `(signature, count)`."""
        import numpy as np

        starts = [0, *(np.flatnonzero((sizes[1:] != sizes[:-1]).any(axis=1)) + 1).tolist()]
        runs = []
        for begin, stop in zip(starts, [*starts[1:], len(sizes)]):
            if begin == stop:
                continue
            key = tuple(sizes[begin].tolist())
            sig = self._cache.get(key)
            if sig is None:
                sig = self._cache[key] = self.template.with_dims(self.dims, key)
            runs.append((sig, stop - begin))
        return runs
