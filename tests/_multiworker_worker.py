"""One worker of a 2-process MultiWorkerMirroredStrategy run (started by tests).

Usage: python _multiworker_worker.py TASK_INDEX PORT0,PORT1 LOG_DIR [--chief-only] [--all-workers] [--peer-dies]

Started by tests/_multiworker.py.

With `--chief-only` only worker 0 passes the guard to `fit`; with
`--all-workers` the guard profiles every worker (`profile_workers="all"`);
with `--peer-dies` worker 1 kills itself (SIGKILL) at step 6 of epoch 1,
inside the chief's profiling window, and the chief reports the exception
its `fit` ends with instead of failing.

Trains the tf_keras model of tests/_multiworker_fit_model.py. Prints one
JSON line with what the test needs.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import warnings

from _multiworker import tf_config

task, ports, log_dir = int(sys.argv[1]), sys.argv[2], sys.argv[3]
guarded = task == 0 or "--chief-only" not in sys.argv[4:]
peer_dies = "--peer-dies" in sys.argv[4:]
profile_workers = "all" if "--all-workers" in sys.argv[4:] else "chief"
os.environ["TF_CONFIG"] = tf_config(task, ports)
os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402 - after TF_CONFIG is set
import tensorflow as tf  # noqa: E402 - after TF_CONFIG is set
from _multiworker_fit_model import build_model  # noqa: E402 - after TF_CONFIG is set

import keras_xla_guard.distributed as distributed  # noqa: E402 - after TF_CONFIG is set
from keras_xla_guard import XlaGuardCallback, XlaGuardWarning  # noqa: E402 - after TF_CONFIG is set

# With --chief-only the chief waits this long for worker 1's figures.
distributed.WORKER_TIMEOUT_S = 5.0

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = build_model()

rng = np.random.default_rng(0)
x = rng.standard_normal((1024, 32)).astype("float32")
y = (x[:, :1] * 0.3).astype("float32")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)
guard = XlaGuardCallback(
    log_dir=log_dir, profile_epochs=(1,), skip_steps=2, verbose=0, profile_workers=profile_workers
)
callbacks = [guard] if guarded else []
if peer_dies and task == 1:

    class DieInEpoch1(tf.keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_begin(self, batch, logs=None):
            if self.epoch == 1 and batch == 6:
                os.kill(os.getpid(), signal.SIGKILL)

    callbacks.append(DieInEpoch1())
error = None
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        history = model.fit(dataset, epochs=2, callbacks=callbacks, verbose=0)
    except Exception as e:
        if not peer_dies:
            raise
        error, history = type(e).__name__, None
report = guard.reports.get(1)
print(
    json.dumps(
        {
            "task": task,
            "pid": os.getpid(),
            "guarded": guarded,
            "status": report.status if report else None,
            "reason": report.reason if report else None,
            "fraction": report.xla_time_fraction if report else None,
            "xla_time_s": report.xla_time_s if report else None,
            "non_xla_op_time_s": report.non_xla_op_time_s if report else None,
            "executions": report.xla_executions if report else None,
            "steps": report.steps_profiled if report else None,
            "distinct_signatures": report.distinct_signatures if report else None,
            "trace_paths": list(report.trace_paths) if report else [],
            "log_dir_after": guard.log_dir,
            "loss": history.history["loss"] if history else None,
            "error": error,
            "warnings": [str(w.message) for w in caught if issubclass(w.category, XlaGuardWarning)],
        }
    ),
    flush=True,
)
