"""One profiler owner per process: guards never stop each other's windows.

Real TF profiler, real Keras fits and custom loops: an `XlaGuard` window
open while a `fit` with `XlaGuardCallback` runs, the reverse, two guards on
threads, a guard whose thread died, and profilers the user or Keras'
TensorBoard callback hold. A guard that finds the profiler held reports its
window `skipped` with the reason; the holder's report stays `ok` and its
window covers every step it counts (checked on its trace's step markers).
"""

from __future__ import annotations

import threading
import warnings
from pathlib import Path
from typing import Any

import pytest
from _fit_helpers import profiler_is_free
from _helpers import make_dataset, make_model
from _traces import step_markers

from keras_xla_guard import XlaGuard, XlaGuardCallback

pytestmark = [pytest.mark.slow, pytest.mark.compat]

FIT_STEPS = 16  # make_dataset(): 512 rows in batches of 32


def _jit_step() -> Any:
    """A tf.function(jit_compile=True) train step of a custom loop (one XLA launch per call)."""
    import tensorflow as tf

    w = tf.Variable(tf.ones((16, 1)))

    @tf.function(jit_compile=True)
    def train_step(x: Any) -> Any:
        loss = tf.reduce_mean((x @ w) ** 2)
        w.assign_sub(0.001 * tf.transpose(tf.reduce_mean(x, axis=0, keepdims=True)) * loss)
        return loss

    return train_step


def _batch() -> Any:
    import tensorflow as tf

    return tf.ones((32, 16))


def _loop_guard(log_dir: Path) -> XlaGuard:
    return XlaGuard(
        log_dir=log_dir, profile_epochs=0, skip_steps=0, max_steps=None, verbose=0, async_analysis=False
    )


def _callback(log_dir: Path) -> XlaGuardCallback:
    return XlaGuardCallback(
        log_dir=log_dir, profile_epochs=0, skip_steps=0, max_steps=None, verbose=0, async_analysis=False
    )


def _messages(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "keras-xla-guard" in str(w.message)]


def test_a_fit_inside_an_open_loop_window_is_skipped_and_the_loop_measures_all_its_steps(tmp_path):
    """XlaGuard window open, then fit with XlaGuardCallback: the fit's window is skipped naming the loop's."""
    loop, callback = _loop_guard(tmp_path / "loop"), _callback(tmp_path / "fit")
    step, x = loop.watch(_jit_step()), _batch()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with loop, loop.epoch(0):
            for _ in range(5):
                step(x)
            make_model(True).fit(make_dataset(), epochs=1, callbacks=[callback], verbose=0)
            for _ in range(5):
                step(x)
    skipped = callback.reports[0]
    assert skipped.status == "skipped"
    assert skipped.reason == (
        "another keras-xla-guard profiling window is running in this process "
        f"(log_dir={str(tmp_path / 'loop')!r}, started on thread 'MainThread'); one profiler runs at a time"
    )
    assert skipped.xla_executions is None
    assert callback.signatures[0].steps == FIT_STEPS
    report = loop.reports[0]
    assert report.status == "ok"
    assert report.steps_profiled == 10
    assert step_markers(report.trace_path) == list(range(10))
    # The loop's 10 launches and the fit's 16, all inside the loop's one window.
    assert report.xla_executions == 10 + FIT_STEPS
    assert not any("left running" in m for m in _messages(caught))
    assert "keras-xla-guard: epoch 0 is not profiled: another keras-xla-guard profiling window" in (
        " ".join(_messages(caught))
    )
    assert profiler_is_free()


def test_a_loop_inside_an_open_fit_window_is_skipped_and_the_fit_measures_all_its_steps(tmp_path):
    """fit with XlaGuardCallback window open, then an XlaGuard loop inside it: the loop's window is skipped."""
    import keras

    loop, callback = _loop_guard(tmp_path / "loop"), _callback(tmp_path / "fit")
    step, x = loop.watch(_jit_step()), _batch()

    class InnerLoop(keras.callbacks.Callback):
        """Runs a whole guarded custom loop (4 steps) after batch 3 of the fit."""

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if batch == 3:
                with loop, loop.epoch(0):
                    for _ in range(4):
                        step(x)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make_model(True).fit(make_dataset(), epochs=1, callbacks=[callback, InnerLoop()], verbose=0)
    skipped = loop.reports[0]
    assert skipped.status == "skipped"
    assert skipped.reason == (
        "another keras-xla-guard profiling window is running in this process "
        f"(log_dir={str(tmp_path / 'fit')!r}, started on thread 'MainThread'); one profiler runs at a time"
    )
    assert loop.signatures[0].steps == 4
    report = callback.reports[0]
    assert report.status == "ok"
    assert report.steps_profiled == FIT_STEPS
    assert step_markers(report.trace_path) == list(range(FIT_STEPS))
    assert report.xla_executions == FIT_STEPS + 4
    assert not any("left running" in m for m in _messages(caught))
    assert profiler_is_free()


