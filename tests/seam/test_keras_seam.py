"""The Keras seam: every flavour records every batch, or says loudly that it cannot.

These tests run on every Keras of the compatibility matrix (`make
test-compat`): they assert the same figures whichever flavour records, and
they force each path where recording is impossible.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
from _fit_helpers import HEADLINE, LENGTHS, _events, _guard, _seq_dataset, _seq_model, profiler_is_free

from keras_xla_guard.errors import XlaGuardWarning

pytestmark = pytest.mark.compat


def _unavailable_warnings(caught):
    return [
        str(w.message)
        for w in caught
        if issubclass(w.category, XlaGuardWarning) and "unavailable" in str(w.message)
    ]


def test_fit_locals_are_not_found_outside_fit():
    """Outside model.fit the frame walk finds no fit variable."""
    from keras_xla_guard import seam

    assert seam._fit_local(object(), "epoch_iterator") is None


def test_is_compiled_reads_keras_3_and_tf_keras_and_is_none_when_unknown():
    """`compile()` turns it on for a Keras 3 and a tf_keras model; an object of neither kind gives None."""
    import keras
    import tf_keras

    from keras_xla_guard import seam

    new = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    legacy = tf_keras.Sequential([tf_keras.Input((2,)), tf_keras.layers.Dense(1)])
    assert (seam.is_compiled(new), seam.is_compiled(legacy)) == (False, False)
    new.compile(loss="mse")
    legacy.compile(loss="mse")
    assert (seam.is_compiled(new), seam.is_compiled(legacy)) == (True, True)
    assert seam.is_compiled(object()) is None


@pytest.mark.slow
@pytest.mark.parametrize("flavour", ["keras", "tf_keras"])
def test_training_state_holds_every_variable_tensorflows_object_graph_reaches(flavour):
    """An oracle independent of the seam (what warm_up restores and its tests compare): of the
    variables TF's checkpoint tracking reaches from a fitted model (BatchNormalization statistics,
    Adam's step and slots, the metrics'), those not in `training_state` are ones a train step
    leaves as they are (tf_keras' learning rate), in Keras 3 and tf_keras."""
    import importlib

    import tensorflow as tf

    from keras_xla_guard import seam

    k = importlib.import_module(flavour)
    k.utils.set_random_seed(0)
    tokens = k.Input((None,), dtype="int32")
    norm = k.layers.BatchNormalization()
    h = norm(k.layers.Embedding(50, 8)(tokens))
    h = k.layers.Dropout(0.3)(k.layers.GlobalAveragePooling1D()(h))
    model = k.Model(tokens, k.layers.Dense(1)(h))
    model.compile(k.optimizers.Adam(1e-2), "mse", metrics=["mae"])
    model.fit(np.ones((8, 5), "int32"), np.ones((8, 1)), epochs=1, verbose=0)
    kinds = (tf.Variable, k.Variable) if hasattr(k, "Variable") else (tf.Variable,)
    reached = [d for d in tf.train.TrackableView(model).descendants() if isinstance(d, kinds)]
    held = {id(v) for v in seam.training_state(model)[0]}
    # The oracle reaches what matters most to a restore; a tf_keras variable tracks as itself.
    assert {id(model.optimizer.iterations), id(norm.moving_mean)} <= {id(v) for v in reached}
    outside = [v for v in reached if id(v) not in held]
    before = [np.array(v.numpy()) for v in outside]
    model.train_on_batch(np.full((8, 5), 3, "int32"), np.zeros((8, 1)))
    changed = [
        getattr(v, "path", v.name) for v, b in zip(outside, before) if not np.array_equal(v.numpy(), b)
    ]
    assert changed == []
    assert [getattr(v, "path", v.name) for v in outside] == (
        [] if flavour == "keras" else ["learning_rate:0"]
    )


def test_keras_version_names_the_installed_keras():
    """keras_version() names the Keras that is imported, with its version."""
    import keras

    from keras_xla_guard import seam

    assert seam.keras_version() == f"keras {keras.__version__}"


@pytest.mark.slow
@pytest.mark.parametrize("steps_per_execution", [1, 4])
@pytest.mark.parametrize("jit_compile", [True, False])
def test_seam_records_every_batch(steps_per_execution, jit_compile, tmp_path):
    """Through the seam: 7 steps, 5 distinct signatures, the headline, on every Keras and spe."""
    model = _seq_model(jit_compile=jit_compile, steps_per_execution=steps_per_execution)
    guard = _guard(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(_seq_dataset(LENGTHS), epochs=2, callbacks=[guard], verbose=0)
    assert _unavailable_warnings(caught) == []
    first, second = guard.signatures[0], guard.signatures[1]
    assert (first.steps, first.distinct_signatures, first.new_signatures) == (7, 5, 5)
    assert first.expected_compilations == (5 if jit_compile else None)
    assert first.explanations[0].message == HEADLINE
    assert (second.steps, second.distinct_signatures, second.new_signatures) == (7, 5, 0)


@pytest.mark.slow
@pytest.mark.parametrize(("steps_per_execution", "run_eagerly"), [(1, False), (4, False), (1, True)])
def test_observe_gives_the_same_figures_without_touching_keras(steps_per_execution, run_eagerly, tmp_path):
    """guard.observe(dataset): same figures as the seam, and Keras' train function is never replaced."""
    import keras

    seen = []

    class Spy(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            seen.append(self.model.train_function)

    model = _seq_model(jit_compile=True, steps_per_execution=steps_per_execution)
    if run_eagerly:
        model.compile("adam", "mse", jit_compile=True, run_eagerly=True)
    model.make_train_function()
    keras_function = model.train_function
    guard = _guard(tmp_path)
    model.fit(guard.observe(_seq_dataset(LENGTHS)), epochs=2, callbacks=[guard, Spy()], verbose=0)
    assert seen and all(f is keras_function for f in seen)
    first, second = guard.signatures[0], guard.signatures[1]
    assert (first.steps, first.distinct_signatures, first.new_signatures) == (7, 5, 5)
    # Keras turns jit_compile off under run_eagerly: nothing is compiled then.
    assert first.expected_compilations == (None if run_eagerly else 5)
    assert model.jit_compile is not run_eagerly
    assert first.explanations[0].message == HEADLINE
    assert (second.steps, second.new_signatures) == (7, 0)


@pytest.mark.slow
def test_observe_feeds_the_compilation_guard(tmp_path):
    """Through observe, more new shapes than max_compilations still raise RecompilationLimitError."""
    from keras_xla_guard.errors import RecompilationLimitError

    model = _seq_model(jit_compile=True)
    guard = _guard(tmp_path, max_compilations=3, on_violation="raise")
    with pytest.raises(RecompilationLimitError, match="epoch 0 caused 4 XLA compilations"):
        model.fit(guard.observe(_seq_dataset(LENGTHS)), epochs=1, callbacks=[guard], verbose=0)


def test_observe_rejects_what_is_not_a_dataset(tmp_path):
    """observe() of a NumPy array is a ValueError quoting the value."""
    guard = _guard(tmp_path)
    with pytest.raises(ValueError, match=r"tf.data.Dataset.*Received: dataset=array"):
        guard.observe(np.zeros((4, 2)))


def _assert_unavailable_everywhere(guard, log_dir, caught, keras_name):
    """One warning naming the Keras; report fields None; console and TensorBoard say unavailable."""
    from keras_xla_guard.output.console import format_report

    (message,) = _unavailable_warnings(caught)
    assert keras_name in message
    assert "guard.observe(dataset)" in message
    assert guard.signatures == {}
    report = guard.reports[0]
    assert report.ok, report.reason
    assert (report.distinct_signatures, report.new_signatures, report.expected_compilations) == (
        None,
        None,
        None,
    )
    assert keras_name in report.signatures_unavailable
    assert "input signatures:  unavailable (" in format_report(report)
    text = _events(log_dir)["xla_guard/signatures"]
    assert set(text) == {0, 1}
    assert all(v.startswith("**Input signatures: unavailable** (not 0)") for v in text.values())


@pytest.mark.slow
def test_no_fitting_flavour_is_loud_and_unavailable(tmp_path, monkeypatch):
    """When no flavour fits the installed Keras: one warning, None figures, 'unavailable' text."""
    import keras

    from keras_xla_guard.seam import _detect

    # Where every part of the seam looks it up.
    monkeypatch.setattr(_detect, "flavour_of", lambda model: None)
    model = _seq_model(jit_compile=True)
    guard = _guard(tmp_path, profile_epochs=0, skip_steps=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(_seq_dataset(LENGTHS), epochs=2, callbacks=[guard], verbose=0)
    _assert_unavailable_everywhere(guard, tmp_path, caught, f"keras {keras.__version__}")


@pytest.mark.slow
def test_a_seam_that_records_nothing_is_caught_at_epoch_end(tmp_path, monkeypatch):
    """A flavour that attaches but records nothing (Keras changed under it) is detected, not silent."""
    import keras

    from keras_xla_guard.seam import keras3

    # What keras-nightly did to the previous seam: the tap attaches, Keras
    # no longer calls what it replaced.
    monkeypatch.setattr(keras3, "recording_function", lambda original, tap: original)
    model = _seq_model(jit_compile=True)
    guard = _guard(tmp_path, profile_epochs=0, skip_steps=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(_seq_dataset(LENGTHS), epochs=2, callbacks=[guard], verbose=0)
    _assert_unavailable_everywhere(guard, tmp_path, caught, f"keras {keras.__version__}")
    assert "0 of the 7 training batches of epoch 0 were recorded" in guard.reports[0].signatures_unavailable


@pytest.mark.slow
def test_a_leftover_tap_never_breaks_a_later_unguarded_fit(tmp_path):
    """A fit left by a callback error outside the epoch loop puts Keras' function back at once; a later
    fit without a guard runs Keras' own (it used to find the guard's tap still in place)."""
    import keras
    import tensorflow as tf

    from keras_xla_guard import XlaGuardCallback

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile("adam", "mse", jit_compile=True)
    model.make_train_function()
    keras_function = model.train_function
    x = np.random.default_rng(0).random((330, 8)).astype("float32")
    y, sw = x[:, :1], np.ones(330, "float32")

    class Boom(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            raise RuntimeError("user callback failed")

    with pytest.raises(RuntimeError, match="user callback failed"):
        model.fit(
            tf.data.Dataset.from_tensor_slices((x, y, sw)).batch(16),
            epochs=2,
            callbacks=[XlaGuardCallback(log_dir=tmp_path, profile_epochs=(1,), verbose=0), Boom()],
            verbose=0,
        )
    assert model.train_function is keras_function
    # Another batch structure (no sample weights): Keras' own function must run it.
    history = model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(16), epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2
    assert model.train_function is keras_function


@pytest.mark.slow
@pytest.mark.parametrize("where", ["on_train_batch_end", "KeyboardInterrupt"])
def test_an_exception_leaving_a_profiled_epoch_stops_the_profiler_at_once(where, tmp_path):
    """A callback error (or Ctrl-C) inside a profiled epoch: the profiler is stopped and Keras' function put back."""
    import keras

    from keras_xla_guard import XlaGuardCallback

    error = KeyboardInterrupt if where == "KeyboardInterrupt" else RuntimeError

    class Boom(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 3:
                raise error("stop here")

    model = _seq_model(jit_compile=True)
    model.make_train_function()
    keras_function = model.train_function
    guard = XlaGuardCallback(log_dir=tmp_path / "guard", profile_epochs=0, skip_steps=0, verbose=0)
    with pytest.raises(error, match="stop here"):
        model.fit(_seq_dataset(LENGTHS), epochs=1, callbacks=[guard, Boom()], verbose=0)
    assert not guard.engine.profiling
    assert model.train_function is keras_function
    assert profiler_is_free()


_MIRRORED_SCRIPT = r"""
import json, os, sys, warnings
import numpy as np
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
from keras_xla_guard import XlaGuardCallback
from keras_xla_guard.errors import XlaGuardWarning

out = {}
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
rng = np.random.default_rng(0)
lengths = (5, 7, 9, 5, 11, 7, 13)
batches = [(rng.integers(0, 50, (8, n)).astype("int32"), rng.standard_normal((8, 1)).astype("float32"))
           for n in lengths]
spec = (tf.TensorSpec((None, None), tf.int32), tf.TensorSpec((None, 1), tf.float32))
for path in ("seam", "observe"):
    for spe in (1,):
        with strategy.scope():
            keras.utils.set_random_seed(0)
            model = keras.Sequential([keras.Input((None,), dtype="int32"), keras.layers.Embedding(50, 8),
                                      keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(1)])
            model.compile("sgd", "mse", steps_per_execution=spe)
        data = tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=spec)
        guard = XlaGuardCallback(log_dir=os.path.join(sys.argv[1], f"{path}{spe}"), profile_epochs=(),
                                 verbose=0)
        if path == "observe":
            data = guard.observe(data)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.fit(data, epochs=2, callbacks=[guard], verbose=0)
        out[f"{path}{spe}"] = {
            "epochs": {e: [s.steps, s.distinct_signatures, s.new_signatures]
                       for e, s in guard.signatures.items()},
            "headline": guard.signatures[0].explanations[0].message if 0 in guard.signatures else None,
            "warnings": [str(w.message) for w in caught if issubclass(w.category, XlaGuardWarning)],
        }
print(json.dumps(out))
"""


@pytest.mark.slow
def test_mirrored_strategy_records_every_global_batch(tmp_path):
    """Under a 2-replica MirroredStrategy, seam and observe both see 7 global batches, 5 signatures.

    steps_per_execution=1 only: with 4, Keras 3.15 and 3.16 themselves fail
    under MirroredStrategy ("You must feed a value for placeholder tensor
    ... while/cond/Placeholder"), with or without the guard.
    """
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(
        [sys.executable, "-c", _MIRRORED_SCRIPT, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    headline = "input x dim 1 varied across 5 values (5, 7, 9, 11, 13)"
    assert set(result) == {"seam1", "observe1"}
    for key in ("seam1", "observe1"):
        run = result[key]
        assert run["epochs"] == {"0": [7, 5, 5], "1": [7, 5, 0]}, key
        assert run["headline"] == headline, key
        assert run["warnings"] == [], key


_TF_KERAS_OBSERVE_SCRIPT = r"""
import json, sys, warnings
import numpy as np
import tensorflow as tf
from keras_xla_guard import XlaGuardCallback

rng = np.random.default_rng(0)
batches = [(rng.integers(0, 50, (8, n)).astype("int32"), rng.standard_normal((8, 1)).astype("float32"))
           for n in (5, 7, 9, 5, 11, 7, 13)]
spec = (tf.TensorSpec((None, None), tf.int32), tf.TensorSpec((None, 1), tf.float32))
out = {"module": None}
for path in ("seam", "observe"):
    for spe in (1, 4):
        for eager in (False, True):
            # tf_keras needs the data's size with steps_per_execution > 1.
            data = tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=spec).apply(
                tf.data.experimental.assert_cardinality(len(batches)))
            model = tf.keras.Sequential([tf.keras.layers.Embedding(50, 8),
                                         tf.keras.layers.GlobalAveragePooling1D(), tf.keras.layers.Dense(1)])
            model.compile("adam", "mse", jit_compile=not eager, steps_per_execution=spe, run_eagerly=eager)
            out["module"] = type(model).__module__
            guard = XlaGuardCallback(log_dir=sys.argv[1], profile_epochs=(), verbose=0)
            if path == "observe":
                data = guard.observe(data)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                model.fit(data, epochs=2, callbacks=[guard], verbose=0)
            out[f"{path}{spe}{'eager' if eager else ''}"] = {
                "epochs": {e: [s.steps, s.distinct_signatures, s.new_signatures]
                           for e, s in guard.signatures.items()},
                "warnings": [str(w.message) for w in caught if "keras-xla-guard" in str(w.message)],
            }
print(json.dumps(out))
"""


@pytest.mark.slow
def test_tf_keras_records_through_seam_and_observe(tmp_path):
    """tf_keras: seam and observe, spe 1 and 4, compiled and eager: 7 steps, 5 signatures, no warning."""
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(
        [sys.executable, "-c", _TF_KERAS_OBSERVE_SCRIPT, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result.pop("module").startswith("tf_keras")
    assert len(result) == 8
    for key, run in result.items():
        assert run["epochs"] == {"0": [7, 5, 5], "1": [7, 5, 0]}, key
        assert run["warnings"] == [], key


@pytest.mark.slow
def test_loop_guard_observe_records_the_dataset_batches(tmp_path):
    """XlaGuard.observe in a custom loop: signatures come from the dataset, one per watched step."""
    import tensorflow as tf

    from keras_xla_guard import XlaGuard

    @tf.function(jit_compile=True, reduce_retracing=True)
    def step(batch):
        return tf.reduce_sum(tf.cast(batch[0]["tokens"], tf.float32))

    with XlaGuard(log_dir=tmp_path, profile_epochs=(), verbose=0) as guard:
        dataset = guard.observe(_seq_dataset(LENGTHS))
        watched = guard.watch(step)
        for epoch in range(2):
            with guard.epoch(epoch):
                for batch in dataset:
                    watched(batch)
    first, second = guard.signatures[0], guard.signatures[1]
    assert (first.steps, first.distinct_signatures, first.new_signatures) == (7, 5, 5)
    assert first.expected_compilations == 5
    assert first.explanations[0].message == HEADLINE
    assert (second.steps, second.new_signatures) == (7, 0)


@pytest.mark.parametrize(
    ("name", "backend", "batches"),
    [
        ("keras3", "tensorflow", "graph"),
        ("tf_keras", "tensorflow", "graph"),
        ("keras3_jax", "jax", "python"),
    ],
)
def test_each_flavour_module_keeps_the_flavour_contract(name, backend, batches):
    """Every flavour defines every Flavour member: names, its backend, where batches are pulled, holders, callables."""
    import importlib

    from keras_xla_guard.seam import Flavour

    flavour = importlib.import_module(f"keras_xla_guard.seam.{name}")
    assert set(Flavour.__annotations__) == {
        "FLAVOUR",
        "BACKEND",
        "BATCHES",
        "DATASET_HOLDER",
        "EXIT_HOOK_HOLDER",
        "FUNCTION_HOLDERS",
        "HOST_BATCHES",
    }
    assert (flavour.FLAVOUR, flavour.BACKEND, flavour.BATCHES) == (name, backend, batches)
    assert set(flavour.FUNCTION_HOLDERS) == {"train", "test", "predict"}
    holder, attribute = flavour.DATASET_HOLDER
    assert holder.isidentifier() and attribute.isidentifier()
    assert flavour.EXIT_HOOK_HOLDER.isidentifier()
    assert set(flavour.FUNCTION_HOLDERS) == {"train", "test", "predict"}
    assert all(
        (owner is None or owner.isidentifier()) and slot.isidentifier()
        for owner, slot in flavour.FUNCTION_HOLDERS.values()
    )
    assert flavour.HOST_BATCHES <= set(flavour.FUNCTION_HOLDERS) - {"train"}
    assert callable(flavour.probe) and callable(flavour.recording_function)


def test_flavour_of_picks_keras3_for_a_keras3_model_on_tensorflow():
    """A Keras 3 model on the TensorFlow backend: backend "tensorflow", flavour keras3."""
    from keras_xla_guard import seam
    from keras_xla_guard.seam import keras3

    model = _seq_model(jit_compile=True)
    assert seam.keras_backend(model) == "tensorflow"
    assert seam.flavour_of(model) is keras3


def test_flavour_of_picks_tf_keras_for_a_tf_keras_model():
    """A tf_keras model runs on TensorFlow and gets the tf_keras flavour, beside Keras 3."""
    import tf_keras

    from keras_xla_guard import seam
    from keras_xla_guard.seam import tf_keras as flavour

    model = tf_keras.Sequential([tf_keras.Input((2,)), tf_keras.layers.Dense(1)])
    assert seam.keras_backend(model) == "tensorflow"
    assert seam.flavour_of(model) is flavour
    assert seam.keras_version(model).startswith("tf_keras ")
