"""Recording the concrete shape of every batch `model.fit` trains on.

Keras 3 (TensorFlow backend) turns every input - tf.data datasets, NumPy
arrays, Python generators, `keras.utils.PyDataset` - into a `tf.data`
dataset and iterates it *inside* its compiled train function, so neither
callbacks nor Python ever see a batch. The tap appends one sequential
`map` (followed by `prefetch(1)`, so it runs on tf.data's own thread, off the
training step's critical path) to the dataset of `fit`'s epoch iterator.
The map copies only the batch's *unknown* dimensions (those `None` in the
dataset's `element_spec`) into a ring buffer (a `tf.Variable`) - pure
TensorFlow ops, no Python per batch; the callback reads the ring as training
goes (after every step while new shapes keep appearing, every 512 steps once
they stop) and at the end of each epoch. The elements themselves pass through unchanged.
When the `element_spec` is fully static, no map is added at all: every
batch has the static signature.

The dataset is found by walking up from the callback to `fit`'s frame
(Keras has no public hook for it): Keras 3 keeps it in the local
`epoch_iterator` (`_distributed_dataset`), tf_keras in `data_handler`
(`_dataset`); both build the epoch's iterator from it only after
`on_train_begin`. If that fails (another Keras version, a distributed
tf_keras dataset), a warning says so and training goes on without
signature tracking.
"""

from __future__ import annotations

import sys
from typing import Any

from keras_xla_guard.signatures import Signature, flatten_leaves

__all__ = ["DRAIN_EVERY", "InputTap", "KerasInputTracker", "find_fit_dataset"]

# A drain copies the ring (one eager op). The drain interval starts at 1 step, doubles
# after every drain that found no new signature and drops back to 1 when one
# did: new shapes (compilations) are seen within a step or two, which lets the
# guards warn before TensorFlow's megamorphic threshold, while steady-state
# training drains only every 512 steps. (TensorFlow's megamorphic rule needs
# a new shape every < 50 steps on average, so the interval stays short
# exactly when the warning matters.)
DRAIN_EVERY = 512
KERAS_ROOT_NAMES = ("x", "y", "sample_weight")
# fit -> CallbackList.on_train_begin -> our hook -> helpers: a few frames.
_MAX_FRAMES = 12
# (local variable of fit, attribute holding the dataset it iterates):
# Keras 3's TensorFlow trainer, then tf_keras.
_DATASET_HOLDERS = (("epoch_iterator", "_distributed_dataset"), ("data_handler", "_dataset"))


def find_fit_dataset(model: Any) -> tuple[Any, str] | None:
    """Finds where the running `model.fit` call keeps its training dataset.

    Args:
        model: The Keras model whose `fit` is on the call stack.

    Returns:
        `(holder, attribute)`: `getattr(holder, attribute)` is the dataset
        `fit` will iterate; `None` if no caller frame of `fit` has one.
    """
    frame = sys._getframe(1)
    for _ in range(_MAX_FRAMES):
        if frame is None:
            return None
        local = frame.f_locals
        if local.get("self") is model:
            for name, attribute in _DATASET_HOLDERS:
                holder = local.get(name)
                if holder is not None and hasattr(holder, attribute):
                    return holder, attribute
        frame = frame.f_back
    return None


def _local_variable(initial_value: Any) -> Any:
    """A plain resource variable, even inside a `tf.distribute` strategy scope.

    tf_keras calls callbacks inside `strategy.scope()`, where `tf.Variable`
    becomes a `MirroredVariable`, which has no `scatter_nd_update`; the tap's
    ring lives on the host input pipeline and must stay one local variable.
    Constructing `ResourceVariable` directly skips the strategy's variable
    creator.
    """
    from tensorflow.python.ops import resource_variable_ops

    return resource_variable_ops.ResourceVariable(initial_value, trainable=False)


