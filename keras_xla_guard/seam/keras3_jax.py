"""Keras 3 on JAX: where `fit` pulls its batches, and how to see them.

A `seam.Flavour`: `flavour_of` gives it to Keras 3 models on its `BACKEND`.
Its batches arrive in Python (`BATCHES = "python"`): `seam.attach` records
them with a `HostTap`, no TensorFlow involved.

Private contacts, each verified on Keras 3.10.0 and 3.15.1 (docs/compatibility.md):

- `model.train_function` as built by `keras/src/backend/jax/trainer.py`
  (`make_train_function`, called by `fit` before `on_train_begin`): a
  Python function `iterator_step(state, iterator)` that takes
  `steps_per_execution` batches from a Python iterator with `next()` and
  calls the `jax.jit` of `train_step` (`donate_argnums=0`) on each. The
  guard passes it a recording iterator in place of `fit`'s and puts Keras'
  function back at train end: the same jitted step runs, on the same
  batches, so the same numbers come out.
- The jitted step sits in the function's closure cell `step_function`;
  its `__name__` is the program name `jax.monitoring` reports
  (`train_step`, `test_step`, `predict_step` unless a subclass renames
  them), which tells a train step's compilations from the small eager
  programs Keras also compiles (`jit(equal)`, ...).
- `fit`'s local `epoch_iterator` (a `JAXEpochIterator`): its
  `catch_stop_iteration()` context encloses every epoch's steps, as on
  TensorFlow.
- `Trainer._get_jax_state(...)` (`keras/src/backend/jax/trainer.py`): the
  state tuple each function takes, read without purging the variables;
  `warm_up` runs the functions on a copy of it (`run_on_copy`). Keras
  3.10's steps also read the state's shardings, which `fit` records with
  `_record_training_state_sharding_spec()` and clears with
  `_clear_jax_state_sharding()` (absent in later Keras): a warm-up outside
  `fit` does the same.
- `Trainer._symbolic_build(iterator=...)` (`keras/src/trainers/trainer.py`),
  which `fit` and `evaluate` call first: while a layer, the compiled
  metrics (`_compile_metrics.built`) or the compiled loss
  (`_compile_loss.built`) is unbuilt, it takes one batch from the epoch
  iterator, and making that iterator draws a shuffle (`np.random.permutation`
  for arrays, Python's `random` for a `PyDataset`). A warm-up that built
  them would make `fit` skip that draw and shuffle differently:
  `keep_first_draw` makes the next build take its batch as before.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

__all__ = [
    "BACKEND",
    "BATCHES",
    "DATASET_HOLDER",
    "EXIT_HOOK_HOLDER",
    "FLAVOUR",
    "FUNCTION_HOLDERS",
    "HOST_BATCHES",
    "builds_from_a_batch",
    "keep_first_draw",
    "probe",
    "programs",
    "recording_function",
    "run_on_copy",
]

FLAVOUR = "keras3_jax"
BACKEND = "jax"
BATCHES = "python"
# The data adapter of fit's epoch iterator holds the user's data (not a tf.data.Dataset).
DATASET_HOLDER = ("epoch_iterator", "data_adapter")
EXIT_HOOK_HOLDER = "epoch_iterator"
# Keras keeps each function on the model; each takes (state, iterator).
FUNCTION_HOLDERS: Mapping[str, tuple[str | None, str]] = {
    "train": (None, "train_function"),
    "test": (None, "test_function"),
    "predict": (None, "predict_function"),
}
# No function is handed a list of batches: every one pulls from a Python iterator.
HOST_BATCHES: frozenset[str] = frozenset()
# Keras' step names: the programs JAX compiles for each function.
_DEFAULT_PROGRAMS = {"train_step": "train", "test_step": "test", "predict_step": "predict"}
_FUNCTIONS = {function: slot for function, (_, slot) in FUNCTION_HOLDERS.items()}


def probe(function: Any, run_eagerly: bool) -> str | None:
    """Why this Keras function (train, test or predict) cannot be recorded; `None` when it can.

    It must be a Python callable of `(state, iterator)`.
    """
    if not callable(function):
        return f"Keras' function ({function!r}) is not callable"
    try:
        parameters = list(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return f"Keras' function ({function!r}) has no readable signature"
    if len(parameters) != 2:
        return (
            f"Keras' function ({function!r}) takes {parameters}, not the (state, iterator) "
            "the Keras JAX trainer calls it with"
        )
    return None


class _RecordingIterator:
    """Stands in for `fit`'s Python iterator of batches; records every batch taken."""

    def __init__(self, iterator: Any, tap: Any) -> None:
        self._iterator = iterator
        self._tap = tap

    def __iter__(self) -> _RecordingIterator:
        return self

    def __next__(self) -> Any:
        batch = next(self._iterator)
        self._tap.record(batch)
        return batch


def recording_function(original: Any, tap: Any) -> Any:
    """Keras' JAX function (train, test or predict), recording every batch it takes into `tap` (a `HostTap`)."""

    def function(state: Any, iterator: Any) -> Any:
        return original(state, _RecordingIterator(iterator, tap))

    return function


