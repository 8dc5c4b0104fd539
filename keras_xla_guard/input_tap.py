"""Recording the concrete shape of every batch `model.fit` trains on.

Keras 3 (TensorFlow backend) turns every input - tf.data datasets, NumPy
arrays, Python generators, `keras.utils.PyDataset` - into a `tf.data`
dataset and pulls each batch *inside* its compiled train function, so
neither callbacks nor Python ever see a batch.

The tap therefore records inside that function. For the duration of `fit`,
`model.train_function` is replaced by Keras' own train function whose
`tf.function` is retraced from its `python_function` on a proxy of the
iterator: every `get_next()` / `get_next_as_optional()` the step makes (and
`next()`, for tf_keras) also writes the batch's *unknown* dimensions (those
`None` in the `element_spec`) into a ring buffer (a `tf.Variable`). These
are a handful of host ops beside the step, outside the XLA-compiled step
function, which is the very same function object as Keras', so it is
neither retraced nor recompiled and computes the same numbers. The
replacement is built once per Keras train function and batch structure and
reused by later `fit` calls; it is traced *instead of* Keras' function, so
tracking adds no tracing. Calls after the first with an iterator run its
traced graph directly (`_DirectCall`), skipping `tf.function`'s per-call
dispatch, which saves more time than the tap's ops take. When the
`element_spec` is fully static, Keras' function runs unchanged: every batch
has the static signature. After `fit`
(or when a step raises) Keras' function is put back.

Under a `tf.distribute` strategy the batches reach the step already split
per replica; there the tap is a `map` on the dataset `fit` distributes
(global batches), found by walking up from the callback to `fit`'s frame
(Keras has no public hook for it): Keras 3 keeps it in the local
`epoch_iterator` (`_distributed_dataset`), tf_keras in `data_handler`
(`_dataset`). The map runs on tf.data's threads, behind a `prefetch(1)`.

The callback reads the ring as training goes (after every step while new
shapes keep appearing, every 512 steps once they stop) and at the end of
each epoch. If no tap can be installed, a warning says why and training
goes on without signature tracking.
"""

from __future__ import annotations

import sys
import types
import warnings
import weakref
from typing import Any

from keras_xla_guard.classify import GUARD_SCOPE
from keras_xla_guard.errors import XlaGuardWarning
from keras_xla_guard.signatures import Signature, flatten_leaves