class InputTap:
    """Copies the unknown dimensions of each dataset element into a ring buffer.

    The tap numbers the elements with a counter variable that no iterator
    resets and writes `[index + 1, sizes...]` into row `index % capacity`
    of an int64 `tf.Variable`: synchronous variable ops only (an async op
    such as a queue's enqueue pushes tf.data off its fast single-threaded
    function executor, which measured several times dearer). Readers copy the variable and keep the rows whose
    first column matches the index they expect, so they never wait.

    Args:
        element_spec: The dataset's `element_spec`.
        capacity: Rows of the ring; must exceed the batches produced
            between two reads. Defaults to `4096`.

    Attributes:
        template: The signature with `None` for every unknown dimension.
        dims: `(leaf, dim)` pairs recorded per element (dense tensors of
            known rank only; ragged and sparse parts stay unknown).

    Raises:
        ValueError: If `capacity` is not a positive int.
    """

    def __init__(self, element_spec: Any, capacity: int = 4096) -> None:
        import tensorflow as tf

        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"`capacity` must be an integer >= 1. Received: capacity={capacity!r}")
        self.template = Signature.of(element_spec, root_names=KERAS_ROOT_NAMES)
        leaves = flatten_leaves(element_spec)
        self.dims = tuple(
            (leaf, dim)
            for leaf, dim in self.template.dynamic_dims()
            if isinstance(leaves[leaf], tf.TensorSpec)
        )
        self.capacity = capacity
        self._ring = (
            _local_variable(tf.zeros([capacity, 1 + len(self.dims)], tf.int64))
            if self.dims
            else None
        )
        self._count = _local_variable(tf.constant(0, tf.int64)) if self.dims else None
        self._read = 0
        self._cache: dict[tuple[int, ...], Signature] = {}

    @property
    def static(self) -> bool:
        """Whether every batch has the template's signature (nothing to record)."""
        return self._ring is None

    @property
    def distinct(self) -> int:
        """Different signatures read so far."""
        return len(self._cache)

    def wrap(self, dataset: Any) -> Any:
        """Returns `dataset` with the recording map appended (or unchanged).

        Args:
            dataset: The `tf.data.Dataset` whose element_spec built the tap.

        Returns:
            A dataset yielding the same elements in the same order.
        """
        if self._ring is None:
            return dataset
        import tensorflow as tf

        ring, count, dims = self._ring, self._count, self.dims
        capacity, width, unpack = self.capacity, 1 + len(self.dims), type(dataset.element_spec) is tuple

        def record(*args: Any) -> Any:
            element = args if unpack else args[0]
            index = count.assign_add(1) - 1
            leaves = flatten_leaves(element)
            sizes = [tf.shape(leaves[leaf], out_type=tf.int64)[dim] for leaf, dim in dims]
            row = tf.reshape(tf.stack([index + 1, *sizes]), [1, width])
            # A stateful op in a tf.data function runs without a data
            # dependency; the element is returned untouched.
            ring.scatter_nd_update(tf.reshape(index % capacity, [1, 1]), row)
            return element

        return dataset.map(record).prefetch(1)

    def take(self, limit: int) -> list[tuple[Signature, int]]:
        """Reads up to `limit` recorded batches, oldest first.

        Args:
            limit: Most batches to read.

        Returns:
            Runs of consecutive batches with equal signatures, as
            `(signature, count)` in training order; fewer batches than
            `limit` when fewer were produced.

        Raises:
            RuntimeError: If unread rows were overwritten (more than
                `capacity` batches produced between two reads).
        """
        if self._ring is None or limit <= 0:
            return []
        import numpy as np

        wanted = np.arange(self._read, self._read + limit, dtype=np.int64)
        rows = self._ring.numpy()[wanted % self.capacity]
        valid = rows[:, 0] == wanted + 1
        if not valid.all():
            first = int(np.argmin(valid))
            if rows[first, 0] > wanted[first] + 1:
                raise RuntimeError(f"more than {self.capacity} batches were produced between two reads")
            rows = rows[:first]
        sizes = rows[:, 1:]
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
        self._read += len(sizes)
        return runs