def test_two_loop_guards_on_threads_one_measures_the_other_is_skipped(tmp_path):
    """Guard b begins its run while guard a's window is open on another thread: b skipped, a's report intact."""
    guards = {name: _loop_guard(tmp_path / name) for name in ("a", "b")}
    opened, tried = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def train(name: str) -> None:
        guard = guards[name]
        step, x = guard.watch(_jit_step()), _batch()
        try:
            if name == "b":
                opened.wait(60)
            with guard, guard.epoch(0):
                for index in range(6):
                    step(x)
                    if name == "a" and index == 0:
                        opened.set()
                        tried.wait(60)
            if name == "b":
                tried.set()
        except BaseException as e:  # noqa: BLE001 - handed to the main thread's assert
            errors.append(e)
            opened.set()
            tried.set()

    threads = [threading.Thread(target=train, args=(name,), name=f"guard-{name}") for name in ("a", "b")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
    assert errors == []
    skipped = guards["b"].reports[0]
    assert skipped.status == "skipped"
    assert skipped.reason == (
        "another keras-xla-guard profiling window is running in this process "
        f"(log_dir={str(tmp_path / 'a')!r}, started on thread 'guard-a'); one profiler runs at a time"
    )
    assert guards["b"].signatures[0].steps == 6
    report = guards["a"].reports[0]
    assert report.status == "ok"
    assert report.steps_profiled == 6
    assert step_markers(report.trace_path) == list(range(6))
    # Guard b's 6 launches ran inside a's window too (a process-wide profiler).
    assert report.xla_executions == 12
    assert not any("left running" in m for m in _messages(caught))
    assert profiler_is_free()


def test_a_window_whose_thread_died_is_stopped_by_the_next_guard_and_never_reads_ok(tmp_path):
    """A guard's training thread ended inside its window: the next run stops it with a warning; it reports failed."""
    dead = _loop_guard(tmp_path / "dead")
    step, x = dead.watch(_jit_step()), _batch()

    def abandon() -> None:
        """Opens a window and ends the thread without leaving the epoch (what a killed trainer leaves)."""
        dead.epoch(0).__enter__()
        step(x)

    thread = threading.Thread(target=abandon, name="trainer")
    thread.start()
    thread.join()
    assert dead.engine.profiling
    callback = _callback(tmp_path / "fit")
    with pytest.warns(
        UserWarning,
        match=r"left running by an interrupted training \(the thread that started it "
        r"\('trainer'\) has ended",
    ):
        make_model(True).fit(make_dataset(), epochs=1, callbacks=[callback], verbose=0)
    assert callback.reports[0].status == "ok"
    assert callback.reports[0].steps_profiled == FIT_STEPS
    with pytest.warns(UserWarning, match="stopped by keras-xla-guard as stale"):
        dead.close()
    report = dead.reports[0]
    assert report.status == "failed"
    assert "before the window ended, so its trace does not cover the window's steps" in report.reason
    assert profiler_is_free()


def test_a_profiler_the_user_started_skips_the_window_and_stays_theirs(tmp_path):
    """tf.profiler.experimental.start around a guarded fit: the window is skipped; the user's session is intact."""
    import tensorflow as tf

    callback = _callback(tmp_path / "fit")
    tf.profiler.experimental.start(str(tmp_path / "user"))
    try:
        with pytest.warns(
            UserWarning, match="epoch 0 is not profiled: another profiler session is already running"
        ):
            make_model(True).fit(make_dataset(), epochs=1, callbacks=[callback], verbose=0)
        assert not profiler_is_free()
    finally:
        tf.profiler.experimental.stop()
    report = callback.reports[0]
    assert report.status == "skipped"
    assert report.reason.startswith("another profiler session is already running in this process")
    assert "TensorFlow said: Another profiler is running" in report.reason
    assert len(list((tmp_path / "user").rglob("*.xplane.pb"))) == 1
    assert not (tmp_path / "fit" / "plugins").exists()


def test_tensorboard_profiling_after_our_window_opened_leaves_it_whole(tmp_path):
    """TensorBoard(profile_batch) starting inside our open window fails quietly; our window covers every step."""
    import keras

    tensorboard = keras.callbacks.TensorBoard(log_dir=str(tmp_path / "tb"), profile_batch=(4, 6))
    callback = _callback(tmp_path / "fit")
    make_model(True).fit(make_dataset(), epochs=1, callbacks=[callback, tensorboard], verbose=0)
    report = callback.reports[0]
    assert report.status == "ok"
    assert report.steps_profiled == FIT_STEPS
    assert step_markers(report.trace_path) == list(range(FIT_STEPS))
    assert list((tmp_path / "tb").rglob("*.xplane.pb")) == []
    assert profiler_is_free()
