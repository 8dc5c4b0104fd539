"""XlaGuardCallback on KERAS_BACKEND=jax: signatures, exact compile counts, limits, weights untouched."""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest
from _jax_helpers import BATCH, EPOCHS, PROFILED, TRAIN_SHAPES, fit_on_jax, make_data, make_model

pytestmark = pytest.mark.slow


def test_every_epoch_has_its_input_signatures(guarded):
    """Signatures are tracked every epoch: 2 distinct (32 and the short 16), both new in epoch 0 only."""
    sigs = guarded.guard.signatures
    assert sorted(sigs) == list(range(EPOCHS))
    assert [(s.steps, s.distinct_signatures, s.new_signatures) for s in sigs.values()] == [
        (3, 2, 2),
        (3, 2, 0),
        (3, 2, 0),
    ]
    assert [str(s) for s, _ in sigs[0].new] == [
        f"x: float32[{b},{f}], y: float32[{b},1]" for b, f in TRAIN_SHAPES
    ]
    assert [step for _, step in sigs[0].new] == [0, 2]
    assert any(e.kind == "short_last_batch" for e in sigs[0].explanations)


def test_compilations_are_counted_per_function_and_step_with_their_cause(guarded):
    """Each new signature is one train_step compilation at its step (0 and 2); test_step compiles once.

    Every other train compilation is one JAX made although no new signature
    came (Keras 3.10 on JAX 0.6.2 compiles again at step 1 and at epoch 1's
    step 0, the model state placed differently); the guard lists it apart.
    """
    compiled = guarded.guard.engine.compilations
    assert sorted(compiled) == list(range(EPOCHS))
    train = [r for c in compiled.values() for r in c.rows if r.function == "train"]
    caused = [(r.epoch, r.program, r.step, r.signature) for r in train if r.signature is not None]
    assert caused == [
        (0, "train_step", 0, "x: float32[32,16], y: float32[32,1]"),
        (0, "train_step", 2, "x: float32[16,16], y: float32[16,1]"),
    ]
    unexplained = [r for c in compiled.values() for r in c.without_new_signature]
    assert len(unexplained) == len(train) - 2
    assert [sum(c.counts[f] for c in compiled.values()) for f in ("test", "predict")] == [1, 0]
    assert compiled[EPOCHS - 1].counts == {"train": 0, "test": 0, "predict": 0, "warm_up": 0, "other": 0}
    for row in train:
        assert row.lower_s > 0 and row.compile_s > 0 and not row.cache_hit
    assert all(row.trace_s > 0 for row in train if row.signature is not None)


def test_the_counts_equal_jax_monitorings_own(guarded):
    """The guard's train/test counts equal a separate jax.monitoring listener's jit(train_step)/jit(test_step)."""
    rows = [r for c in guarded.guard.engine.compilations.values() for r in c.rows]
    assert sum(r.function == "train" for r in rows) == guarded.oracle_compiles.count("jit(train_step)") >= 2
    assert sum(r.function == "test" for r in rows) == guarded.oracle_compiles.count("jit(test_step)") == 1
    # Keras' small eager programs (jit(equal), ...) are counted apart, never as a step's.
    others = sorted(r.program for r in rows if r.function == "other")
    assert others == sorted(
        n[4:-1] for n in guarded.oracle_compiles if n not in ("jit(train_step)", "jit(test_step)")
    )


def test_the_profiled_window_is_a_report(guarded):
    """The profiled epoch has an ok report of its steps, launches counted, marked as a JAX window."""
    report = guarded.guard.reports[PROFILED]
    assert report.ok, report.reason
    assert report.backend == "jax"
    assert report.xla_executions >= report.steps_profiled >= 1
    assert report.compilations == 0


def test_weights_are_bit_identical_with_and_without_the_guard(guarded, unguarded):
    """The guarded fit ends with exactly the unguarded fit's weights and history."""
    assert len(guarded.weights) == len(unguarded.weights)
    for a, b in zip(guarded.weights, unguarded.weights):
        np.testing.assert_array_equal(a, b)
    assert guarded.history == unguarded.history


def test_keras_train_function_is_put_back(guarded):
    """After fit the model's train function is Keras' own again, not the guard's recording one."""
    from keras_xla_guard.seam._recording import GUARD_WRAPPER

    function = guarded.model.train_function
    assert not getattr(function, GUARD_WRAPPER, False)
    assert function.__code__.co_freevars[-1] == "step_function"


def test_max_compilations_raise_names_the_count_and_the_cause(tmp_path):
    """max_compilations=1 with on_violation='raise': RecompilationLimitError at the second train compile."""
    from keras_xla_guard import RecompilationLimitError

    with pytest.raises(RecompilationLimitError) as info:
        fit_on_jax(tmp_path, max_compilations=1, on_violation="raise", profile_epochs=())
    message = str(info.value)
    assert "epoch 0 caused 2 XLA compilations (of the train step, counted as they happened)" in message
    assert "more than max_compilations=1" in message