def _step_name(function: Any) -> str | None:
    names = getattr(getattr(function, "__code__", None), "co_freevars", ())
    closure = getattr(function, "__closure__", None) or ()
    for name, cell in zip(names, closure):
        if name in ("step_function", "_step_function"):
            try:
                inner = cell.cell_contents
            except ValueError:
                return None
            found = getattr(inner, "__name__", None)
            if found is None or found == "iterator_step":
                return _step_name(inner)
            return str(found)
    return None


def programs(functions: Mapping[str, Any]) -> dict[str, str]:
    """The programs JAX compiles for Keras' functions: `{"train_step": "train", ...}`.

    Args:
        functions: `"train"`, `"test"`, `"predict"` -> Keras' own function
            (unwrapped of guard stand-ins), or `None` where not built yet.

    Returns:
        The jitted steps' names read from the functions' closures where
        Keras has built them; Keras' own step names for the others.
    """
    found = dict(_DEFAULT_PROGRAMS)
    for function, keras_function in functions.items():
        name = _step_name(keras_function)
        if name is not None:
            found[name] = function
    return found


# The parts of the model's state each function takes, in Keras' order.
_STATE_PARTS = {
    "train": {
        "trainable_variables": True,
        "non_trainable_variables": True,
        "optimizer_variables": True,
        "metrics_variables": True,
    },
    "test": {"trainable_variables": True, "non_trainable_variables": True, "metrics_variables": True},
    "predict": {"trainable_variables": True, "non_trainable_variables": True},
}


def run_on_copy(model: Any, function: str, batches: list[Any]) -> str | None:
    """Runs Keras' `function` (`"train"`, `"test"`, `"predict"`) once per batch on a copy of the state.

    Keras' JAX trainer is stateless: each function takes the model's state
    and returns the new one, and donates the state it was given. Given a
    fresh copy each time, it compiles and runs its program exactly as `fit`
    will, and the model's own variables are never touched (nothing to put
    back). Each batch runs twice, the second time on the state the first
    returned: `fit`'s first step of an epoch takes the state from the
    variables and its later steps the previous step's output, which Keras
    3.10 on JAX 0.6 places differently, compiling the step once for each.
    `predict` takes `(x,)` batches.

    Returns:
        `None` when done; why not when this Keras has no
        `Trainer._get_jax_state`.
    """
    import jax

    from keras_xla_guard.seam._recording import unwrap

    get_state = getattr(model, "_get_jax_state", None)
    if get_state is None:
        return "this Keras has no Trainer._get_jax_state"
    getattr(model, f"make_{function}_function")()
    run = unwrap(getattr(model, _FUNCTIONS[function]))
    # Keras 3.10-3.1x record the state's shardings in fit/evaluate/predict and
    # the steps read them; outside those calls the warm-up records them and
    # clears them again, as they do.
    record = getattr(model, "_record_training_state_sharding_spec", None)
    recorded = False
    if record is not None and getattr(model, "_trainable_variable_shardings", None) is None:
        record()
        recorded = True
    try:
        for batch in batches:
            state = jax.tree_util.tree_map(
                lambda value: jax.numpy.array(value, copy=True),
                get_state(purge_model_variables=False, **_STATE_PARTS[function]),
            )
            _, state = run(state, iter([batch]))
            jax.block_until_ready(run(state, iter([batch])))
    finally:
        if recorded:
            model._clear_jax_state_sharding()
    return None


def builds_from_a_batch(model: Any) -> bool | None:
    """Whether `model`'s next `fit`/`evaluate` takes a batch to build itself (Keras' own test), or `None`.

    `None` when this Keras keeps no `_compile_metrics` / `_compile_loss`
    (then whether it draws is unknown).
    """
    if not hasattr(model, "_compile_metrics") or not hasattr(model, "_compile_loss"):
        return None
    metrics, loss = model._compile_metrics, model._compile_loss
    return (
        not all(layer.built for layer in model._flatten_layers())
        or (metrics is not None and not metrics.built)
        or (loss is not None and not loss.built)
    )


def keep_first_draw(model: Any) -> str | None:
    """Makes the model's next `_symbolic_build` take one batch, as it would have before a warm-up built it.

    Installs a one-shot instance attribute over `Trainer._symbolic_build`:
    on the next call with an iterator (the next `fit` or `evaluate`),
    unless Keras would take a batch itself then (the model was compiled
    again), it takes the first batch the way Keras' own build does, then
    removes itself and calls Keras' method.

    Returns:
        `None` when installed; else why not (this Keras has no
        `_symbolic_build` taking `iterator`).
    """
    build = getattr(type(model), "_symbolic_build", None)
    if build is None or "iterator" not in inspect.signature(build).parameters:
        return "this Keras has no Trainer._symbolic_build(iterator=...)"

    def _symbolic_build(iterator: Any = None, data_batch: Any = None) -> Any:
        vars(model).pop("_symbolic_build", None)
        if iterator is not None and data_batch is None and builds_from_a_batch(model) is False:
            # Keras 3.10 yields (step, data), later releases (begin_step, end_step, data).
            for item in iterator:
                data = item[-1]
                if not isinstance(data, (list, tuple)):
                    next(data)
                break
        return build(model, iterator=iterator, data_batch=data_batch)

    model._symbolic_build = _symbolic_build
    return None
