"""Tests for XlaGuardCallback in real `model.fit` runs on CPU."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from _fit_helpers import profiler_is_free
from _helpers import fit_with_guard, make_data, make_dataset, make_model, run_python
from _oracle import RAW_REL, raw_figures

from keras_xla_guard import XlaGuardCallback, XlaGuardWarning, analyze_trace
from keras_xla_guard.trace.xplane import load_xspace

pytestmark = [pytest.mark.slow, pytest.mark.compat]


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


@pytest.mark.parametrize("name", ["jit_fit", "plain_fit"])
def test_a_fits_own_eager_ops_are_timed_but_not_noted(name, request):
    """Keras runs a variable read and an Identity eagerly once an epoch: eager_op_time_s is their raw
    spans' time, and, fewer than the steps, they get no eager-op note."""
    from _oracle import raw_eager_ops

    report = request.getfixturevalue(name).callback.reports[1]
    total_ps, calls = raw_eager_ops(report.trace_path)
    assert report.eager_op_time_s == pytest.approx(total_ps * 1e-12, rel=1e-12, abs=1e-15)
    assert calls and max(calls.values()) < report.steps_profiled == len(report.steps)
    assert not any("ran eagerly" in note for note in report.notes)


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
    for report in reports.values():
        assert (report.xla_time_s, report.xla_executions, report.xla_time_fraction) == pytest.approx(
            raw_figures(report.trace_path, report.non_xla_op_time_s), rel=RAW_REL
        )
        assert report.xla_executions == 3


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
    for tag in (
        "xla_guard/xla_time_fraction",
        "xla_guard/xla_time_s",
        "xla_guard/non_xla_op_time_s",
        "xla_guard/compilations",
        "xla_guard/compile_time_s",
        "xla_guard/report",
    ):
        assert tag in tags
    report = plain_fit.callback.reports[1]
    (event,) = acc.Tensors("xla_guard/non_xla_op_time_s")
    assert event.step == 1
    from tensorboard.util import tensor_util

    value = float(tensor_util.make_ndarray(event.tensor_proto))
    assert value == pytest.approx(report.non_xla_op_time_s, rel=1e-6)
    (text,) = acc.Tensors("xla_guard/report")
    markdown = tensor_util.make_ndarray(text.tensor_proto).item().decode()
    from keras_xla_guard.output.tensorboard_markdown import escape_markdown
    from keras_xla_guard.trace.findings import split_findings

    rows = [ln for ln in markdown.splitlines() if ln.startswith("|")]
    assert "op type" in rows[0] and "layer" in rows[0] and "op name" in rows[0]
    # The ops above the noise floor, then one row for the rest of the plain-op time.
    split = split_findings(
        report.top_non_xla_ops, lambda op: op.self_time_s, report.xla_time_s, report.non_xla_op_time_s
    )
    assert split.findings and len(rows) == 2 + len(split.findings) + (split.other_s > 0)
    assert escape_markdown(report.top_non_xla_ops[0].op_name) in rows[2]
    # A plain Dense model: every op of its layers names the Keras layer.
    model = plain_fit.model
    layers = {layer.name for layer in model.layers}
    assert {op.layer for op in split.findings} <= layers | {f"optimizer {model.optimizer.name}", None}
    assert layers & {op.layer for op in split.findings}


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
    """With TensorBoard(profile_batch) profiling, our overlapping window is skipped with a warning."""
    import keras

    model = make_model(True)
    tb = keras.callbacks.TensorBoard(log_dir=str(tmp_path / "tb"), profile_batch=(2, 4))
    guard = XlaGuardCallback(log_dir=tmp_path / "guard", profile_epochs=(0, 1), skip_steps=3, verbose=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(make_dataset(), epochs=2, callbacks=[tb, guard], verbose=0)
    assert any(
        str(w.message).startswith("keras-xla-guard: epoch 0 is not profiled: another profiler")
        for w in caught
    )
    assert guard.reports[0].status == "skipped"
    assert "another profiler" in guard.reports[0].reason
    assert guard.reports[1].status == "ok"
    tb = analyze_trace(tmp_path / "tb")
    assert (tb.xla_time_s, tb.xla_executions, tb.xla_time_fraction) == pytest.approx(
        raw_figures(tb.trace_path, tb.non_xla_op_time_s), rel=RAW_REL
    )
    assert tb.xla_executions == 3  # TensorBoard profiled batches 2 to 4
    assert profiler_is_free()


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
    assert profiler_is_free()
    # The window opened at step 1; step 4's call raised: a window that did not complete.
    report = guard.reports[0]
    assert (report.status, report.steps_profiled, report.xla_time_fraction) == ("incomplete", 4, None)
    assert f"4 step(s) in ({type(exc).__name__}" in report.reason
    saved = json.loads((tmp_path / "xla_guard_reports.json").read_text())["reports"]["0"]
    assert (saved["status"], saved["xla_time_fraction"], saved["trace_paths"]) == (
        "incomplete",
        None,
        list(report.trace_paths),
    )


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
    assert profiler_is_free()


def test_early_stopping_between_epochs_keeps_reports(tmp_path):
    """EarlyStopping ends fit cleanly; finished windows keep their reports."""
    import keras

    model = make_model(True)
    guard = XlaGuardCallback(log_dir=tmp_path, profile_every=1, skip_steps=2, max_steps=2, verbose=0)
    stop = keras.callbacks.EarlyStopping(monitor="loss", patience=0, min_delta=1e9)
    model.fit(make_dataset(), epochs=5, callbacks=[guard, stop], verbose=0)
    assert sorted(guard.reports) == [0, 1]
    assert all(r.status == "ok" for r in guard.reports.values())
    assert profiler_is_free()


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
    assert profiler_is_free()


def test_profiler_is_stopped_when_another_callback_crashes_the_epoch(tmp_path):
    """A window cut short by another callback's exception is stopped at once, not by the next guard."""
    import keras

    class Crash(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if batch == 4:
                raise _Boom("callback crashed")

    model = make_model(True)
    guard = XlaGuardCallback(log_dir=tmp_path / "a", profile_epochs=0, skip_steps=1, verbose=0)
    with pytest.raises(_Boom):
        model.fit(make_dataset(), epochs=1, callbacks=[guard, Crash()], verbose=0)
    assert profiler_is_free()
    with warnings.catch_warnings():
        warnings.simplefilter("error", XlaGuardWarning)
        fit = fit_with_guard(True, tmp_path / "b", epochs=1, profile_epochs=0)
    assert fit.callback.reports[0].status == "ok"
    assert profiler_is_free()


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
        ({"log_dir": "gs://bucket/logs"}, "log_dir='gs://bucket/logs'"),
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


def test_other_keras_backends_are_refused_at_construction():
    """With a Keras backend other than TensorFlow or JAX the constructor raises BackendError."""
    out = run_python(
        """
        import json
        from keras_xla_guard import XlaGuardCallback, BackendError
        try:
            XlaGuardCallback()
        except BackendError as e:
            print(json.dumps({"error": str(e)}))
        """,
        env={"KERAS_BACKEND": "numpy"},
    )
    assert "backend='numpy'" in out["error"]
    assert "KERAS_BACKEND=tensorflow or KERAS_BACKEND=jax" in out["error"]


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


def _fit(model, guard, epochs, data=None, **kwargs):
    """Fits `model` on `data` (default `make_dataset()`) with `guard` and returns the history."""
    return model.fit(
        make_dataset() if data is None else data, epochs=epochs, callbacks=[guard], verbose=0, **kwargs
    )


def test_interrupt_inside_tf_stop_is_recovered_by_the_next_guard(tmp_path, monkeypatch):
    """Ctrl-C inside TF's profiler stop: the next guard stops the session and profiles normally."""
    import tensorflow as tf

    real_stop = tf.profiler.experimental.stop

    def interrupted_stop(*args, **kwargs):
        monkeypatch.setattr(tf.profiler.experimental, "stop", real_stop)
        raise KeyboardInterrupt

    monkeypatch.setattr(tf.profiler.experimental, "stop", interrupted_stop)
    first = XlaGuardCallback(log_dir=tmp_path / "a", profile_epochs=0, max_steps=2, verbose=0)
    with pytest.raises(KeyboardInterrupt):
        _fit(make_model(True), first, epochs=1)
    assert not profiler_is_free()
    second = XlaGuardCallback(log_dir=tmp_path / "b", profile_epochs=(0, 1), max_steps=2, verbose=0)
    with pytest.warns(XlaGuardWarning, match="left running"):
        _fit(make_model(True), second, epochs=2)
    assert [r.status for r in second.reports.values()] == ["ok", "ok"]
    assert len(list((tmp_path / "a" / "plugins" / "profile").glob("*/*.xplane.pb"))) == 1
    assert profiler_is_free()


def test_every_window_gets_its_own_run_dir_and_trace(tmp_path):
    """Three fits and one guard shared by two models, one log dir: six windows, six traces."""
    guards = [
        XlaGuardCallback(log_dir=tmp_path, profile_epochs=(0, 1), skip_steps=0, max_steps=2, verbose=0)
        for _ in range(3)
    ]
    for guard in guards:
        _fit(make_model(True), guard, epochs=2)
    shared = XlaGuardCallback(log_dir=tmp_path, profile_epochs=(0, 1), skip_steps=0, max_steps=2, verbose=0)
    paths = [r.trace_path for g in guards for r in g.reports.values()]
    for model in (make_model(True), make_model(False)):
        _fit(model, shared, epochs=2)
        paths += [r.trace_path for r in shared.reports.values()]
    reports = [r for g in guards for r in g.reports.values()] + list(shared.reports.values())
    assert [r.status for r in reports] == ["ok"] * 8
    assert len(set(paths)) == 10  # the shared guard's reports are read after each fit
    assert len(list((tmp_path / "plugins" / "profile").glob("*/*.xplane.pb"))) == 10
    for path in set(paths):
        assert _step_markers(path) == [0, 1]


def test_a_second_guard_in_one_fit_stands_aside_with_a_warning(tmp_path):
    """Two guards in one fit: the first profiles undisturbed, the second warns and does nothing."""
    first = XlaGuardCallback(log_dir=tmp_path / "a", profile_epochs=0, skip_steps=0, verbose=0)
    second = XlaGuardCallback(log_dir=tmp_path / "b", profile_epochs=0, skip_steps=5, verbose=0)
    model = make_model(True)
    with pytest.warns(XlaGuardWarning, match="does nothing in this fit") as record:
        model.fit(make_dataset(), epochs=1, callbacks=[first, second], verbose=0)
    assert all("left running" not in str(w.message) for w in record)
    report = first.reports[0]
    assert report.status == "ok"
    assert report.steps_profiled == 16
    assert report.xla_executions == 16
    assert report.distinct_signatures == 1
    assert first.signatures[0].steps == 16
    assert second.reports == {}
    assert second.signatures == {}
    assert not (tmp_path / "b").exists()
    assert profiler_is_free()


def test_user_restarting_the_profiler_in_the_window_keeps_their_session(tmp_path):
    """A callback that stops our profiler and starts its own: we leave theirs and report the loss."""
    import keras
    import tensorflow as tf

    class Restart(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if batch == 3:
                tf.profiler.experimental.stop()
                tf.profiler.experimental.start(str(tmp_path / "user"))

        def on_epoch_end(self, epoch, logs=None):
            tf.profiler.experimental.stop()

    guard = XlaGuardCallback(
        log_dir=tmp_path / "guard", profile_epochs=0, skip_steps=1, max_steps=5, verbose=0
    )
    with pytest.warns(XlaGuardWarning, match="stopped by someone else"):
        history = make_model(True).fit(make_dataset(), epochs=1, callbacks=[guard, Restart()], verbose=0)
    assert len(history.history["loss"]) == 1
    report = guard.reports[0]
    assert report.status == "failed"
    assert "stopped by someone else" in report.reason
    assert len(list((tmp_path / "user").rglob("*.xplane.pb"))) == 1
    assert list((tmp_path / "guard").rglob("*.xplane.pb")) == []
    assert profiler_is_free()


def test_remote_log_dir_is_refused_at_construction():
    """log_dir='gs://...' is refused with a ValueError saying remote paths are not supported."""
    with pytest.raises(ValueError, match="remote file systems") as info:
        XlaGuardCallback(log_dir="gs://bucket/logs")
    assert "Received: log_dir='gs://bucket/logs'" in str(info.value)


def test_failed_trace_write_gives_a_failed_report_for_its_epoch(tmp_path, monkeypatch):
    """Disk full while TF writes the trace: one warning, a failed report for the epoch, training on."""
    import errno

    import tensorflow as tf

    real_stop = tf.profiler.experimental.stop

    def full_disk_stop(*args, **kwargs):
        monkeypatch.setattr(tf.profiler.experimental, "stop", real_stop)
        real_stop(*args, **kwargs)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tf.profiler.experimental, "stop", full_disk_stop)
    guard = XlaGuardCallback(log_dir=tmp_path, profile_epochs=0, skip_steps=0, max_steps=3, verbose=0)
    with pytest.warns(XlaGuardWarning, match="No space left on device"):
        history = _fit(make_model(True), guard, epochs=2)
    assert len(history.history["loss"]) == 2
    assert list(guard.reports) == [0]
    report = guard.reports[0]
    assert report.status == "failed"
    assert report.reason == "writing the trace failed: OSError: [Errno 28] No space left on device"
    assert report.steps_profiled == 3
    assert profiler_is_free()


def test_validation_steps_are_kept_out_of_the_window(tmp_path):
    """With validation_data the window closes before validation: 18 steps, 18 XLA launches."""
    import tensorflow as tf

    x, y = make_data(n=320)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)  # 20 steps
    guard = XlaGuardCallback(log_dir=tmp_path, profile_epochs=(1,), verbose=0)
    _fit(make_model(True), guard, epochs=2, data=data, validation_data=data)
    report = guard.reports[1]
    assert report.status == "ok"
    assert report.steps_profiled == 18  # steps 2..19
    assert report.xla_executions == 18
    assert _step_markers(report.trace_path) == list(range(2, 20))


def test_wide_model_fanning_out_to_pool_threads_is_one_launch_per_step(tmp_path):
    """A program XLA splits over pool threads (loose ThunkExecutor spans there) counts once per step."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((512,))]
        + [keras.layers.Dense(512, activation="relu") for _ in range(6)]
        + [keras.layers.Dense(1)]
    )
    model.compile(optimizer="adam", loss="mse", jit_compile=True)
    x = np.random.default_rng(0).random((256 * 12, 512), dtype=np.float32)
    data = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(256)  # 12 steps
    guard = XlaGuardCallback(log_dir=tmp_path, profile_epochs=0, verbose=0)
    _fit(model, guard, epochs=1, data=data)
    report = guard.reports[0]
    assert report.status == "ok", report.reason
    assert report.steps_profiled == 10  # steps 2..11
    assert report.xla_executions == 10
    assert report.compilations == 0  # step 0 compiled, outside the window
    space = load_xspace(report.trace_path)
    host = next(p for p in space.planes if p.name == "/host:CPU")
    thunk = {i for i, m in host.event_metadata.items() if m.name == "ThunkExecutor::Execute"}
    on_pool = sum(
        e.metadata_id in thunk
        for line in host.lines
        if not line.name.startswith("tf_Compute")
        for e in line.events
    )
    assert on_pool > report.xla_executions  # the program really was split


def test_resumed_training_profiles_an_epoch_that_runs(tmp_path):
    """initial_epoch=3: the default profiles epoch 4 (or 3 when it is the only one)."""
    resumed = XlaGuardCallback(log_dir=tmp_path / "a", max_steps=2, verbose=0)
    _fit(make_model(True), resumed, epochs=5, initial_epoch=3)
    assert list(resumed.reports) == [4]
    assert resumed.reports[4].status == "ok"
    last = XlaGuardCallback(log_dir=tmp_path / "b", max_steps=2, verbose=0)
    _fit(make_model(True), last, epochs=4, initial_epoch=3)
    assert list(last.reports) == [3]


def test_profile_epochs_outside_the_resumed_run_warn(tmp_path):
    """Explicit profile_epochs the run never reaches give a warning naming them."""
    guard = XlaGuardCallback(log_dir=tmp_path, profile_epochs=(1, 3, 7), max_steps=2, verbose=0)
    with pytest.warns(
        XlaGuardWarning,
        match=r"includes epoch\(s\) \[1, 7\], which this run does "
        r"not train \(it trains epochs 3 to 4\)",
    ):
        _fit(make_model(True), guard, epochs=5, initial_epoch=3)
    assert list(guard.reports) == [3]


def test_empty_dataset_window_is_skipped_with_the_reason(tmp_path):
    """An empty dataset trains no step: the epoch's report is skipped, not ok."""
    import tensorflow as tf

    x = np.zeros((0, 16), "float32")
    data = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(16)
    guard = XlaGuardCallback(log_dir=tmp_path, verbose=0)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Your input ran out of data")
        _fit(make_model(True), guard, epochs=1, data=data)
    report = guard.reports[0]
    assert report.status == "skipped"
    assert report.reason == "no training step ran in the epoch (is the dataset empty?)"
    assert report.steps_profiled == 0
    assert profiler_is_free()


def test_data_of_unknown_length_counts_only_the_steps_that_ran(tmp_path):
    """A generator of 7 batches: steps_profiled is 7 (not the 8th, end-of-data call), as are launches and signatures."""
    import keras
    from _fit_helpers import _seq_dataset, _seq_model

    keras.utils.set_random_seed(0)
    model = _seq_model(jit_compile=True)
    lengths = (5, 5, 5, 5, 5, 5, 5)
    guard = XlaGuardCallback(
        log_dir=tmp_path, profile_epochs=(1,), skip_steps=0, verbose=0, async_analysis=False
    )
    model.fit(_seq_dataset(lengths), epochs=2, verbose=0, callbacks=[guard])
    report = guard.reports[1]
    assert report.status == "ok"
    assert (report.steps_profiled, report.xla_executions) == (7, 7)
    assert guard.signatures[1].steps == 7
    assert _step_markers(report.trace_path) == list(range(8))  # Keras' 8th call is marked, not counted
