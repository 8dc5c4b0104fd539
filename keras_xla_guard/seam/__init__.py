"""The one place keras-xla-guard touches private Keras and TensorFlow internals.

Keras gives callbacks no view of the batches `fit` trains on and no hook
for an exception that leaves `fit`. Recording input signatures and
stopping the profiler on that path therefore rely on how each Keras
flavour builds its train function and runs its epochs. Every such contact
lives in this package, one module per flavour, each keeping the `Flavour`
contract (`_flavour.py`):

- `keras3`: Keras 3 on TensorFlow (closure cells of the train function,
  `fit`'s `epoch_iterator`);
- `tf_keras`: tf_keras / Keras 2 (`fit`'s `data_handler`);
- `keras3_jax`: Keras 3 on JAX (the functions' Python iterators of
  batches, the jitted steps' names), with `host_tap` (`HostTap`, batches
  recorded in Python);
- `tap`: `InputTap`, the TensorFlow mechanics that record each batch's
  shape (a `tf.Variable` ring written in-graph, or `.shape` read in Python);
- `tf_internals`: TensorFlow internals used outside `fit` (the XLA CPU
  switch, the kernel registry, traced graphs' function library, a
  strategy-free resource variable).

`attach` decides at `on_train_begin` which flavour fits the model (by its
Keras and the backend it runs on) and whether it can record; the guard then
checks every epoch that it recorded one batch per step that ran (see
`keras_xla_guard.signature_feed.SignatureFeed`). The test and predict
functions are attached the same way for each call, at `on_test_begin`
(validation inside `fit`, `evaluate`) and `on_predict_begin`
(`attach(..., function="test")`). Anything that does
not fit becomes an `XlaGuardWarning` naming the Keras version, never a
silent zero. `docs/compatibility.md` lists each contact and the versions
it was verified on. Users who want none of this call
`guard.observe(dataset)`, which needs no internals.
"""

from __future__ import annotations

import contextlib
import sys
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from keras_xla_guard.seam._flavour import Flavour

__all__ = [
    "Attachment",
    "Flavour",
    "all_layers",
    "attach",
    "build_for_training",
    "build_model",
    "compiled_programs",
    "keras_function",
    "flavour_of",
    "is_compiled",
    "keras_backend",
    "keras_version",
    "steps_per_execution",
    "tracked_train_function",
    "training_dataset",
    "training_state",
]

# fit -> CallbackList.on_train_begin -> callback hook -> guard helpers: a few frames.
_MAX_FRAMES = 12
# Rows of the ring: more than the batches recorded between two reads.
_RING_ROWS = 4096

# Keras' train (test, predict) function -> {repr(element_spec): (tap,
# recording function)}. Weak keys: a recompiled model builds new functions
# and the old entries go with the old functions.
_TAPPED: weakref.WeakKeyDictionary[Any, dict[str, tuple[Any, Any]]] = weakref.WeakKeyDictionary()


def _is_tf_keras(model: Any) -> bool:
    """Whether `model` is a tf_keras (Keras 2) model, subclasses defined anywhere included."""
    return any(
        cls.__module__.startswith(("tf_keras.", "keras.src.engine.", "keras.engine."))
        for cls in type(model).__mro__
    )


def keras_version(model: Any = None) -> str:
    """`"keras 3.15.1"`, `"tf_keras 2.21.0"`: the Keras that runs `model`."""
    if model is not None and _is_tf_keras(model):
        import tf_keras

        return f"tf_keras {getattr(tf_keras, '__version__', '?')}"
    try:
        import keras
    except ImportError:
        return "keras (not importable)"
    return f"keras {getattr(keras, '__version__', '?')}"


def is_compiled(model: Any) -> bool | None:
    """Whether `model.compile()` was called, or `None` when this Keras does not say.

    Keras 3: `Trainer.compiled`; tf_keras: `Model._is_compiled` (private).
    A Keras that no longer has them gives `None`: callers then skip their
    check and let Keras' own error speak.
    """
    value = getattr(model, "_is_compiled" if _is_tf_keras(model) else "compiled", None)
    return value if isinstance(value, bool) else None


