"""The guard's contact with a running `fit` (`evaluate`, `predict`): `attach` and what it installs.

Reads `fit`'s local variables from the caller frames (`_fit_local`), hooks
the exit of each epoch, and puts a recording stand-in in place of the Keras
function whose batches are recorded: an `InputTap` ring for batches pulled
inside a TensorFlow function, a `HostTap` for batches handed over in Python,
a tap on the dataset a `tf.distribute` strategy splits. `training_dataset`
and `tracked_train_function` read what is installed back.
"""

from __future__ import annotations

import contextlib
import sys
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from keras_xla_guard.seam import _detect
from keras_xla_guard.seam._flavour import Flavour
from keras_xla_guard.seam._recording import GUARD_WRAPPER, BatchListRecording, FunctionTap, unwrap

__all__ = ["Attachment", "attach", "tracked_train_function", "training_dataset"]

# fit -> CallbackList.on_train_begin -> callback hook -> guard helpers: a few frames.
_MAX_FRAMES = 12
# Rows of the ring: more than the batches recorded between two reads.
_RING_ROWS = 4096

# Keras' train (test, predict) function -> {repr(element_spec): (tap,
# recording function)}. Weak keys: a recompiled model builds new functions
# and the old entries go with the old functions.
_TAPPED: weakref.WeakKeyDictionary[Any, dict[str, tuple[Any, Any]]] = weakref.WeakKeyDictionary()


def _fit_local(model: Any, name: str) -> Any:
    """`fit`'s local variable `name`, from a caller frame whose `self` is `model`."""
    frame: types.FrameType | None = sys._getframe(1)
    for _ in range(_MAX_FRAMES):
        if frame is None:
            return None
        local = frame.f_locals
        if local.get("self") is model and name in local:
            return local[name]
        frame = frame.f_back
    return None


@dataclass
class Attachment:
    """One `fit`'s contact with Keras, made by `attach`.

    Attributes:
        flavour: `"keras3"`, `"tf_keras"` or `None` (no flavour fits).
        keras: The Keras that runs the model, e.g. `"keras 3.15.1"`.
        function: The Keras function attached: `"train"`, `"test"` or
            `"predict"`.
        recording: Whether batches will be recorded.
        reason: Why not, when `recording` is false.
        exit_hook: Whether an exception leaving an epoch reaches `on_abort`.
    """

    flavour: str | None
    keras: str
    function: str = "train"
    recording: bool = False
    reason: str = ""
    exit_hook: bool = False
    _undo: list[Callable[[], None]] = field(default_factory=list, repr=False)
    _tap: Any = field(default=None, repr=False)

    def arm(self) -> None:
        """An epoch of this `fit` begins (see `FunctionTap`)."""
        if self._tap is not None:
            self._tap.arm()

    def detach(self) -> None:
        """Puts back everything `attach` changed; safe to call twice."""
        undo, self._undo = self._undo, []
        for step in reversed(undo):
            step()
        self._tap = None