__all__ = ["DRAIN_EVERY", "GUARD_WRAPPER", "InputTap", "KerasInputTracker", "find_fit_dataset"]

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
_KERAS3_STEP = "multi_step_on_iterator"
# Marks the guard's stand-ins for `model.train_function`; `__wrapped__` is what they call.
GUARD_WRAPPER = "_xla_guard_wrapper"
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
    becomes a `MirroredVariable`, whose handle is no plain resource handle; the tap's
    ring lives on the host input pipeline and must stay one local variable.
    Constructing `ResourceVariable` directly skips the strategy's variable
    creator.
    """
    from tensorflow.python.ops import resource_variable_ops

    return resource_variable_ops.ResourceVariable(initial_value, trainable=False)


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
        dims: `(leaf, dim)` pairs recorded per batch (dense tensors of
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

    def record(self, element: Any) -> Any:
        """Writes one batch's unknown dimensions into the ring.

        Works in a `tf.function` (adding a few ops to its graph) and
        eagerly. The batch itself is not touched.

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

    def wrap(self, dataset: Any) -> Any:
        """Returns `dataset` with the recording map appended (or unchanged).

        Args:
            dataset: The `tf.data.Dataset` whose element_spec built the tap.

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

        return dataset.map(record).prefetch(1)

    def skip_recorded(self) -> None:
        """Moves the read position past every batch recorded so far.

        A tap reused by a later `fit` starts reading at that fit's first batch.
        """
        if self._count is not None:
            self._read = int(self._count.numpy())

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

        wanted = np.arange(self._read, self._read + limit, dtype=np.int64)
        rows = self._ring.numpy()[(wanted + 1) % self.capacity]
        valid = rows[:, 0] == wanted + 1
        if not valid.all():
            first = int(np.argmin(valid))
            if rows[first, 0] > wanted[first] + 1:
                raise RuntimeError(f"more than {self.capacity} batches were recorded between two reads")
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


class _RecordingIterator:
    """Stands in for a `tf.data` iterator; records every batch taken from it.

    Keras 3 takes batches with `get_next()` (and `get_next_as_optional()`
    when `steps_per_execution > 1`), tf_keras with `next()`.
    """

    def __init__(self, iterator: Any, tap: InputTap) -> None:
        self._iterator = iterator
        self._tap = tap

    def __iter__(self) -> "_RecordingIterator":
        return self

    def __next__(self) -> Any:
        element = next(self._iterator)
        self._tap.record(element)
        return element

    def get_next(self) -> Any:
        element = self._iterator.get_next()
        self._tap.record(element)
        return element

    def get_next_as_optional(self) -> Any:
        import tensorflow as tf

        optional = self._iterator.get_next_as_optional()
        tf.cond(
            optional.has_value(),
            lambda: self._tap.record(optional.get_value()),
            lambda: tf.constant(-1, tf.int64),
        )
        return optional

    def __getattr__(self, name: str) -> Any:
        return getattr(self._iterator, name)


# Keras' train function -> {repr(element_spec): (tap, tapped tf.function)}.
# Weak keys: a recompiled model builds a new train function and the old
# entry goes with the old function.
_TAPPED: "weakref.WeakKeyDictionary[Any, dict[str, tuple[InputTap, Any]]]" = weakref.WeakKeyDictionary()


class _DirectCall:
    """Calls a `tf.function`'s traced graph without its per-call dispatch.

    `tf.function.__call__` looks its arguments up in the trace cache on every
    call, which for Keras' iterator argument takes 200-300 us per call on the
    development VM (10-15% of a 2 ms step). `fit` calls the train function
    many times with one iterator, so the first call with an iterator goes
    through the `tf.function` (which traces it or finds its trace) and the
    following calls with the same iterator run that trace's concrete function
    directly: the same graph, the same numbers, without the lookup. The
    saving pays for the tap's own ops (see `benchmarks/bench_signatures.py`).
    A concrete function does not check the iterator it is given against the
    one it was traced for, hence one concrete function per iterator object,
    held by a weak reference so a finished iterator is freed as usual. With
    `tf.config.run_functions_eagerly(True)` every call goes through the
    `tf.function`, which then runs eagerly.

    Args:
        function: The recording `tf.function`.

    Attributes:
        function: The same `tf.function`.
    """

    def __init__(self, function: Any) -> None:
        import tensorflow as tf

        self.function = function
        self._concrete: Any = None
        self._iterator: Any = lambda: None
        self._run_eagerly = tf.config.functions_run_eagerly

    def __call__(self, iterator: Any) -> Any:
        if self._iterator() is iterator and not self._run_eagerly():
            return self._concrete(iterator)
        outputs = self.function(iterator)
        if not self._run_eagerly():
            self._concrete = self.function.get_concrete_function(iterator)
            self._iterator = weakref.ref(iterator)
        return outputs


def _recording(function: Any, tap: InputTap) -> Any:
    """`function(iterator)` run on a recording proxy of its iterator.

    A `tf.function` gets a `tf.function` again, like Keras' own
    (`reduce_retracing=True`, default autograph), traced from its
    `python_function`, and called through `_DirectCall`: each step runs
    one traced concrete function.
    """
    import tensorflow as tf

    python_function = getattr(function, "python_function", function)

    def train_function(iterator: Any) -> Any:
        return python_function(_RecordingIterator(iterator, tap))

    if python_function is function:
        return train_function
    return _DirectCall(tf.function(train_function, reduce_retracing=True))


def _keras3_step_cell(function: Any) -> int | None:
    """Index of the `multi_step_on_iterator` closure cell of Keras 3's train function.

    Keras 3 (3.9 and later) makes `model.train_function` a plain Python
    function that calls the `tf.function` `multi_step_on_iterator` and
    unpacks its `tf.experimental.Optional` result.
    """
    names = getattr(getattr(function, "__code__", None), "co_freevars", ())
    return names.index(_KERAS3_STEP) if _KERAS3_STEP in names and function.__closure__ else None


def _recordable(function: Any, eager: bool) -> bool:
    """Whether `_tapped_function` knows how to record `function`'s batches."""
    return eager or hasattr(function, "python_function") or _keras3_step_cell(function) is not None


def _tapped_function(original: Any, element_spec: Any) -> tuple[InputTap, Any]:
    """The tap and recording train function for `original` and a batch structure.

    Built once per Keras train function and batch structure, then reused by
    every later `fit` of the model. For Keras 3 the result is Keras' own
    Python train function (same code, same globals) whose
    `multi_step_on_iterator` cell holds the recording `tf.function`; for
    tf_keras (whose train function is the `tf.function`) and `run_eagerly`
    it is the recording function itself.
    """
    key = repr(element_spec)
    entries = _TAPPED.setdefault(original, {})
    if key not in entries:
        tap = InputTap(element_spec, capacity=max(4096, 2 * DRAIN_EVERY + 64))
        cell = _keras3_step_cell(original)
        if cell is None:
            function = _recording(original, tap)
        else:
            function = _with_keras3_step(original, _recording(original.__closure__[cell].cell_contents, tap))
        entries[key] = (tap, function)
    return entries[key]


def _with_keras3_step(function: Any, step: Any) -> Any:
    """Keras 3's train function (same code, same globals) calling `step` for `multi_step_on_iterator`."""
    cells = list(function.__closure__)
    cells[_keras3_step_cell(function)] = types.CellType(step)
    return types.FunctionType(
        function.__code__, function.__globals__, function.__name__, function.__defaults__, tuple(cells)
    )