def keras_backend(model: Any = None) -> str:
    """The Keras backend that runs `model`: `"tensorflow"`, `"jax"`, ...

    tf_keras runs on TensorFlow. A Keras 3 model's class derives from its
    backend's trainer (`keras/src/backend/<name>/trainer.py`, a private
    module path), so the model names the backend it was built under;
    without a model, or when no trainer class is found, the public
    `keras.backend.backend()`.

    Args:
        model: A Keras model. Defaults to `None`: Keras' configured backend.

    Returns:
        The backend's name as Keras spells it.
    """
    if model is not None:
        if _is_tf_keras(model):
            return "tensorflow"
        for cls in type(model).__mro__:
            parts = cls.__module__.split(".")
            if len(parts) == 5 and parts[:3] == ["keras", "src", "backend"] and parts[4] == "trainer":
                return parts[3]
    import keras

    return str(keras.backend.backend())


def flavour_of(model: Any) -> Flavour | None:
    """The flavour module for `model`, or `None` when none fits.

    A flavour fits by the Keras that built the model and the backend it runs
    on: `tf_keras` for tf_keras models (always TensorFlow); `keras3` for
    Keras 3 models on TensorFlow, `keras3_jax` for Keras 3 models on JAX.
    Other backends get none.
    """
    if _is_tf_keras(model):
        from keras_xla_guard.seam import tf_keras

        return tf_keras
    import keras

    if not str(getattr(keras, "__version__", "")).startswith("3."):
        return None
    from keras_xla_guard.seam import keras3, keras3_jax

    backend = keras_backend(model)
    # Typed so that mypy checks each module against the Flavour protocol.
    flavours: tuple[Flavour, ...] = (keras3, keras3_jax)
    for flavour in flavours:
        if backend == flavour.BACKEND:
            return flavour
    return None


def compiled_programs(model: Any) -> dict[str, str]:
    """The programs the backend compiles for `model`'s functions, by name: `{"train_step": "train", ...}`.

    Only where the backend reports compilations by program name as they
    happen (JAX); `{}` otherwise.
    """
    flavour = flavour_of(model)
    if flavour is None or flavour.BACKEND != "jax":
        return {}
    from keras_xla_guard.seam import keras3_jax

    return keras3_jax.programs(
        {function: keras_function(model, function) for function in ("train", "test", "predict")}
    )


def steps_per_execution(model: Any) -> int:
    """Steps one `train_function` call runs (tf_keras keeps it in a `tf.Variable`)."""
    spe = getattr(model, "steps_per_execution", 1) or 1
    if hasattr(spe, "numpy"):
        spe = spe.numpy()
    return max(1, int(spe))


def all_layers(model: Any) -> list[Any]:
    """The model and all its nested layers.

    Keras' own traversal (`_flatten_layers`, Keras 3 and tf_keras) when
    present, else the model and its public `layers`.
    """
    flatten = getattr(model, "_flatten_layers", None)
    return list(flatten()) if flatten is not None else [model, *getattr(model, "layers", [])]


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


