"""The tf_keras model that the 2-worker `fit` runs train (tests and stress benchmark).

Import it after setting `TF_USE_LEGACY_KERAS=1`. Legacy Keras (tf_keras) is
used because Keras 3's `fit` does not run under MultiWorkerMirroredStrategy
(keras-team/keras#20585). Each replica's forward and backward pass is
compiled with XLA while the gradient all-reduce stays outside: on CPU, XLA
cannot compile collectives, so `compile(jit_compile=True)` (which puts the
all-reduce inside the compiled step) fails there.
"""

from __future__ import annotations

import tensorflow as tf


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


def build_model() -> ReplicaXla:
    """The compiled model; call it inside `strategy.scope()`."""
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
    return model
