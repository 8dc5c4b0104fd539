"""What the guard reads from a Keras model and builds on it, through private Keras where needed.

Its functions (`keras_function`, and the programs JAX compiles for them),
steps per call, layers, every variable a step can change
(`training_state`), and building an unbuilt model's variables ahead of its
first step (`build_model`, `build_for_training`).
"""

from __future__ import annotations

from typing import Any

from keras_xla_guard.seam import _detect
from keras_xla_guard.seam._recording import unwrap

__all__ = [
    "all_layers",
    "build_for_training",
    "build_model",
    "compiled_programs",
    "keras_function",
    "steps_per_execution",
    "training_state",
]


def compiled_programs(model: Any) -> dict[str, str]:
    """The programs the backend compiles for `model`'s functions, by name: `{"train_step": "train", ...}`.

    Only where the backend reports compilations by program name as they
    happen (JAX); `{}` otherwise.
    """
    flavour = _detect.flavour_of(model)
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
    return unwrap(getattr(model, f"{function}_function", None))


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
    if _detect.is_tf_keras(model):
        from keras_xla_guard.seam import tf_keras

        counters, absent = tf_keras.step_counters(model)
        groups.append(counters)
        if absent:
            missing.append(f"{_detect.keras_version(model)} has no {', '.join(absent)}")
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
    flavour = _detect.flavour_of(model)
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
    flavour = _detect.flavour_of(model)
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