def keras_function(model: Any, function: str = "train") -> Any:
    """Keras' own train, test or predict function of `model` as it stands, or `None`.

    The object `fit` (`evaluate`, `predict`) calls, beneath any guard
    wrapper: Keras caches it until `compile`, and its XLA programs with it,
    so the guard keeps a function's signatures while this object stays the
    same (`XlaGuardEngine.call_begin`'s `program`).

    Args:
        model: A Keras model.
        function: `"train"`, `"test"` or `"predict"`. Defaults to
            `"train"`.

    Returns:
        The function, or `None` before Keras built it.
    """
    from keras_xla_guard.seam._recording import unwrap

    return unwrap(getattr(model, f"{function}_function", None))


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
    flavour = flavour_of(model)
    found = Attachment(
        flavour=flavour.FLAVOUR if flavour is not None else None,
        keras=keras_version(model),
        function=function,
    )
    if flavour is None:
        found.reason = (
            f"{found.keras} on backend {keras_backend(model)!r} is not a Keras this guard knows how to record"
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
    from keras_xla_guard.seam._recording import BatchListRecording, FunctionTap, unwrap

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
    from keras_xla_guard.seam._recording import GUARD_WRAPPER, unwrap
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


def training_state(model: Any) -> tuple[list[Any], str | None]:
    """Every variable a train, test or predict step can change, and what is missing.

    The model's variables (weights, BatchNormalization statistics and, in
    Keras 3, `SeedGenerator` states), the optimizer's (its step counter
    `iterations`, slots), the metrics' and, in tf_keras, the model's own
    step counters (`_train_counter`, ...) and its layers' random-generator
    states (private, hence here).

    Args:
        model: A compiled Keras model.

    Returns:
        `(variables, missing)`: the variables, each once; `missing` names
        what could not be read (`None` when nothing is missing).
    """
    found: list[Any] = []
    missing: list[str] = []
    optimizer = getattr(model, "optimizer", None)
    optimizer_vars = getattr(optimizer, "variables", None) if optimizer is not None else ()
    if callable(optimizer_vars):
        optimizer_vars = optimizer_vars()
    groups = [list(getattr(model, "variables", ())), list(optimizer_vars or ())]
    metrics_vars = getattr(model, "metrics_variables", None)
    if metrics_vars is None:
        metrics_vars = [v for m in getattr(model, "metrics", ()) for v in getattr(m, "variables", ())]
    groups.append(list(metrics_vars))
    if _is_tf_keras(model):
        from keras_xla_guard.seam import tf_keras

        counters, absent = tf_keras.step_counters(model)
        groups.append(counters)
        if absent:
            missing.append(f"{keras_version(model)} has no {', '.join(absent)}")
        states, legacy = tf_keras.random_states(all_layers(model))
        groups.append(states)
        if legacy:
            missing.append(f"the random state of {', '.join(legacy)} (legacy stateful RNG ops)")
    seen: set[int] = set()
    for group in groups:
        for variable in group:
            if id(variable) not in seen:
                seen.add(id(variable))
                found.append(variable)
    return found, "; ".join(missing) or None


def build_model(model: Any, batch: Any) -> str | None:
    """Creates an unbuilt model's variables from one batch's shapes, as its first step would.

    A subclassed model has no variables before its first call. Keras 3:
    `Trainer._symbolic_build(data_batch=...)` (private; what `fit` calls
    under a strategy), which builds the layers from symbolic tensors - no
    computation runs - and, for a compiled model, its optimizer and
    metrics. tf_keras (and the fallback): the public `model(x,
    training=False)` on the batch's inputs.

    Args:
        model: A Keras model.
        batch: `x`, `(x,)`, `(x, y)` or `(x, y, sample_weight)`.

    Returns:
        `None` when the model is built, else why not (what failed).
    """
    flavour = flavour_of(model)
    if flavour is not None and flavour.FLAVOUR == "keras3":
        from keras_xla_guard.seam import keras3

        try:
            if keras3.symbolic_build(model, batch) is None:
                return None
        except Exception:  # noqa: BLE001 - the public call below is the fallback
            pass
    x = batch[0] if isinstance(batch, tuple) else batch
    try:
        model(x, training=False)
    except Exception as e:  # noqa: BLE001 - the caller says what to pass instead
        return f"{type(e).__name__}: {e}"
    return None


def build_for_training(model: Any, batch: Any) -> str | None:
    """Creates the variables the first train step would create, without running it.

    Keras 3 without a distribution strategy creates the optimizer's slots and
    the metrics' variables when the train function is first traced; a
    warm-up must create them first, or it could not restore them. Keras 3:
    `model._symbolic_build(data_batch=...)` (private, what `fit` calls under
    a strategy). tf_keras (and the fallback): the public
    `optimizer.build(model.trainable_variables)`.

    Args:
        model: A compiled Keras model.
        batch: One batch of the training data (`(x, y)` or `(x, y, w)`).

    Returns:
        `None` when everything was built, else why not (the caller warns).
    """
    flavour = flavour_of(model)
    if flavour is not None and flavour.FLAVOUR in ("keras3", "keras3_jax"):
        from keras_xla_guard.seam import keras3

        reason = keras3.symbolic_build(model, batch)
        if reason is None:
            return None
    else:
        reason = None
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None:
        return reason or "the model has no optimizer"
    if not getattr(optimizer, "built", False) and hasattr(optimizer, "build"):
        optimizer.build(model.trainable_variables)
    return reason


def training_dataset(model: Any) -> Any:
    """The `tf.data.Dataset` the running `fit` of `model` iterates, or `None`.

    Call from a callback hook: found through `fit`'s local iterator holder
    (`epoch_iterator` / `data_handler`, see the flavour modules). Under a
    strategy, the dataset before it was distributed.
    """
    import tensorflow as tf

    flavour = flavour_of(model)
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
    from keras_xla_guard.seam._recording import FunctionTap

    installed = getattr(model, "train_function", None)
    flavour = flavour_of(model)
    if not isinstance(installed, FunctionTap) or flavour is None:
        return None
    tap, function = _tapped(flavour, installed.original, element_spec)
    return installed.original if tap.static else function
