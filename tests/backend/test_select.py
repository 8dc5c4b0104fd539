"""Choosing the backend from a Keras model or Keras' configured backend, and refusing the rest."""

from __future__ import annotations

import pytest
from _helpers import make_model, run_python

from keras_xla_guard.backend import get, select

pytestmark = pytest.mark.slow


def test_keras_on_tensorflow_selects_the_tensorflow_backend():
    """Under KERAS_BACKEND=tensorflow, select() and select(model) give the TensorFlow backend."""
    assert select() is get("tensorflow")
    assert select(make_model(True)) is get("tensorflow")


def test_tf_keras_models_select_the_tensorflow_backend():
    """A tf_keras model runs on TensorFlow, whatever Keras 3 is configured with."""
    out = run_python(
        """
        import json
        import tf_keras
        from keras_xla_guard import seam
        from keras_xla_guard.backend import select
        model = tf_keras.Sequential([tf_keras.Input((2,)), tf_keras.layers.Dense(1)])
        print(json.dumps({"seam": seam.keras_backend(model), "backend": select(model).name}))
        """,
        env={"KERAS_BACKEND": "jax", "TF_USE_LEGACY_KERAS": "1"},
    )
    assert out == {"seam": "tensorflow", "backend": "tensorflow"}


def test_keras_on_jax_selects_the_jax_backend():
    """Keras on JAX: select() and select(model) give the JAX backend, which names its JAX version."""
    out = run_python(
        """
        import json
        import jax, keras
        from keras_xla_guard import seam
        from keras_xla_guard.backend import get, select
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        print(json.dumps({"names": [select().name, select(model).name], "same": select(model) is get("jax"),
                          "version": select().version(), "jax": jax.__version__,
                          "seam": seam.keras_backend(model)}))
        """,
        env={"KERAS_BACKEND": "jax"},
    )
    assert out == {
        "names": ["jax", "jax"],
        "same": True,
        "version": f"jax {out['jax']}",
        "jax": out["jax"],
        "seam": "jax",
    }


def test_numpy_is_refused_naming_keras_and_the_backends_it_has():
    """Keras on NumPy: select() and select(model) raise BackendError naming Keras, the backend and the fix."""
    out = run_python(
        """
        import json
        import keras
        from keras_xla_guard.backend import select
        from keras_xla_guard.errors import BackendError
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        errors = []
        for arg in (None, model):
            try:
                select(arg)
            except BackendError as e:
                errors.append(str(e))
        print(json.dumps({"errors": errors, "keras": keras.__version__}))
        """,
        env={"KERAS_BACKEND": "numpy"},
    )
    assert len(out["errors"]) == 2
    for error in out["errors"]:
        assert f"keras {out['keras']} runs on backend='numpy'" in error
        assert "backends ['tensorflow', 'jax']" in error
        assert "KERAS_BACKEND=tensorflow or KERAS_BACKEND=jax" in error


def test_a_tf_function_step_is_on_tensorflow_and_a_python_step_follows_the_process():
    """`for_step`: the framework whose compiled function it is; else the one this process imported."""
    import tensorflow as tf

    from keras_xla_guard import backend

    @tf.function(jit_compile=True)
    def tf_step(x):
        return x * 2

    def python_step(x):
        return x

    assert backend.for_step(tf_step).name == "tensorflow"
    probe = backend.for_step(tf_step).step_probe(tf_step, ("x",))
    assert (probe.jit_compile, probe.jitted, probe.signature, probe.executables()) == (True, True, None, None)
    # A plain Python step: the one framework imported, else Keras' backend (TensorFlow in this venv).
    import keras

    assert keras.backend.backend() == "tensorflow"
    assert backend.for_step(python_step).name == "tensorflow"
