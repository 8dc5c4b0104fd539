"""The mechanics shared by the Keras flavours: recording train, test and predict functions.

Both flavours (`keras3`, `tf_keras`) put a `FunctionTap` in place of
Keras' train function for the duration of `fit` (and of its test function
during validation and `evaluate`, of its predict function during
`predict`). It picks, per iterator, the function that records that
iterator's batches; the flavour supplies how to build it from Keras' own
function. A function Keras calls with batches it pulled in Python (Keras
3's predict function) gets a `BatchListRecording` instead. Nothing here
names a private Keras attribute; the flavour modules do.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

__all__ = [
    "GUARD_WRAPPER",
    "BatchListRecording",
    "DirectCall",
    "FunctionTap",
    "RecordingIterator",
    "recording_tf_function",
    "unwrap",
]

# Marks the guard's stand-ins for Keras' functions; `__wrapped__` is what they call.
GUARD_WRAPPER = "_xla_guard_wrapper"
# Longest chain of guard wrappers a model can carry (one per interrupted fit at most).
_MAX_CHAIN = 12


class RecordingIterator:
    """Stands in for a `tf.data` iterator; records every batch taken from it.

    Keras 3 takes batches with `get_next()` / `get_next_as_optional()`,
    tf_keras and Keras 3 before 3.8 with `next()`.
    """

    def __init__(self, iterator: Any, tap: Any) -> None:
        self._iterator = iterator
        self._tap = tap

    def __iter__(self) -> RecordingIterator:
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


class DirectCall:
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

    `get_concrete_function` is public; relying on a concrete function
    accepting the iterator it was traced for is the private contact.

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


def recording_tf_function(function: Any, tap: Any, autograph: bool = False) -> Any:
    """`function(iterator)` run on a `RecordingIterator` of its iterator.

    A `tf.function` gets a `tf.function` again, like Keras' own
    (`reduce_retracing=True`, default autograph), traced from its
    `python_function`, and called through `DirectCall`: each step runs one
    traced concrete function. A plain Python function (`run_eagerly`) gets
    a plain Python function.

    Args:
        function: Keras' function over the iterator.
        tap: The `InputTap`.
        autograph: Convert `python_function` with AutoGraph first. Needed
            where Keras' own `tf.function` relies on it (tf_keras loops
            over `tf.range(steps_per_execution)`): called from the wrapper,
            AutoGraph would leave a Keras module unconverted.
    """
    import tensorflow as tf

    python_function = getattr(function, "python_function", function)
    if autograph and python_function is not function:
        python_function = tf.autograph.to_graph(python_function)

    def train_function(iterator: Any) -> Any:
        return python_function(RecordingIterator(iterator, tap))

    if not hasattr(function, "python_function"):
        return train_function
    return DirectCall(tf.function(train_function, reduce_retracing=True))


def _put_back(holder: Any, attribute: str, wrapper: Any, original: Any) -> None:
    """Puts `original` back into `holder.attribute` if `wrapper` is (still) in its call chain."""
    current = getattr(holder, attribute, None)
    seen = 0
    while current is not None and seen < _MAX_CHAIN:
        if current is wrapper:
            setattr(holder, attribute, original)
            return
        current = getattr(current, "__wrapped__", None)
        seen += 1


class FunctionTap:
    """Keras' train (or test, or predict) function while its calls are tracked.

    Installed as `holder.attribute` (e.g. `model.train_function`). The
    first call with each new iterator asks `choose(iterator)` for the
    function to run it with (Keras' own, or one that records its batches);
    later calls with the same iterator reuse it.

    A tap outlives its `fit` only when an exception left `fit` where neither
    the guard's exit hook nor a step saw it. It must then never change a
    later `fit`: `fit` makes a new iterator at each epoch start (or keeps
    one across epochs), and the guard arms the tap at every
    `on_epoch_begin` (and every test or predict call's begin), so a new
    iterator arriving unarmed belongs to a call without this guard: the tap
    then puts Keras' function back and steps aside.

    Args:
        holder: The object holding Keras' function (the model, or a local
            of the running Keras method).
        attribute: Its attribute, e.g. `"train_function"`.
        original: Keras' function.
        choose: `choose(iterator)` returns the function for that iterator.
        on_abort: Called (once) when an exception other than the end of the
            data leaves a step.
    """

    def __init__(
        self,
        holder: Any,
        attribute: str,
        original: Any,
        choose: Callable[[Any], Any],
        on_abort: Callable[[], None],
    ) -> None:
        import tensorflow as tf

        self._holder = holder
        self._attribute = attribute
        self.original = self.__wrapped__ = original
        setattr(self, GUARD_WRAPPER, True)
        self._choose = choose
        self._on_abort = on_abort
        self._iterator: Any = lambda: None
        self._call: Any = None
        self._armed = True
        self._stale = False
        self._end_of_data = (StopIteration, tf.errors.OutOfRangeError)

    def arm(self) -> None:
        """Lets the next new iterator be tracked (an epoch or call of the guarded run begins)."""
        self._armed = True

    def __call__(self, iterator: Any) -> Any:
        if self._stale:
            return self.original(iterator)
        if self._iterator() is not iterator:
            if not self._armed:
                self._stale = True
                self.restore()
                return self.original(iterator)
            self._armed = False
            self._call = self._choose(iterator)
            try:
                self._iterator = weakref.ref(iterator)
            except TypeError:
                self._iterator = lambda: None
        try:
            return self._call(iterator)
        except self._end_of_data:
            raise
        except BaseException:
            self._on_abort()
            raise

    def restore(self) -> None:
        """Puts Keras' function back if this tap is (still) in the call chain."""
        _put_back(self._holder, self._attribute, self, self.original)


class BatchListRecording:
    """A function Keras calls with a list of batches it pulled in Python, recording each first.

    Keras 3's predict function takes `steps_per_execution` eager batches
    per call; their shapes are plain Python values (`InputTap.record_host`,
    no TF op), so the function itself is called unchanged.

    Args:
        holder: The object holding Keras' function (the model).
        attribute: Its attribute, e.g. `"predict_function"`.
        original: Keras' function.
        tap: The `InputTap` for the batches' structure.
    """

    def __init__(self, holder: Any, attribute: str, original: Any, tap: Any) -> None:
        self._holder = holder
        self._attribute = attribute
        self._tap = tap
        self.original = self.__wrapped__ = original
        setattr(self, GUARD_WRAPPER, True)

    def arm(self) -> None:
        """Nothing to arm: every call records its own batches."""

    def __call__(self, data: Any, *args: Any, **kwargs: Any) -> Any:
        for element in data:
            self._tap.record_host(element)
        return self.original(data, *args, **kwargs)

    def restore(self) -> None:
        """Puts Keras' function back if this recording is (still) in the call chain."""
        _put_back(self._holder, self._attribute, self, self.original)


def unwrap(function: Any) -> Any:
    """Keras' own function beneath guard wrappers an interrupted run left."""
    seen = 0
    while getattr(function, GUARD_WRAPPER, False) and seen < _MAX_CHAIN:
        function = function.__wrapped__
        seen += 1
    return function
