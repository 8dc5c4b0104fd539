"""Verdicts about XLA under a `tf.distribute` strategy with several replicas."""

from __future__ import annotations

from typing import Any

from keras_xla_guard.diagnose.verdict import ERROR, MODEL, WARNING, Verdict

__all__ = ["strategy_verdicts"]

_PER_REPLICA_FIX = """class MyModel(keras.Sequential):  # Keras 3; or your keras.Model subclass
    @tf.function(jit_compile=True)
    def _xla_step(self, x, y, sample_weight):
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight)
            scaled = self.optimizer.scale_loss(loss)  # mixed precision's loss scale, if any
        return y_pred, loss, tape.gradient(scaled, self.trainable_variables)

    def train_step(self, data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        y_pred, loss, grads = self._xla_step(x, y, sample_weight)
        self.optimizer.apply(grads, self.trainable_variables)
        for metric in self.metrics:
            if metric.name == "loss":  # compute_loss divided it by the replica count
                metric.update_state(loss * self.distribute_strategy.num_replicas_in_sync)
            else:
                metric.update_state(y, y_pred, sample_weight=sample_weight)
        return self.get_metrics_result()
# build and compile it in strategy.scope() without jit_compile"""


def strategy_verdicts(model: Any) -> list[Verdict]:
    """Verdicts about XLA under a `tf.distribute` strategy with several replicas.

    `compile(jit_compile=True)` makes Keras compile the gradient all-reduce
    and the optimizer update into the XLA program (Keras 3 compiles the step
    of all replicas as one program, tf_keras each replica's step). TensorFlow
    rejects it with
    "Trying to access resource ... located in device ..." (MirroredStrategy;
    keras-team/keras#19005) or, on CPU, "Collectives are not yet implemented
    for CPU devices when compiling with XLA". What runs is XLA per replica:
    each replica's forward and backward pass compiled, the all-reduce and
    the optimizer update outside.

    Args:
        model: A compiled Keras (or tf_keras) model.

    Returns:
        `STRATEGY_JIT_COMPILE_FAILS` (error) for `jit_compile=True`, or
        `STRATEGY_XLA_PER_REPLICA` (warning) otherwise; empty with fewer
        than two replicas.

    Example:

    ```python
    from keras_xla_guard.diagnose.strategy import strategy_verdicts
    for verdict in strategy_verdicts(model):
        print(verdict)
    ```
    """
    strategy = getattr(model, "distribute_strategy", None)
    replicas = int(getattr(strategy, "num_replicas_in_sync", 1) or 1)
    if replicas < 2:
        return []
    if getattr(model, "jit_compile", False):
        return [
            Verdict(
                "STRATEGY_JIT_COMPILE_FAILS",
                MODEL,
                ERROR,
                f"model.jit_compile is True under {type(strategy).__name__} with {replicas} "
                "replicas: Keras puts the gradient all-reduce and the optimizer update inside "
                "the XLA program (Keras 3 even compiles all replicas as one), which "
                'TensorFlow rejects ("Trying to access '
                'resource ... located in device ...", or on CPU "Collectives are not yet '
                'implemented for CPU devices when compiling with XLA"). Compile each '
                "replica's forward and backward pass instead.",
                _PER_REPLICA_FIX,
            )
        ]
    return [
        Verdict(
            "STRATEGY_XLA_PER_REPLICA",
            MODEL,
            WARNING,
            f"Under {type(strategy).__name__} with {replicas} replicas, "
            "compile(jit_compile=True) does not run; XLA works per replica: compile each "
            "replica's forward and backward pass, keep the gradient all-reduce and the "
            "optimizer update outside. Whether that pays for this model is not measured "
            "here: time one replica's model with keras_xla_guard.compare before rewriting its "
            "step. If you already do, the time outside XLA is the all-reduce and the update "
            "(see the op table).",
            _PER_REPLICA_FIX,
        )
    ]
