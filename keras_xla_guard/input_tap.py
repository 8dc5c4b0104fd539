"""Recording the concrete shape of every batch `model.fit` trains on.

Keras 3 (TensorFlow backend) turns every input - tf.data datasets, NumPy
arrays, Python generators, `keras.utils.PyDataset` - into a `tf.data`
dataset and pulls each batch *inside* its compiled train function, so
neither callbacks nor Python ever see a batch.

`InputTap` records a batch's unknown dimensions: with a few host ops into
a ring buffer (`tf.Variable`) when the batch is a symbolic tensor inside a
traced function, or by reading `.shape` in Python when the batch is an
eager tensor. Where it records is Keras' business, decided in
`keras_xla_guard.seam` (the one module that touches Keras internals), or
the user's: `KerasInputTracker.observe(dataset)` maps the tap over a
`tf.data` dataset with no internals at all.

`KerasInputTracker` reads the tap as training goes (after every step while
new shapes keep appearing, every 512 steps once they stop) and at the end
of each epoch, where it checks that it recorded one batch per step that
ran. When it did not, or when no Keras flavour fits, one `XlaGuardWarning`
names the Keras version and the epoch's signature figures are `None`
("unavailable"), never a silent zero.
"""

from __future__ import annotations

import sys
from typing import Any

from keras_xla_guard._checks import check_int
from keras_xla_guard.trace.classify import GUARD_SCOPE
from keras_xla_guard.signatures import Signature, flatten_leaves

__all__ = ["DRAIN_EVERY", "InputTap", "KerasInputTracker"]

# A drain copies the ring (one eager op). The drain interval starts at 1 step, doubles
# after every drain that found no new signature and drops back to 1 when one
# did: new shapes (compilations) are seen within a step or two, which lets the
# guards warn before TensorFlow's megamorphic threshold, while steady-state
# training drains only every 512 steps. (TensorFlow's megamorphic rule needs
# a new shape every < 50 steps on average, so the interval stays short
# exactly when the warning matters.)
DRAIN_EVERY = 512
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

        self._ring = (
            local_variable(tf.zeros([capacity, 1 + len(self.dims)], tf.int64))
            if self.dims
            else None
        )
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
        if self._ring is None:
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


