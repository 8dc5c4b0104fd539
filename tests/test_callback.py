"""Tests for XlaGuardCallback in real `model.fit` runs on CPU."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import fit_with_guard, make_dataset, make_model, run_python

from keras_xla_guard import XlaGuardCallback, XlaGuardWarning, analyze_trace
from keras_xla_guard.xplane import load_xspace

pytestmark = [pytest.mark.slow, pytest.mark.compat]


def _profiler_is_free() -> bool:
    import tensorflow as tf

    try:
        tf.profiler.experimental.start("")
    except tf.errors.AlreadyExistsError:
        return False
    tf.profiler.experimental.stop()
    return True


def _step_markers(trace_path: str) -> list[int]:
    space = load_xspace(trace_path)
    steps = []
    for plane in space.planes:
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        for line in plane.lines:
            for e in line.events:
                if plane.event_metadata[e.metadata_id].name == "train":
                    stats = {names[s.metadata_id]: s for s in e.stats}
                    steps.append(stats["step_num"].int64_value or stats["step_num"].uint64_value)
    return sorted(steps)


def test_reports_are_keyed_by_epoch_with_window_facts(jit_fit):
    """reports[1] describes epoch 1: steps, wall time and the trace it read."""
    assert list(jit_fit.callback.reports) == [1]
    report = jit_fit.callback.reports[1]
    assert report.epoch == 1
    assert report.steps_profiled == 14  # 16 batches, first 2 skipped
    assert report.window_wall_s > 0
    assert Path(report.trace_path).is_file()
    assert "plugins/profile" in report.trace_path


def test_trace_holds_one_step_marker_per_profiled_step(jit_fit):
    """The window marks each step for XProf (`train` events with step_num)."""
    assert _step_markers(jit_fit.callback.reports[1].trace_path) == list(range(2, 16))


def test_step_cap_bounds_the_window_and_windows_repeat(tmp_path):
    """max_steps caps each window; profile_every gives one trace per epoch."""
    fit = fit_with_guard(True, tmp_path, epochs=3, profile_every=1, skip_steps=1, max_steps=3)
    reports = fit.callback.reports
    assert sorted(reports) == [0, 1, 2]
    paths = {r.trace_path for r in reports.values()}
    assert len(paths) == 3
    for epoch, report in reports.items():
        assert report.status == "ok"
        assert report.steps_profiled == 3
        assert _step_markers(report.trace_path) == [1, 2, 3]
        assert f"epoch{epoch}" in Path(report.trace_path).parent.name
    assert reports[0].compilations == 0  # the compile happens in step 0, skipped
    assert reports[2].xla_time_fraction >= 0.9


def test_default_schedule_profiles_epoch_1_or_the_only_epoch(tmp_path):
    """No schedule given: epoch 1 of a multi-epoch fit, epoch 0 of a one-epoch fit."""
    one = fit_with_guard(True, tmp_path / "one", epochs=1)
    assert list(one.callback.reports) == [0]
    two = fit_with_guard(True, tmp_path / "two", epochs=2)
    assert list(two.callback.reports) == [1]


def test_event_files_hold_scalars_per_epoch_and_the_text_table(plain_fit):
    """The required xla_guard/* scalars and the ops table are in the event file."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(plain_fit.log_dir), size_guidance={"tensors": 0})
    acc.Reload()
    tags = set(acc.Tags()["tensors"])
    for tag in ("xla_guard/xla_time_fraction", "xla_guard/xla_time_s",
                "xla_guard/non_xla_op_time_s", "xla_guard/compilations",
                "xla_guard/compile_time_s", "xla_guard/report"):
        assert tag in tags
    report = plain_fit.callback.reports[1]
    (event,) = acc.Tensors("xla_guard/non_xla_op_time_s")
    assert event.step == 1
    from tensorboard.util import tensor_util

    value = float(tensor_util.make_ndarray(event.tensor_proto))
    assert value == pytest.approx(report.non_xla_op_time_s, rel=1e-6)
    (text,) = acc.Tensors("xla_guard/report")
    markdown = tensor_util.make_ndarray(text.tensor_proto).item().decode()
    from keras_xla_guard.summary import escape_markdown

    rows = [ln for ln in markdown.splitlines() if ln.startswith("|")]
    assert "op type" in rows[0] and "op name" in rows[0]
    assert len(rows) == 2 + len(report.top_non_xla_ops)
    assert escape_markdown(report.top_non_xla_ops[0].op_name) in rows[2]


@pytest.mark.parametrize("jit_compile", [True, False])
def test_weights_are_bit_identical_with_and_without_the_guard(tmp_path, jit_compile):
    """The guard changes no training numbers (same seeds, same data)."""
    import keras

    def train(callbacks):
        model = make_model(jit_compile)
        model.fit(make_dataset(), epochs=2, callbacks=callbacks, verbose=0, shuffle=False)
        return [np.array(w) for w in model.get_weights()]

    keras.utils.set_random_seed(0)
    without = train([])
    keras.utils.set_random_seed(0)
    guard = XlaGuardCallback(log_dir=tmp_path, profile_epochs=(0, 1), skip_steps=0, verbose=0)
    with_guard = train([guard])
    assert guard.reports[1].status == "ok"
    assert len(without) == len(with_guard)
    for a, b in zip(without, with_guard):
        assert np.array_equal(a, b)


def test_keras_tensorboard_profiler_in_the_same_fit_skips_our_window(tmp_path):
    """With TensorBoard(profile_batch) profiling, our overlapping window is skipped, not crashed."""
    import keras

    model = make_model(True)
    tb = keras.callbacks.TensorBoard(log_dir=str(tmp_path / "tb"), profile_batch=(2, 4))
    guard = XlaGuardCallback(log_dir=tmp_path / "guard", profile_epochs=(0, 1), skip_steps=3, verbose=0)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        model.fit(make_dataset(), epochs=2, callbacks=[tb, guard], verbose=0)
    assert guard.reports[0].status == "skipped"
    assert "another profiler" in guard.reports[0].reason
    assert guard.reports[1].status == "ok"
    assert analyze_trace(tmp_path / "tb").xla_time_fraction >= 0.9
    assert _profiler_is_free()


class _Boom(Exception):
    pass


def _raise_in_step(at_call: int, exc: BaseException):
    """A callback that makes the model's step raise `exc` on call `at_call`.

    It replaces `model.train_function` at train begin, exactly where an
    interrupt or a runtime error surfaces in a real step; the guard wraps
    its own handler around it when the window opens.
    """
    import keras

    class RaiseInStep(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            original = self.model.train_function
            calls = {"n": 0}

            def train_function(iterator):
                calls["n"] += 1
                if calls["n"] == at_call:
                    raise exc
                return original(iterator)

            self.model.train_function = train_function

    return RaiseInStep()


@pytest.mark.parametrize("exc", [_Boom("user error"), KeyboardInterrupt()])
def test_exception_in_a_profiled_step_stops_the_profiler_and_propagates(tmp_path, exc):
    """An exception escaping fit mid-window stops our profiler and is re-raised unchanged."""
    model = make_model(True)
    guard = XlaGuardCallback(log_dir=tmp_path, profile_epochs=0, skip_steps=1, verbose=0)
    with pytest.raises(type(exc)) as info:
        model.fit(make_dataset(), epochs=1, callbacks=[_raise_in_step(5, exc), guard], verbose=0)
    assert info.value is exc
    assert not guard.engine.profiling
    assert _profiler_is_free()


def test_stop_training_mid_window_closes_the_window(tmp_path):
    """model.stop_training inside a profiled epoch ends the window with the steps run."""
    import keras

    class StopAt(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 6:
                self.model.stop_training = True

    model = make_model(True)
    guard = XlaGuardCallback(log_dir=tmp_path, profile_epochs=0, skip_steps=2, verbose=0)
    model.fit(make_dataset(), epochs=3, callbacks=[guard, StopAt()], verbose=0)
    assert list(guard.reports) == [0]
    assert guard.reports[0].steps_profiled == 5
    assert _profiler_is_free()


def test_early_stopping_between_epochs_keeps_reports(tmp_path):
    """EarlyStopping ends fit cleanly; finished windows keep their reports."""
    import keras

    model = make_model(True)
    guard = XlaGuardCallback(log_dir=tmp_path, profile_every=1, skip_steps=2, max_steps=2, verbose=0)
    stop = keras.callbacks.EarlyStopping(monitor="loss", patience=0, min_delta=1e9)
    model.fit(make_dataset(), epochs=5, callbacks=[guard, stop], verbose=0)
    assert sorted(guard.reports) == [0, 1]
    assert all(r.status == "ok" for r in guard.reports.values())
    assert _profiler_is_free()


def test_guard_failure_is_a_warning_and_training_goes_on(tmp_path):
    """If the guard cannot write its traces, fit still trains and the report says failed."""
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    model = make_model(True)
    guard = XlaGuardCallback(log_dir=blocker / "sub", profile_epochs=0, verbose=0)
    with pytest.warns(XlaGuardWarning, match="Training continues"):
        history = model.fit(make_dataset(), epochs=2, callbacks=[guard], verbose=0)
    assert len(history.history["loss"]) == 2
    assert guard.reports[0].status == "failed"
    assert _profiler_is_free()


def test_profiler_left_running_by_a_crash_is_stopped_on_next_use(tmp_path):
    """A window orphaned by another callback's exception is stopped by the next guard."""
    import keras

    class Crash(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if batch == 4:
                raise _Boom("callback crashed")

    model = make_model(True)
    guard = XlaGuardCallback(log_dir=tmp_path / "a", profile_epochs=0, skip_steps=1, verbose=0)
    with pytest.raises(_Boom):
        model.fit(make_dataset(), epochs=1, callbacks=[guard, Crash()], verbose=0)
    assert not _profiler_is_free()
    with pytest.warns(XlaGuardWarning, match="left running"):
        fit = fit_with_guard(True, tmp_path / "b", epochs=1, profile_epochs=0)
    assert fit.callback.reports[0].status == "ok"
    assert _profiler_is_free()


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"profile_epochs": -1}, "profile_epochs=-1"),
        ({"profile_epochs": "1"}, "profile_epochs='1'"),
        ({"profile_epochs": [0, 1.5]}, "profile_epochs=[0, 1.5]"),
        ({"profile_every": 0}, "profile_every=0"),
        ({"skip_steps": -2}, "skip_steps=-2"),
        ({"max_steps": 0}, "max_steps=0"),
        ({"top_k": -1}, "top_k=-1"),
        ({"log_dir": ""}, "log_dir=''"),
        ({"verbose": 3}, "verbose=3"),
    ],
)
def test_bad_arguments_are_value_errors_naming_the_value(kwargs, needle):
    """Every invalid argument raises ValueError quoting what was received."""
    with pytest.raises(ValueError) as info:
        XlaGuardCallback(**kwargs)
    assert needle in str(info.value)


def test_profile_epochs_accepts_int_iterable_and_range():
    """profile_epochs may be an int, a list/tuple/set or a range."""
    assert XlaGuardCallback(profile_epochs=2).engine.schedule.epochs == {2}
    assert XlaGuardCallback(profile_epochs=[0, 3]).engine.schedule.epochs == {0, 3}
    assert XlaGuardCallback(profile_epochs=range(1, 4)).engine.schedule.epochs == {1, 2, 3}


@pytest.mark.parametrize("backend", ["jax", "numpy"])
def test_other_keras_backends_are_refused_at_construction(backend):
    """With a non-TensorFlow Keras backend the constructor raises BackendError."""
    out = run_python(
        """
        import json
        from keras_xla_guard import XlaGuardCallback, BackendError
        try:
            XlaGuardCallback()
        except BackendError as e:
            print(json.dumps({"error": str(e)}))
        """,
        env={"KERAS_BACKEND": backend},
    )
    assert f"backend={backend!r}" in out["error"]
    assert "KERAS_BACKEND=tensorflow" in out["error"]
    if backend == "jax":
        assert "already compiled by XLA" in out["error"]


def test_importing_the_package_does_not_import_tensorflow():
    """`import keras_xla_guard` stays light; TF loads on first real use."""
    out = run_python(
        """
        import json, sys
        import keras_xla_guard
        light = "tensorflow" not in sys.modules and "keras" not in sys.modules
        keras_xla_guard.analyze_trace  # pure analysis still needs no TF runtime
        print(json.dumps({"light": light, "tf_after": "tensorflow" in sys.modules}))
        """
    )
    assert out == {"light": True, "tf_after": False}
