"""The seam's JAX flavour on real Keras: batches recorded in Python, the jitted steps' names, put back."""

from __future__ import annotations

import pytest
from _jax_helpers import make_data, make_model

from keras_xla_guard import seam
from keras_xla_guard.seam import keras3_jax
from keras_xla_guard.seam.host_tap import HostTap

pytestmark = pytest.mark.compat


def test_a_keras3_model_on_jax_gets_the_jax_flavour():
    """keras_backend "jax", flavour keras3_jax, whose batches arrive in Python."""
    model = make_model()
    assert seam.keras_backend(model) == "jax"
    assert seam.flavour_of(model) is keras3_jax
    assert keras3_jax.BATCHES == "python"


def test_compiled_programs_name_each_functions_jitted_step():
    """After Keras built its three functions, their jitted steps are train_step, test_step, predict_step."""
    model = make_model()
    model.make_train_function()
    model.make_test_function()
    model.make_predict_function()
    assert seam.compiled_programs(model) == {
        "train_step": "train",
        "test_step": "test",
        "predict_step": "predict",
    }
    assert keras3_jax.probe(model.train_function, run_eagerly=False) is None
    assert "takes ['x']" in keras3_jax.probe(lambda x: x, run_eagerly=False)


@pytest.mark.parametrize("steps_per_execution", [1, 3])
def test_attach_records_every_batch_and_detach_puts_keras_function_back(steps_per_execution):
    """Every batch fit takes (also several per call) is recorded once, in order; detach restores Keras' function."""
    import keras

    model = make_model()
    model.compile(optimizer="adam", loss="mse", steps_per_execution=steps_per_execution)
    taps: list[HostTap] = []
    found: list = []

    class Attach(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            found.append(seam.attach(model, taps.append, lambda: None))
            self.keras_function = model.train_function.__wrapped__

        def on_train_end(self, logs=None):
            found[0].detach()

    attach = Attach()
    x, y = make_data(n=80)
    model.fit(x, y, batch_size=32, epochs=1, verbose=0, shuffle=False, callbacks=[attach])
    (tap,) = taps
    assert (found[0].flavour, found[0].recording, found[0].exit_hook) == ("keras3_jax", True, True)
    assert [(str(s), n) for s, n in tap.take(10)] == [
        ("x: float32[32,16], y: float32[32,1]", 2),
        ("x: float32[16,16], y: float32[16,1]", 1),
    ]
    assert model.train_function is attach.keras_function


def test_host_tap_reads_runs_and_refuses_an_overflow():
    """take() gives runs of equal signatures; more unread batches than capacity is an error, not a gap."""
    import numpy as np

    tap = HostTap(capacity=2)
    for width in (3, 3, 4):
        tap.record((np.zeros((2, width)), np.zeros((2, 1))))
    assert tap.distinct == 2 and tap.host_recorded == 3
    with pytest.raises(RuntimeError, match="more than 2 batches"):
        tap.take(10)
    tap.skip_recorded()
    tap.record(np.zeros((1, 5)))
    assert [(str(s), n) for s, n in tap.take(10)] == [("x: float64[1,5]", 1)]
    with pytest.raises(ValueError, match="capacity"):
        HostTap(capacity=0)


def test_a_jit_functions_statics_wrapped_function_and_cache_are_read_where_jax_keeps_them():
    """The private `PjitFunction` attributes `seam/jax_internals.py` reads, probed on this JAX."""
    import functools

    import jax

    from keras_xla_guard.seam import jax_internals

    def scaled(w, x, mode="a"):
        return w * x.sum()

    jitted = jax.jit(scaled, static_argnames=("mode",))
    assert jax_internals.jit_statics(jitted) == ((2,), ("mode",), scaled)
    assert jax_internals.looks_jitted(jitted) and not jax_internals.looks_jitted(scaled)
    assert jax_internals.jit_statics(scaled) is None and jax_internals.cache_size(scaled) is None
    assert jax_internals.cache_size(jitted) == 0
    jitted(1.0, jax.numpy.ones(3), mode="a")
    jitted(1.0, jax.numpy.ones(3), mode="b")
    assert jax_internals.cache_size(jitted) == 2
    partial = jax.jit(functools.partial(scaled, mode="b"))
    assert jax_internals.jit_statics(partial)[:2] == ((), ())