def attach(
    model: Any,
    bind: Callable[[Any], None],
    on_abort: Callable[[], None],
    *,
    record: bool = True,
    function: str = "train",
) -> Attachment:
    """Connects the guard to the running `fit` (or `evaluate`, `predict`) of `model`.

    Call from `on_train_begin` (`on_test_begin`, `on_predict_begin`).
    Installs the exit hook (so `on_abort` runs when an exception leaves an
    epoch or the call) and, with `record`, the recording of every batch of
    `function`; `bind(tap)` is called with the `InputTap` once the batches'
    structure is known (`None`: they cannot be recorded).

    Args:
        model: The Keras model being fitted.
        bind: Receives the tap.
        on_abort: Called when an exception leaves an epoch or a step.
        record: Record batches (else only the exit hook). Defaults to `True`.
        function: The Keras function whose batches to record: `"train"`,
            `"test"` or `"predict"`. Defaults to `"train"`.

    Returns:
        The `Attachment`; `detach()` it at the end of `fit` (of the call).
    """
    flavour = _detect.flavour_of(model)
    found = Attachment(
        flavour=flavour.FLAVOUR if flavour is not None else None,
        keras=_detect.keras_version(model),
        function=function,
    )
    if flavour is None:
        found.reason = (
            f"{found.keras} on backend {_detect.keras_backend(model)!r} "
            "is not a Keras this guard knows how to record"
        )
        return found
    holder = _fit_local(model, flavour.EXIT_HOOK_HOLDER)
    found.exit_hook = _hook_exit(holder, on_abort, found._undo)
    if not record:
        return found
    if flavour.BATCHES == "python":
        return _attach_in_python(model, flavour, bind, on_abort, found, function)
    import tensorflow as tf

    name, attribute = flavour.DATASET_HOLDER
    dataset_holder = holder if name == flavour.EXIT_HOOK_HOLDER else _fit_local(model, name)
    dataset = getattr(dataset_holder, attribute, None)
    if isinstance(dataset, tf.distribute.DistributedDataset):
        if function != "train":
            found.reason = (
                f"a tf.distribute strategy splits the {function} function's batches across "
                "replicas; only the train function's are recorded under a strategy"
            )
            return found
        return _attach_to_distributed(model, dataset_holder, attribute, bind, found)
    owner_name, slot = flavour.FUNCTION_HOLDERS[function]
    owner = model if owner_name is None else _fit_local(model, owner_name)
    original = unwrap(getattr(owner, slot, None))
    where = f"model.{slot}" if owner_name is None else f"{owner_name}.{slot}"
    if original is None:
        found.reason = f"{where} is None ({found.keras})"
        return found
    if function in flavour.HOST_BATCHES:
        if not isinstance(dataset, tf.data.Dataset):
            found.reason = (
                f"the {function} input is a {type(dataset).__name__}, not the tf.data.Dataset {found.keras} "
                "builds"
            )
            return found
        tap, _ = _tapped(flavour, original, dataset.element_spec, host=True)
        bind(tap)
        recording = BatchListRecording(owner, slot, original, tap)
        setattr(owner, slot, recording)
        found._tap = recording
        found._undo.append(recording.restore)
        found.recording = True
        return found
    reason = flavour.probe(original, bool(getattr(model, "run_eagerly", False)))
    if reason is not None:
        found.reason = reason
        return found
    if isinstance(dataset, tf.data.Dataset):
        # Creates the ring variables now rather than in the first step,
        # which may fall in a profiled window.
        _tapped(flavour, original, dataset.element_spec)

    def choose(iterator: Any) -> Any:
        if isinstance(iterator, tf.distribute.DistributedIterator):
            bind(None)
            return original
        tap, function = _tapped(flavour, original, iterator.element_spec)
        bind(tap)
        # Static batches: Keras' own function, nothing recorded.
        return original if tap.static else function

    tap = FunctionTap(owner, slot, original, choose, on_abort)
    setattr(owner, slot, tap)
    found._tap = tap
    found._undo.append(tap.restore)
    found.recording = True
    return found


def _attach_in_python(
    model: Any,
    flavour: Flavour,
    bind: Callable[[Any], None],
    on_abort: Callable[[], None],
    found: Attachment,
    function: str,
) -> Attachment:
    """Records every batch a Python-iterating trainer (Keras on JAX) hands `function`, with a `HostTap`.

    Keras' JAX trainer calls each of its functions as `(state, iterator)`
    with a Python iterator of batches: the stand-in passes a recording
    iterator instead, and puts Keras' function back on `detach`.
    """
    from keras_xla_guard.seam.host_tap import HostTap

    owner_name, slot = flavour.FUNCTION_HOLDERS[function]
    owner = model if owner_name is None else _fit_local(model, owner_name)
    original = unwrap(getattr(owner, slot, None))
    reason = (
        f"model.{slot} is None ({found.keras})"
        if original is None
        else flavour.probe(original, bool(getattr(model, "run_eagerly", False)))
    )
    if reason is not None:
        found.reason = reason
        return found
    tap = HostTap(capacity=_RING_ROWS)
    recording = flavour.recording_function(original, tap)

    def stand_in(state: Any, iterator: Any) -> Any:
        try:
            outputs = recording(state, iterator)
        except StopIteration:
            raise
        except BaseException:
            on_abort()
            raise
        tap.calls_finished += 1
        return outputs

    setattr(stand_in, GUARD_WRAPPER, True)
    stand_in.__wrapped__ = original  # type: ignore[attr-defined]  # why: unwrap() follows __wrapped__, which typeshed does not declare on functions
    setattr(owner, slot, stand_in)

    def restore() -> None:
        if getattr(owner, slot, None) is stand_in:
            setattr(owner, slot, original)

    found._undo.append(restore)
    bind(tap)
    found.recording = True
    return found


