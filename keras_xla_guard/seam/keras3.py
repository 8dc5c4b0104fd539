"""Keras 3 (TensorFlow backend): where `fit` pulls its batches, and how to see them.

A `seam.Flavour`: `flavour_of` gives it to Keras 3 models on its `BACKEND`.

Private contacts, each verified on the versions listed in `docs/compatibility.md`:

- `model.train_function` built by `keras/src/backend/tensorflow/trainer.py`
  (`_make_function`): from Keras 3.8 a plain Python function whose closure
  holds `multi_step_on_iterator` (a `tf.function` pulling
  `steps_per_execution` batches in-graph) and `one_step_on_data` (one
  batch, called from Python). Keras 3.15 calls `multi_step_on_iterator`
  for every `steps_per_execution`; Keras 3.16 (nightly) pulls the batch
  in Python with `iterator.get_next_as_optional()` when
  `steps_per_execution == 1` and calls `one_step_on_data` with it. The tap
  replaces both cells in a copy of the function: the first with a
  recording `tf.function` retraced from its `python_function`, the second
  with a Python wrapper that reads the eager batch's shapes (no TF op).
  Before 3.8 `model.train_function` is itself a `tf.function` over the
  iterator, retraced on a recording iterator like tf_keras'.
- `fit`'s local `epoch_iterator` (a `TFEpochIterator`), found by walking
  up the stack from `on_train_begin`: its `_distributed_dataset` is the
  dataset a `tf.distribute` strategy splits (tapped there with a `map`),
  and its `catch_stop_iteration()` context encloses every epoch's steps,
  so wrapping it tells the guard when an exception leaves an epoch.
  `evaluate` and `predict` keep theirs under the same name (inside `fit`,
  `evaluate` uses the cached `model._eval_epoch_iterator`), found from
  `on_test_begin` / `on_predict_begin`.
- `model.test_function` is built by the same `_make_function` as the train
  function (`make_test_function`, cached until `compile`) and tapped the
  same way. `model.predict_function` (`make_predict_function`) is a
  `tf.function` over a list of `steps_per_execution` batches that
  `predict` pulls in Python with `next(iterator)`: the guard records
  their shapes in Python before calling it.
"""

from __future__ import annotations

import types
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
    "probe",
    "recording_function",
    "symbolic_build",
]

FLAVOUR = "keras3"
BACKEND = "tensorflow"
# Batches are pulled inside the traced train function (recorded by an InputTap).
BATCHES = "graph"
_STEP_CELLS = ("multi_step_on_iterator", "one_step_on_data")
# (fit's local variable, its attribute holding the dataset fit distributes).
DATASET_HOLDER = ("epoch_iterator", "_distributed_dataset")
EXIT_HOOK_HOLDER = "epoch_iterator"
FUNCTION_HOLDERS: Mapping[str, tuple[str | None, str]] = {
    "train": (None, "train_function"),
    "test": (None, "test_function"),
    "predict": (None, "predict_function"),
}
HOST_BATCHES = frozenset({"predict"})
# Concrete step functions kept per train function: one per batch shape, up to
# this many (a shape storm beyond it goes through the tf.function).
_MAX_CONCRETE = 64


def _cells(function: Any) -> dict[str, int]:
    names = getattr(getattr(function, "__code__", None), "co_freevars", ())
    if not getattr(function, "__closure__", None):
        return {}
    return {name: names.index(name) for name in _STEP_CELLS if name in names}


def probe(function: Any, run_eagerly: bool) -> str | None:
    """Why this Keras 3 train or test function cannot be recorded; `None` when it can."""
    if run_eagerly or hasattr(function, "python_function"):
        return None
    if "multi_step_on_iterator" in _cells(function):
        return None
    return (
        f"Keras' function {function!r} is neither a tf.function nor a function "
        "calling multi_step_on_iterator, the two forms this guard knows how to record"
    )


def recording_function(original: Any, tap: Any) -> Any:
    """Keras 3's train (or test) function, recording every batch into `tap`."""
    from keras_xla_guard.seam._recording import recording_tf_function

    cells = _cells(original)
    if not cells:
        return recording_tf_function(original, tap)
    closure = list(original.__closure__)
    if "multi_step_on_iterator" in cells:
        index = cells["multi_step_on_iterator"]
        closure[index] = types.CellType(recording_tf_function(closure[index].cell_contents, tap))
    if "one_step_on_data" in cells:
        index = cells["one_step_on_data"]
        closure[index] = types.CellType(_recording_step(closure[index].cell_contents, tap))
    return types.FunctionType(
        original.__code__, original.__globals__, original.__name__, original.__defaults__, tuple(closure)
    )


def _recording_step(step: Any, tap: Any) -> Any:
    """`one_step_on_data` that records its batch first (called from Python).

    Keras 3.16 calls it from Python with each eager batch. Like `DirectCall`
    for the iterator, calls after the first with each batch shape run the
    traced concrete function of Keras' `tf.function` directly, skipping its
    per-call trace-cache lookup (which costs more than recording): the same
    graph, so the same numbers. The cell holds Keras' `_autoconvert_optionals`
    wrapper, whose `__wrapped__` is the `tf.function`; a batch holding a
    `tf.experimental.Optional` (which the wrapper turns into `None`) goes
    through the wrapper.
    """
    import tensorflow as tf

    function = step if hasattr(step, "get_concrete_function") else getattr(step, "__wrapped__", None)
    direct = function if hasattr(function, "get_concrete_function") else None
    concrete: dict[tuple[int, ...], Any] = {}
    run_eagerly = tf.config.functions_run_eagerly
    optional = tf.experimental.Optional

    def one_step_on_data(data: Any) -> Any:
        key = tap.record_host(data)
        if direct is None or key is None or run_eagerly():
            return step(data)
        call = concrete.get(key)
        if call is not None:
            return call(data)
        outputs = step(data)
        if len(concrete) < _MAX_CONCRETE and not any(
            isinstance(leaf, optional) for leaf in tf.nest.flatten(data)
        ):
            concrete[key] = direct.get_concrete_function(data)
        return outputs

    return one_step_on_data


def symbolic_build(model: Any, batch: Any) -> str | None:
    """Builds model, optimizer, metrics and losses for `batch` without running a step.

    `Trainer._symbolic_build(data_batch=...)` (private; `fit` calls it under
    a distribution strategy), inside the model's strategy scope; it builds
    only what is not built yet.

    Returns:
        `None` when built, else why not.
    """
    build = getattr(model, "_symbolic_build", None)
    if build is None:
        return "this Keras has no Trainer._symbolic_build"
    strategy = getattr(model, "distribute_strategy", None)
    try:
        if strategy is not None:
            with strategy.scope():
                build(data_batch=batch)
        else:
            build(data_batch=batch)
    except (TypeError, AttributeError, ValueError) as e:
        # An uncompiled model has no `optimizer` (AttributeError); a compiled
        # one given x alone has no `y` for its loss (ValueError).
        return f"Trainer._symbolic_build(data_batch=...) failed: {e}"
    return None