class KerasInputTracker:
    """Feeds the signatures of `fit`'s training batches to an engine.

    Attaches through `keras_xla_guard.seam` at `on_train_begin` (or uses
    the tap of `observe`), reads the recorded batches as training goes, and
    checks at every epoch end that it read one batch per step that ran.

    Args:
        engine: The `XlaGuardEngine` receiving `observe_signature` calls and,
            when figures cannot be trusted, `signatures_unavailable`.
    """

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.tap: InputTap | None = None
        self.attachment: Any = None
        self._observed: InputTap | None = None
        self._expect = False
        self._spe = 1
        self._steps_hint: int | None = None
        self._seen = 0
        self._last_begin = -1
        self._epoch: int | None = None
        self._interval = sys.maxsize

    def observe(self, dataset: Any) -> Any:
        """Returns `dataset` with a map that records every batch's signature.

        The public path: no Keras internal is touched. `fit` must train on
        the returned dataset; the tracker then reads this tap instead of
        attaching to Keras' train function.

        Args:
            dataset: A `tf.data.Dataset` of training batches.

        Returns:
            The same batches, in the same order.

        Raises:
            ValueError: If `dataset` is not a `tf.data.Dataset`.
        """
        import tensorflow as tf

        if not isinstance(dataset, tf.data.Dataset):
            raise ValueError(
                "observe() takes a tf.data.Dataset of training batches (wrap NumPy arrays with "
                "tf.data.Dataset.from_tensor_slices(...).batch(n)). "
                f"Received: dataset={dataset!r}"
            )
        tap = InputTap(dataset.element_spec)
        self._observed = tap
        # No prefetch: the map then runs when the step asks for the batch,
        # so batches are recorded as they are trained on, not ahead.
        return tap.wrap(dataset, prefetch=False)

    def use_observed(self) -> None:
        """Reads the tap of `observe` (custom loops), if there is one."""
        if self._observed is None:
            return
        self._spe = 1
        self._steps_hint = None
        self._expect = True
        self._bind(self._observed)

    def attach(self, model: Any, steps_hint: int | None, on_abort: Any, record: bool = True) -> Any:
        """Connects to the running `fit` call (see `keras_xla_guard.seam.attach`).

        Args:
            model: The Keras model being fitted.
            steps_hint: Steps per epoch, if Keras knows them.
            on_abort: Called when an exception leaves an epoch or a step.
            record: Record batches through the seam (`False`: exit hook only).

        Returns:
            The seam's `Attachment`.
        """
        from keras_xla_guard import seam

        self.detach()
        self.tap = None
        self._interval = sys.maxsize
        self._spe = seam.steps_per_execution(model)
        self._steps_hint = steps_hint
        observed = self._observed
        self.attachment = seam.attach(
            model, self._bind, on_abort, record=record and observed is None
        )
        self._expect = record
        if record and observed is not None:
            self._bind(observed)
        elif record and not self.attachment.recording:
            self._unavailable(self.attachment.reason)
        return self.attachment

    def _bind(self, tap: InputTap | None) -> None:
        """Starts reading `tap` (`None`: this fit's batches cannot be recorded)."""
        if tap is None:
            self.tap = None
            self._interval = sys.maxsize
            self._unavailable(
                "its batches arrive split across replicas and the dataset fit() distributes "
                "was not found"
            )
            return
        if tap is self.tap:
            return
        self.tap = tap
        tap.skip_recorded()
        self._interval = sys.maxsize if tap.static else 1

    def detach(self) -> None:
        """Puts back everything the seam changed (end of `fit`)."""
        if self.attachment is not None:
            self.attachment.detach()

    def begin_epoch(self, epoch: int | None = None) -> None:
        """Resets the per-epoch step count.

        The drain interval carries over: shapes that settled in one epoch
        stay settled, and a new one still brings the interval back to 1.
        """
        self._epoch = epoch
        self._seen = 0
        self._last_begin = -1
        if self.attachment is not None:
            self.attachment.arm()

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
        """Records the epoch's remaining batches and checks none is missing.

        Every step that ran must have been recorded: all of them when Keras
        knows the steps per epoch; over data of unknown length all but the
        last `steps_per_execution` (the last call may find the end of the
        data and run no step, the one before it fewer steps).
        """
        if not self._expect or self._last_begin < 0:
            return
        done = self._last_begin + self._spe
        if self._steps_hint:
            done = min(done, self._steps_hint)
        if self.tap is not None:
            self._drain(done)
        # Over data of unknown length the last call may find the end of the
        # data and run no step, and the one before it fewer than
        # steps_per_execution: only the steps before those two calls are certain.
        needed = done if self._steps_hint else max(0, self._last_begin - self._spe + 1)
        if self.tap is not None and self._seen >= needed:
            return
        from keras_xla_guard import seam

        # The attachment names the Keras that runs the model (tf_keras beside Keras 3 too).
        attachment = self.attachment
        keras = attachment.keras if attachment is not None else seam.keras_version()
        if self._observed is not None:
            how = "guard.observe"
        elif attachment is not None and attachment.recording:
            how = f"flavour {attachment.flavour}"
        else:
            how = attachment.reason if attachment is not None else "no Keras attachment"
        what = f" with {keras} ({how})"
        self._unavailable(
            f"{self._seen} of the {needed} training batches of epoch {self._epoch} were recorded{what}"
        )

    def _unavailable(self, why: str) -> None:
        self._expect = False
        self.tap = None
        self._interval = sys.maxsize
        self.engine.signatures_unavailable(why)

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