class KerasInputTracker:
    """Feeds the signatures of `fit`'s training batches to an engine.

    Args:
        engine: The `XlaGuardEngine` receiving `observe_signature` calls.
    """

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.tap: InputTap | None = None
        self.unavailable_reason = ""
        self._spe = 1
        self._steps_hint: int | None = None
        self._seen = 0
        self._last_begin = -1
        self._interval = 1

    def attach(self, model: Any, steps_hint: int | None) -> bool:
        """Installs the tap on the running `fit` call's dataset.

        Args:
            model: The Keras model being fitted.
            steps_hint: Steps per epoch, if Keras knows them.

        Returns:
            Whether signatures will be recorded.
        """
        import tensorflow as tf

        self.tap = None
        self._interval = sys.maxsize
        spe = getattr(model, "steps_per_execution", 1) or 1
        # tf_keras keeps it in a tf.Variable, mirrored under a strategy.
        self._spe = int(spe.numpy() if hasattr(spe, "numpy") else spe)
        self._steps_hint = steps_hint
        found = find_fit_dataset(model)
        if found is None:
            self.unavailable_reason = "the fit() call's dataset was not found on the call stack"
            return False
        holder, attribute = found
        dataset = getattr(holder, attribute)
        strategy = None
        if isinstance(dataset, tf.distribute.DistributedDataset):
            # Under a strategy Keras (3 and tf_keras) distributes its
            # dataset; the tap goes on that dataset (global batches, before
            # the split into per-replica batches), which is then
            # distributed again the same way.
            strategy = getattr(model, "distribute_strategy", None)
            original = getattr(dataset, "_original_dataset", None)
            dataset = original if strategy is not None and original is not None else dataset
        if not isinstance(dataset, tf.data.Dataset):
            self.unavailable_reason = (
                f"the training input is a {type(dataset).__name__}, not a tf.data.Dataset"
            )
            return False
        tap = InputTap(dataset.element_spec, capacity=max(4096, 2 * (DRAIN_EVERY + self._spe) + 64))
        wrapped = tap.wrap(dataset)
        if strategy is not None:
            wrapped = strategy.experimental_distribute_dataset(wrapped)
        setattr(holder, attribute, wrapped)
        self.tap = tap
        self._interval = sys.maxsize if tap.static else 1
        return True

    def begin_epoch(self) -> None:
        """Resets the per-epoch step count.

        The drain interval carries over: shapes that settled in one epoch
        stay settled, and a new one still brings the interval back to 1.
        """
        self._seen = 0
        self._last_begin = -1

    def step(self, begin_step: int) -> None:
        """Notes the start of a train-function call; drains now and then.

        Args:
            begin_step: Index of the call's first step within the epoch.
        """
        self._last_begin = begin_step
        if begin_step - self._seen < self._interval:
            return
        tap = self.tap
        if tap is None:
            return
        known = tap.distinct
        self._drain(begin_step)
        self._interval = 1 if tap.distinct > known else min(2 * self._interval, DRAIN_EVERY)

    def end_epoch(self) -> None:
        """Records the epoch's remaining batches."""
        if self.tap is None or self._last_begin < 0:
            return
        done = self._last_begin + self._spe
        if self._steps_hint:
            done = min(done, self._steps_hint)
        self._drain(done)

    def _drain(self, done: int) -> None:
        """Records steps `[self._seen, done)`, as far as the tap has them."""
        tap = self.tap
        assert tap is not None
        pending = done - self._seen
        if pending <= 0:
            return
        if tap.static:
            self.engine.observe_signature(tap.template, step=self._seen, count=pending)
            self._seen = done
            return
        # One engine call per run of equal shapes, not per step.
        for sig, count in tap.take(pending):
            self.engine.observe_signature(sig, step=self._seen, count=count)
            self._seen += count