def test_on_violation_stop_ends_training_after_the_epoch(tmp_path):
    """on_violation='stop' warns once and stops fit after epoch 0."""
    from keras_xla_guard import XlaGuardWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = fit_on_jax(tmp_path, max_compilations=1, on_violation="stop", profile_epochs=())
    assert len(run.history["loss"]) == 1
    stops = [
        w for w in caught if issubclass(w.category, XlaGuardWarning) and "Stopping training" in str(w.message)
    ]
    assert len(stops) == 1


def test_the_jax_suite_runs_without_tensorflow():
    """`make test-jax` runs in a venv without TensorFlow, and nothing here imported it."""
    import importlib.util

    assert importlib.util.find_spec("tensorflow") is None
    assert "tensorflow" not in sys.modules


def test_explain_is_skipped_with_a_warning_naming_jax(tmp_path):
    """explain=True on JAX warns that it reads TensorFlow graphs, and training goes on."""
    from keras_xla_guard import XlaGuardCallback, XlaGuardWarning

    x, y = make_data()
    model = make_model()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(
            x,
            y,
            batch_size=BATCH,
            epochs=1,
            verbose=0,
            callbacks=[XlaGuardCallback(log_dir=tmp_path, explain=True, profile_epochs=(), verbose=0)],
        )
    said = [str(w.message) for w in caught if issubclass(w.category, XlaGuardWarning)]
    assert len(said) == 1 and "explain reads TensorFlow graphs" in said[0] and "jax" in said[0]


def test_evaluate_and_predict_count_their_own_compilations_as_predicted(tmp_path):
    """After fit: evaluate and predict calls each track signatures and count compilations; predicted == counted."""
    from keras_xla_guard import XlaGuardCallback

    x, y = make_data()
    model = make_model()
    guard = XlaGuardCallback(log_dir=tmp_path, profile_epochs=(), verbose=0)
    model.fit(x, y, batch_size=BATCH, epochs=1, validation_split=0.2, callbacks=[guard], verbose=0)
    model.evaluate(x[:50], y[:50], batch_size=32, callbacks=[guard], verbose=0)
    model.predict(x[:40], batch_size=16, callbacks=[guard], verbose=0)
    validation, evaluate, predict = guard.engine.calls
    assert (validation.kind, validation.compilations) == ("validation", None)
    assert guard.compilations[0].count("test") == validation.signatures.expected_compilations == 1
    # evaluate: batches of 32 and 18, both new to the test function (validation saw 20).
    assert (evaluate.kind, evaluate.signatures.new_signatures) == ("evaluate", 2)
    assert (
        sum(c.function == "test" for c in evaluate.compilations) == evaluate.signatures.expected_compilations
    )
    assert (predict.kind, predict.signatures.new_signatures) == ("predict", 2)
    assert [c.program for c in predict.compilations if c.function == "predict"] == ["predict_step"] * 2


def test_the_guard_keeps_keras_batch_end_dispatch_asynchronous(guarded):
    """Under JAX the guard is async_safe (Keras then never waits for a step's results for it); step ends come from the seam."""
    assert guarded.guard.async_safe is True


def test_messages_about_the_profiler_name_jax_not_tensorflow(tmp_path):
    """Under JAX a second guard in one fit, and a window whose session a callback stopped with
    jax.profiler.stop_trace(), are told in JAX's words (both named TensorFlow before)."""
    import warnings

    import jax
    import keras
    from _jax_helpers import BATCH, make_data, make_model

    from keras_xla_guard import XlaGuardCallback, XlaGuardWarning

    class Restart(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if batch == 1:
                jax.profiler.stop_trace()
                jax.profiler.start_trace(str(tmp_path / "user"))

        def on_epoch_end(self, epoch, logs=None):
            jax.profiler.stop_trace()

    x, y = make_data()
    first = XlaGuardCallback(log_dir=tmp_path / "a", profile_epochs=0, skip_steps=0, verbose=0)
    second = XlaGuardCallback(log_dir=tmp_path / "b", profile_epochs=0, verbose=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make_model().fit(x, y, batch_size=BATCH, epochs=1, callbacks=[first, second, Restart()], verbose=0)
    messages = [str(w.message) for w in caught if issubclass(w.category, XlaGuardWarning)]
    assert any("a process runs one profiler at a time" in m for m in messages), messages
    (lost,) = [m for m in messages if "stopped by someone else" in m]
    assert "(e.g. jax.profiler.stop_trace() in another callback)" in lost
    assert all("TensorFlow" not in m and "tf.profiler" not in m for m in messages), messages
    assert first.reports[0].status == "failed"
