"""A Keras 3 custom training loop under MultiWorkerMirroredStrategy, guarded.

Keras 3's `fit` does not run under `MultiWorkerMirroredStrategy` on
TensorFlow (keras-team/keras#20585), so multi-worker training with Keras 3
is a custom loop: variables created in `strategy.scope()`, each replica's
forward and backward pass compiled with XLA
(`tf.function(jit_compile=True)`), the gradient all-reduce and the update
outside it, and `strategy.run` once per step on a distributed dataset.

Start one process per worker, each with its own `TF_CONFIG`, all with the
same `--log-dir`, e.g. on one machine:

    TF_CONFIG='{"cluster": {"worker": ["127.0.0.1:12345", "127.0.0.1:12346"]},
                "task": {"type": "worker", "index": 0}}' \
        python examples/multiworker_custom_loop.py --log-dir logs/mw &
    TF_CONFIG='{"cluster": {"worker": ["127.0.0.1:12345", "127.0.0.1:12346"]},
                "task": {"type": "worker", "index": 1}}' \
        python examples/multiworker_custom_loop.py --log-dir logs/mw

The chief (worker 0) profiles into `<log-dir>/worker_0/`; every worker
saves its reports in `<log-dir>/worker_<k>/xla_guard_reports.json` (the
others track input signatures and steps, and say they were not
profiled), and the chief writes the TensorBoard summaries into `<log-dir>`
after every profiled epoch. See docs/multiworker.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os

# The loop is TensorFlow code (tf.distribute, tf.function): Keras must use
# the TensorFlow backend.
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras
import numpy as np
import tensorflow as tf

from keras_xla_guard import XlaGuard

PER_REPLICA_BATCH = 64


def build(strategy: tf.distribute.Strategy, guard: XlaGuard | None = None):
    """The model, the distributed dataset and the train step of one worker.

    Returns:
        `(dist_dataset, train_step)`: iterate the first, call the second
        with each `(x, y)` it yields; the step returns the global loss.
    """
    global_batch = PER_REPLICA_BATCH * strategy.num_replicas_in_sync

    with strategy.scope():
        keras.utils.set_random_seed(0)
        model = keras.Sequential(
            [
                keras.Input((32,)),
                keras.layers.Dense(256, activation="relu"),
                keras.layers.Dense(256, activation="relu"),
                keras.layers.Dense(1),
            ]
        )
        optimizer = keras.optimizers.SGD(learning_rate=0.01)
        optimizer.build(model.trainable_variables)

    rng = np.random.default_rng(0)
    x = rng.standard_normal((2048, 32)).astype("float32")
    y = (x[:, :1] * 0.3).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch, drop_remainder=True)
    if guard is not None:
        # The step receives per-replica values, so the guard reads the
        # input signatures from the global batches instead.
        dataset = guard.observe(dataset)
    dist_dataset = strategy.experimental_distribute_dataset(dataset)

    # One replica's forward and backward pass: one XLA executable.
    @tf.function(jit_compile=True)
    def loss_and_grads(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(model(x, training=True) - y)) / global_batch
        return loss, tape.gradient(loss, model.trainable_variables)

    def replica_step(x, y):
        loss, grads = loss_and_grads(x, y)
        # In the replica context Keras' optimizer first sums the gradients
        # of all replicas on all workers
        # (tf.distribute.get_replica_context().all_reduce), then updates the
        # mirrored variables: a collective, so it runs outside XLA.
        optimizer.apply(grads, model.trainable_variables)
        return loss

    @tf.function
    def train_step(x, y):
        losses = strategy.run(replica_step, args=(x, y))
        return strategy.reduce("SUM", losses, axis=None)

    if guard is not None:
        # `train_step` is no XLA function itself; the replica step it runs is.
        train_step = guard.watch(train_step, jit_compile=True)
    return dist_dataset, train_step


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log-dir", default="logs/multiworker")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument(
        "--without-guard", action="store_true", help="train the same loop with no guard (to compare)"
    )
    args = parser.parse_args(argv)

    # Reads TF_CONFIG and connects to every worker before it returns.
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    # Under MultiWorkerMirroredStrategy the guard finds this worker in the
    # strategy: the chief profiles into <log_dir>/worker_0/ (other workers'
    # profiler stop can abort them natively: docs/multiworker.md), and
    # writes every worker's figures to <log_dir> after each profiled epoch.
    guard = (
        None if args.without_guard else XlaGuard(log_dir=args.log_dir, profile_epochs=(1,), strategy=strategy)
    )
    dist_dataset, train_step = build(strategy, guard)
    for epoch in range(args.epochs):
        with guard.epoch(epoch) if guard is not None else contextlib.nullcontext():
            losses = [float(train_step(x, y)) for x, y in dist_dataset]
        print(f"epoch {epoch}: loss {np.mean(losses):.5f}", flush=True)
    if guard is not None:
        guard.close()


if __name__ == "__main__":
    main()