def _tapped(flavour: Flavour, original: Any, element_spec: Any, host: bool = False) -> tuple[Any, Any]:
    """The tap and recording function for `original` and a batch structure.

    Built once per Keras function and batch structure, then reused by
    every later `fit` (`evaluate`, `predict`) of the model: it is traced
    once, instead of Keras' own function, so tracking adds no tracing. A
    function fed batches in Python (`host`) needs a tap only.
    """
    from keras_xla_guard.seam.tap import InputTap

    key = repr(element_spec)
    entries = _TAPPED.setdefault(original, {})
    if key not in entries:
        tap = InputTap(element_spec, capacity=_RING_ROWS)
        entries[key] = (tap, None if host else flavour.recording_function(original, tap))
    return entries[key]


def _attach_to_distributed(
    model: Any, holder: Any, attribute: str, bind: Callable[[Any], None], found: Attachment
) -> Attachment:
    """Taps the dataset a `tf.distribute` strategy splits into replica batches.

    Keras (3 and tf_keras) distributes its dataset; the tap is a `map` on the
    dataset before the split (global batches), which is then distributed
    again the same way.
    """
    import tensorflow as tf

    from keras_xla_guard.seam.tap import InputTap

    dataset = getattr(holder, attribute)
    strategy = getattr(model, "distribute_strategy", None)
    original = getattr(dataset, "_original_dataset", None)
    if strategy is None or not isinstance(original, tf.data.Dataset):
        found.reason = f"the training input is a {type(dataset).__name__} without its tf.data.Dataset"
        return found
    tap = InputTap(original.element_spec, capacity=_RING_ROWS)
    setattr(holder, attribute, strategy.experimental_distribute_dataset(tap.wrap(original)))
    found._undo.append(lambda: setattr(holder, attribute, dataset))
    bind(tap)
    found.recording = True
    return found


def _hook_exit(holder: Any, on_abort: Callable[[], None], undo: list[Callable[[], None]]) -> bool:
    """Wraps `holder.catch_stop_iteration()` so an exception leaving an epoch calls `on_abort`.

    Keras runs each epoch's steps (and the callbacks' batch hooks) inside
    that context and calls no callback when an exception escapes `fit`.
    """
    original = getattr(holder, "catch_stop_iteration", None)
    if original is None or not callable(original):
        return False

    @contextlib.contextmanager
    def catch_stop_iteration() -> Any:
        try:
            with original():
                yield
        except BaseException:
            on_abort()
            raise

    try:
        holder.catch_stop_iteration = catch_stop_iteration
    except AttributeError:
        return False
    undo.append(lambda: vars(holder).pop("catch_stop_iteration", None))
    return True


def training_dataset(model: Any) -> Any:
    """The `tf.data.Dataset` the running `fit` of `model` iterates, or `None`.

    Call from a callback hook: found through `fit`'s local iterator holder
    (`epoch_iterator` / `data_handler`, see the flavour modules). Under a
    strategy, the dataset before it was distributed.
    """
    import tensorflow as tf

    flavour = _detect.flavour_of(model)
    if flavour is None:
        return None
    name, attribute = flavour.DATASET_HOLDER
    dataset = getattr(_fit_local(model, name), attribute, None)
    if isinstance(dataset, tf.distribute.DistributedDataset):
        dataset = getattr(dataset, "_original_dataset", None)
    return dataset if isinstance(dataset, tf.data.Dataset) else None


def tracked_train_function(model: Any, element_spec: Any) -> Any:
    """The function the guard's tap will run `fit`'s batches of `element_spec` with.

    While a guard tracks signatures, `model.train_function` is its
    `FunctionTap`, which runs either Keras' own function or a
    recording copy retraced from it (tf_keras' copy holds a new
    `tf.function` of the step, compiled on its own). A warm-up must run
    the one `fit` will run.

    Returns:
        That function; `None` when no guard tap is installed.
    """
    installed = getattr(model, "train_function", None)
    flavour = _detect.flavour_of(model)
    if not isinstance(installed, FunctionTap) or flavour is None:
        return None
    tap, function = _tapped(flavour, installed.original, element_spec)
    return installed.original if tap.static else function
