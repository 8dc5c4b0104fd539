"""Which Keras runs a model, on which backend, and the seam flavour that fits it.

Read by every other part of the seam: `flavour_of` picks the flavour module
(`keras3`, `tf_keras`, `keras3_jax`) by the Keras that built the model and
the backend it runs on. The rest of the seam looks it up as
`_detect.flavour_of`, so a test that patches it here reaches every use
inside the seam (a patch of the face's `seam.flavour_of` would reach none).
"""

from __future__ import annotations

from typing import Any

from keras_xla_guard.seam._flavour import Flavour

__all__ = ["flavour_of", "is_compiled", "is_tf_keras", "keras_backend", "keras_version"]


def is_tf_keras(model: Any) -> bool:
    """Whether `model` is a tf_keras (Keras 2) model, subclasses defined anywhere included."""
    return any(
        cls.__module__.startswith(("tf_keras.", "keras.src.engine.", "keras.engine."))
        for cls in type(model).__mro__
    )


def keras_version(model: Any = None) -> str:
    """`"keras 3.15.1"`, `"tf_keras 2.21.0"`: the Keras that runs `model`."""
    if model is not None and is_tf_keras(model):
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
    value = getattr(model, "_is_compiled" if is_tf_keras(model) else "compiled", None)
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
        if is_tf_keras(model):
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
    if is_tf_keras(model):
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