class _TapInstallation:
    """`model.train_function` while a `fit` is tracked: Keras' function plus the tap.

    Built at `on_train_begin`; the first call (when the batches' structure
    is known) picks the recording function. Any exception but the end of the
    data puts Keras' function back before it propagates, because Keras 3
    does not call `on_train_end` then.

    Args:
        model: The Keras model.
        original: Keras' `model.train_function`.
        bind: Called with the tap once the first batch's structure is known.
    """

    def __init__(self, model: Any, original: Any, bind: Any) -> None:
        import tensorflow as tf

        self._model = model
        self.original = self.__wrapped__ = original
        setattr(self, GUARD_WRAPPER, True)
        self._bind = bind
        self._call: Any = None
        self._end_of_data = (StopIteration, tf.errors.OutOfRangeError)

    def __call__(self, iterator: Any) -> Any:
        call = self._call
        if call is None:
            call = self._call = self._first_call(iterator)
        try:
            return call(iterator)
        except self._end_of_data:
            raise
        except BaseException:
            self.restore()
            raise

    def _first_call(self, iterator: Any) -> Any:
        import tensorflow as tf

        if isinstance(iterator, tf.distribute.DistributedIterator):
            self._bind(None)
            return self.original
        tap, function = _tapped_function(self.original, iterator.element_spec)
        self._bind(tap)
        # Static batches: Keras' own function, nothing recorded.
        return self.original if tap.static else function

    def restore(self) -> None:
        """Puts Keras' train function back if this tap is (still) in the call chain."""
        current = getattr(self._model, "train_function", None)
        seen = 0
        while current is not None and seen < _MAX_FRAMES:
            if current is self:
                self._model.train_function = self.original
                return
            current = getattr(current, "__wrapped__", None)
            seen += 1


class KerasInputTracker:
    """Feeds the signatures of `fit`'s training batches to an engine.

    Args:
        engine: The `XlaGuardEngine` receiving `observe_signature` calls.
    """

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.tap: InputTap | None = None
        self.unavailable_reason = ""
        self._installed: _TapInstallation | None = None
        self._spe = 1
        self._steps_hint: int | None = None
        self._seen = 0
        self._last_begin = -1
        self._interval = 1

    def attach(self, model: Any, steps_hint: int | None) -> bool:
        """Installs the tap for the running `fit` call.

        Args:
            model: The Keras model being fitted.
            steps_hint: Steps per epoch, if Keras knows them.

        Returns:
            Whether signatures will be recorded.
        """
        import tensorflow as tf

        self.detach()
        self.tap = None
        self._interval = sys.maxsize
        spe = getattr(model, "steps_per_execution", 1) or 1
        # tf_keras keeps it in a tf.Variable, mirrored under a strategy.
        self._spe = int(spe.numpy() if hasattr(spe, "numpy") else spe)
        self._steps_hint = steps_hint
        found = find_fit_dataset(model)
        if found is not None and isinstance(getattr(*found), tf.distribute.DistributedDataset):
            return self._attach_to_dataset(model, *found)
        original = getattr(model, "train_function", None)
        # Wrappers left behind by a fit that ended in an exception outside a step.
        while getattr(original, GUARD_WRAPPER, False):
            original = original.__wrapped__
        if original is None or not _recordable(original, bool(getattr(model, "run_eagerly", False))):
            self.unavailable_reason = (
                f"model.train_function ({original!r}) is not one of the Keras train functions "
                "this version knows how to record"
            )
            return False
        if found is not None and isinstance(getattr(*found), tf.data.Dataset):
            # Creates the ring variables now rather than in the first step,
            # which may fall in a profiled window.
            _tapped_function(original, getattr(*found).element_spec)
        self._installed = _TapInstallation(model, original, self._bind)
        model.train_function = self._installed
        self._interval = 1
        return True

    def _attach_to_dataset(self, model: Any, holder: Any, attribute: str) -> bool:
        """Taps the dataset a `tf.distribute` strategy splits into replica batches."""
        import tensorflow as tf

        dataset = getattr(holder, attribute)
        # Keras (3 and tf_keras) distributes its dataset; the tap goes on the
        # dataset before the split (global batches), which is then
        # distributed again the same way.
        strategy = getattr(model, "distribute_strategy", None)
        original = getattr(dataset, "_original_dataset", None)
        if strategy is None or not isinstance(original, tf.data.Dataset):
            self.unavailable_reason = (
                f"the training input is a {type(dataset).__name__} without its tf.data.Dataset"
            )
            return False
        tap = InputTap(original.element_spec, capacity=max(4096, 2 * (DRAIN_EVERY + self._spe) + 64))
        setattr(holder, attribute, strategy.experimental_distribute_dataset(tap.wrap(original)))
        self._bind(tap)
        return True

    def _bind(self, tap: InputTap | None) -> None:
        """Starts reading `tap` (`None`: the batches cannot be recorded)."""
        self.tap = tap
        if tap is None:
            self._interval = sys.maxsize
            warnings.warn(
                "keras-xla-guard: input signatures are not tracked in this fit(): its batches "
                "arrive split across replicas and the dataset fit() distributes was not found.",
                XlaGuardWarning,
                stacklevel=2,
            )
            return
        tap.skip_recorded()
        self._interval = sys.maxsize if tap.static else 1

    def detach(self) -> None:
        """Puts Keras' train function back (end of `fit`)."""
        if self._installed is not None:
            self._installed.restore()
            self._installed = None

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
