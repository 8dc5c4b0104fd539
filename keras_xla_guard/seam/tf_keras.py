"""tf_keras (Keras 2, `TF_USE_LEGACY_KERAS=1`): where `fit` pulls its batches.

A `seam.Flavour` (tf_keras runs on TensorFlow only).

Private contacts, each verified on the versions listed in `docs/compatibility.md`:

- `model.train_function` is a `tf.function` over the iterator
  (`tf_keras/src/engine/training.py`, `make_train_function`) that takes
  batches with `next(iterator)`; it is retraced from its
  `python_function` (converted with AutoGraph, as tf_keras' own is) on a
  recording iterator. With `run_eagerly=True` it is
  a plain Python function, called with the recording iterator.
- `fit`'s local `data_handler` (a `DataHandler`), found by walking up the
  stack: `_dataset` is the dataset a `tf.distribute` strategy splits, and
  `catch_stop_iteration()` encloses every epoch's steps. `evaluate` and
  `predict` keep theirs under the same name.
- `model.test_function` and `model.predict_function` are `tf.function`s
  over the iterator like the train function, tapped the same way.
  `evaluate` calls the test function through its local
  `test_function_runner` (a `_TestFunction`), which took the function
  (`_function`) before `on_test_begin`: the tap goes there.
- `model.steps_per_execution` is a `tf.Variable` (mirrored under a strategy).
- A warm-up restores what a train step changes: the step counters
  `model._train_counter`, `_test_counter`, `_predict_counter`, and the state
  of each layer's random generator (`layer._random_generator._generator`, a
  `tf.random.Generator`; Dropout draws from it), which `model.variables`
  does not list.
"""

from __future__ import annotations

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
    "random_states",
    "recording_function",
    "step_counters",
]

FLAVOUR = "tf_keras"
BACKEND = "tensorflow"
# Batches are pulled inside the traced train function (recorded by an InputTap).
BATCHES = "graph"
DATASET_HOLDER = ("data_handler", "_dataset")
EXIT_HOOK_HOLDER = "data_handler"
FUNCTION_HOLDERS: Mapping[str, tuple[str | None, str]] = {
    "train": (None, "train_function"),
    "test": ("test_function_runner", "_function"),
    "predict": (None, "predict_function"),
}
HOST_BATCHES: frozenset[str] = frozenset()


def probe(function: Any, run_eagerly: bool) -> str | None:
    """Why this tf_keras train, test or predict function cannot be recorded; `None` when it can."""
    if run_eagerly or hasattr(function, "python_function"):
        return None
    return f"Keras' function {function!r} is not the tf.function tf_keras builds"


def recording_function(original: Any, tap: Any) -> Any:
    """tf_keras' train, test or predict function, recording every batch into `tap`."""
    from keras_xla_guard.seam._recording import recording_tf_function

    return recording_tf_function(original, tap, autograph=True)


_COUNTERS = ("_train_counter", "_test_counter", "_predict_counter")


def step_counters(model: Any) -> tuple[list[Any], list[str]]:
    """tf_keras' step counters (`model._train_counter`, ...) and the names it lacks."""
    found, absent = [], []
    for name in _COUNTERS:
        counter = getattr(model, name, None)
        if counter is None:
            absent.append(name)
        else:
            found.append(counter)
    return found, absent


def random_states(layers: Any) -> tuple[list[Any], list[str]]:
    """The state variables of the layers' random generators, and the layers whose state is not a variable.

    A generator of `rng_type="legacy_stateful"` keeps its state inside TF's
    random ops, where nothing can put it back.
    """
    found, legacy = [], []
    for layer in layers:
        generator = getattr(layer, "_random_generator", None)
        if generator is None:
            continue
        if hasattr(generator, "_maybe_init"):
            generator._maybe_init()
        state = getattr(getattr(generator, "_generator", None), "state", None)
        if state is not None:
            found.append(state)
        elif getattr(generator, "_rng_type", None) == getattr(
            generator, "RNG_LEGACY_STATEFUL", "legacy_stateful"
        ):
            legacy.append(getattr(layer, "name", repr(layer)))
    return found, legacy
