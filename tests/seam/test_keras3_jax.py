"""Keras 3 on the JAX backend: the seam gives its models no TensorFlow flavour.

Not `compat`-marked: the compat venvs have no jax (Keras' backend is fixed
per process, so these run in a subprocess with `KERAS_BACKEND=jax`).
"""

from __future__ import annotations

import pytest
from _helpers import run_python

pytestmark = pytest.mark.slow


def test_a_keras3_model_on_jax_gets_no_flavour_and_says_why():
    """Under JAX: keras_backend "jax", flavour_of None, attach records nothing and names Keras and backend."""
    out = run_python(
        """
        import json
        import keras
        from keras_xla_guard import seam
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        bound = []
        found = seam.attach(model, bound.append, lambda: None)
        print(json.dumps({
            "backend": seam.keras_backend(model), "configured": seam.keras_backend(),
            "flavour": seam.flavour_of(model), "attached": found.flavour,
            "recording": found.recording, "exit_hook": found.exit_hook, "bound": len(bound),
            "reason": found.reason, "keras": keras.__version__,
        }))
        """,
        env={"KERAS_BACKEND": "jax"},
    )
    assert out == {
        "backend": "jax", "configured": "jax", "flavour": None, "attached": None,
        "recording": False, "exit_hook": False, "bound": 0,
        "reason": f"keras {out['keras']} on backend 'jax' is not a Keras this guard knows how to record",
        "keras": out["keras"],
    }
