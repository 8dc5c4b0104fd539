"""One worker of a 2-process MultiWorkerMirroredStrategy run (started by tests).

Usage: python _multiworker_worker.py TASK_INDEX PORT0,PORT1 LOG_DIR [--chief-only]

Started by tests/_multiworker.py.

With `--chief-only` only worker 0 passes the guard to `fit`.

Legacy Keras (tf_keras) is used because Keras 3's `fit` does not run under
MultiWorkerMirroredStrategy (keras-team/keras#20585), and each replica's
forward and backward pass is compiled with XLA while the gradient all-reduce
stays outside: on CPU, XLA cannot compile collectives, so
`compile(jit_compile=True)` (which puts the all-reduce inside the compiled
step) fails there. Prints one JSON line with what the test needs.
"""

from __future__ import annotations

import json
import os
import sys
import warnings

from _multiworker import tf_config

task, ports, log_dir = int(sys.argv[1]), sys.argv[2], sys.argv[3]
guarded = task == 0 or "--chief-only" not in sys.argv[4:]
os.environ["TF_CONFIG"] = tf_config(task, ports)
os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import keras_xla_guard.distributed as distributed  # noqa: E402
from keras_xla_guard import XlaGuardCallback, XlaGuardWarning  # noqa: E402

# With --chief-only the chief waits this long for worker 1's figures.
distributed.WORKER_TIMEOUT_S = 5.0


class ReplicaXla(tf.keras.Sequential):
    """Runs each replica's forward and backward pass as one XLA executable."""

    @tf.function(jit_compile=True)
    def _loss_and_grads(self, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self(x, training=True) - y))
            scaled = loss / tf.distribute.get_strategy().num_replicas_in_sync
        return loss, tape.gradient(scaled, self.trainable_variables)

    def train_step(self, data):
        x, y = data
        loss, grads = self._loss_and_grads(x, y)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": loss}


strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    tf.keras.utils.set_random_seed(0)
    model = ReplicaXla(
        [
            tf.keras.Input((32,)),
            tf.keras.layers.Dense(256, activation="relu"),
            tf.keras.layers.Dense(256, activation="relu"),
            tf.keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer="sgd")

rng = np.random.default_rng(0)
x = rng.standard_normal((1024, 32)).astype("float32")
y = (x[:, :1] * 0.3).astype("float32")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)
guard = XlaGuardCallback(log_dir=log_dir, profile_epochs=(1,), skip_steps=2, verbose=0)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    history = model.fit(dataset, epochs=2, callbacks=[guard] if guarded else [], verbose=0)
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
            "loss": history.history["loss"],
            "warnings": [str(w.message) for w in caught if issubclass(w.category, XlaGuardWarning)],
        }
    ),
    flush=True,
)
