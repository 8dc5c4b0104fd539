"""What ends a guarded fit, evaluate or predict on TensorFlow leaves nothing of the guard behind.

The cases are shared with the JAX suite (`_exit_cases.py`); the ones here
need TensorFlow: custom loops (`XlaGuard`), budgets, and tf_keras.
"""

from __future__ import annotations

import pytest
from _exit_cases import *  # noqa: F403 - the shared tests, collected on this backend

pytestmark = pytest.mark.slow


def test_a_real_sigint_in_a_loops_profiler_stop_ends_the_epoch_then_goes_up(
    tmp_path, monkeypatch, python_sigint
):
    """A custom loop's profiled epoch ends while a real SIGINT arrives inside the profiler's stop:
    the window is stopped, its trace exported and measured, then KeyboardInterrupt leaves the epoch's
    `with` block; the guard's `with` block ends the run and the run file is read by `report`."""
    import tensorflow as tf
    from _exits import profiler_starts, report_of, saved_statuses, sigint_inside

    from keras_xla_guard import XlaGuard

    w = tf.Variable(tf.ones((8, 1)))

    @tf.function(jit_compile=True)
    def train_step(x):
        w.assign_sub(0.01 * tf.reduce_mean(x) * tf.ones_like(w))
        return tf.reduce_sum(w)

    import keras

    # Only for its backend: TensorFlow's profiler.
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
    sent = sigint_inside(monkeypatch, model)
    reached = []
    with pytest.raises(KeyboardInterrupt):
        with XlaGuard(log_dir=tmp_path / "guard", profile_epochs=(0,), skip_steps=0, verbose=0) as guard:
            step = guard.watch(train_step)
            for epoch in range(2):
                with guard.epoch(epoch):
                    for _ in range(4):
                        step(tf.ones((4, 8)))
                reached.append(epoch)
    assert sent == [True] and reached == []
    monkeypatch.undo()
    assert (guard.reports[0].status, guard.reports[0].steps_profiled) == ("ok", 4)
    assert profiler_starts(model, tmp_path / "probe")
    assert saved_statuses(tmp_path / "guard") == {"0": "ok"}
    code, doc = report_of(tmp_path / "guard")
    assert code == 0 and [run["combined"]["status"] for run in doc["runs"]] == ["ok"]
