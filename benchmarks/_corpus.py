"""The real traces of `bench_analyze.py --corpus`: one workload each, trained and profiled.

Usage: python benchmarks/_corpus.py NAME LOG_DIR

Trains workload NAME with the profiler on and leaves its trace (one
`.xplane.pb`) under LOG_DIR. Each workload runs in a process of its own
(`bench_analyze` starts them), because some need environment set before
TensorFlow or Keras is imported (`TF_XLA_FLAGS`, `KERAS_BACKEND`), and so
that no workload's threads or caches shape another's trace. Every workload
is what a user would run: Keras models from layers or `keras.applications`
(`weights=None`: nothing is downloaded), the guard's own callback or loop
guard where the workload has one, fixed seeds. Traces differ from run to
run (timings), not in kind.

Workloads (`WORKLOADS`):

- `cnn`: plain TensorFlow (no XLA), MobileNetV2 on 64x64 images, one
  epoch profiled by `XlaGuardCallback`: oneDNN kernels, the tf.data thread.
- `transformer`: a small Keras transformer (embedding, two attention and
  feed-forward blocks) with `jit_compile=True`, batches of 6 sequence
  lengths: 6 XLA compilations inside the profiled epoch, then their runs.
- `eager_loop`: a custom loop in plain eager mode (no `tf.function`),
  watched by `XlaGuard`: every op dispatched from the Python thread.
- `autoclustering`: `TF_XLA_FLAGS=--tf_xla_cpu_global_jit` and
  `tf.config.optimizer.set_jit(True)` on a `jit_compile=False` model:
  clusters compiled by TensorFlow's auto-clustering, run beside plain ops.
- `multiworker_chief`: the chief of a 2-worker MultiWorkerMirroredStrategy
  `fit` (tests/_multiworker_worker.py; XLA per replica, collectives outside).
- `jax_cpu`: Keras 3 on JAX, `jax.profiler` with the Python tracer off, each
  step inside `StepTraceAnnotation`.
- `mlp`: the 7-layer MLP without XLA of `bench_analyze`'s default trace
  (400 steps), for continuity with its saved results.

No raw GPU trace: the machine these run on has no accelerator.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _keras_tf() -> tuple:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    return keras, np, tf


def cnn(log_dir: Path) -> None:
    """MobileNetV2, plain TensorFlow, one profiled epoch of 24 steps."""
    keras, np, tf = _keras_tf()
    from keras_xla_guard import XlaGuardCallback

    rng = np.random.default_rng(0)
    x = rng.standard_normal((24 * 16, 64, 64, 3)).astype("float32")
    y = rng.integers(0, 10, len(x))
    model = keras.applications.MobileNetV2(input_shape=(64, 64, 3), weights=None, classes=10, alpha=0.5)
    model.compile("adam", "sparse_categorical_crossentropy", jit_compile=False)
    guard = XlaGuardCallback(
        log_dir=str(log_dir),
        profile_epochs=(1,),
        skip_steps=2,
        max_steps=None,
        verbose=0,
        write_summaries=False,
    )
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
    model.fit(dataset, epochs=2, callbacks=[guard], verbose=0)


def transformer(log_dir: Path) -> None:
    """A 2-block Keras transformer, `jit_compile=True`, 6 sequence lengths in the profiled epoch."""
    keras, np, tf = _keras_tf()
    from keras import layers

    from keras_xla_guard import XlaGuardCallback

    vocab, width, lengths, per_length, batch = 512, 64, (16, 24, 32, 40, 48, 56), 8, 16
    tokens = keras.Input((None,), dtype="int32")
    h = layers.Embedding(vocab, width)(tokens)
    for _ in range(2):
        a = layers.MultiHeadAttention(num_heads=4, key_dim=width // 4)(h, h)
        h = layers.LayerNormalization()(h + a)
        f = layers.Dense(width * 4, activation="gelu")(h)
        h = layers.LayerNormalization()(h + layers.Dense(width)(f))
    out = layers.Dense(vocab)(h)
    model = keras.Model(tokens, out)
    model.compile("adam", "sparse_categorical_crossentropy", jit_compile=True)
    rng = np.random.default_rng(0)

    def batches():
        for i in range(per_length * len(lengths)):
            n = lengths[i % len(lengths)]
            x = rng.integers(0, vocab, (batch, n)).astype("int32")
            yield x, np.roll(x, -1, axis=1)

    spec = (tf.TensorSpec((None, None), tf.int32), tf.TensorSpec((None, None), tf.int32))
    dataset = tf.data.Dataset.from_generator(batches, output_signature=spec)
    guard = XlaGuardCallback(
        log_dir=str(log_dir),
        profile_epochs=(0,),
        skip_steps=0,
        max_steps=None,
        verbose=0,
        write_summaries=False,
    )
    model.fit(dataset, epochs=1, callbacks=[guard], verbose=0)


def eager_loop(log_dir: Path) -> None:
    """A custom loop without `tf.function`, 300 steps watched by `XlaGuard`."""
    keras, np, tf = _keras_tf()
    from keras_xla_guard import XlaGuard

    model = keras.Sequential(
        [
            keras.Input((32,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    optimizer = keras.optimizers.SGD(0.01)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((300 * 16, 32)).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, x[:, :1] * 0.5)).batch(16)

    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(xb, training=True) - yb))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    with XlaGuard(
        log_dir=str(log_dir),
        profile_epochs=(0,),
        skip_steps=2,
        max_steps=None,
        verbose=0,
        write_summaries=False,
    ) as guard:
        step = guard.watch(train_step)
        with guard.epoch(0):
            for xb, yb in dataset:
                step(xb, yb)


def autoclustering(log_dir: Path) -> None:
    """A small CNN under TensorFlow's auto-clustering (`--tf_xla_cpu_global_jit`, `set_jit`)."""
    os.environ["TF_XLA_FLAGS"] = "--tf_xla_cpu_global_jit"
    keras, np, tf = _keras_tf()
    from keras import layers

    from keras_xla_guard import XlaGuardCallback

    tf.config.optimizer.set_jit(True)
    model = keras.Sequential(
        [
            keras.Input((32, 32, 3)),
            layers.Conv2D(16, 3, activation="relu"),
            layers.MaxPooling2D(),
            layers.Conv2D(32, 3, activation="relu"),
            layers.GlobalAveragePooling2D(),
            layers.Dense(64, activation="relu"),
            layers.Dense(10),
        ]
    )
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=False)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((120 * 32, 32, 32, 3)).astype("float32")
    y = rng.integers(0, 10, len(x))
    guard = XlaGuardCallback(
        log_dir=str(log_dir),
        profile_epochs=(1,),
        skip_steps=2,
        max_steps=None,
        verbose=0,
        write_summaries=False,
    )
    model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(32), epochs=2, callbacks=[guard], verbose=0)


def multiworker_chief(log_dir: Path) -> None:
    """The chief's trace of the 2-worker `fit` the multi-worker tests run."""
    import tempfile

    sys.path.insert(0, str(ROOT / "tests"))
    import _multiworker

    with tempfile.TemporaryDirectory(prefix="corpus_multiworker_") as tmp:
        run = _multiworker.run_workers(ROOT / "tests" / "_multiworker_worker.py", Path(tmp) / "run")
        (trace,) = run["workers"][0]["trace_paths"]
        log_dir.mkdir(parents=True)
        (log_dir / Path(trace).name).write_bytes(Path(trace).read_bytes())


def jax_cpu(log_dir: Path) -> None:
    """Keras 3 on JAX: a CNN's 200 `train_on_batch` steps under `jax.profiler`."""
    os.environ["KERAS_BACKEND"] = "jax"
    import jax
    import keras
    import numpy as np
    from keras import layers

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((16, 16, 3)),
            layers.Conv2D(16, 3, activation="relu"),
            layers.Flatten(),
            layers.Dense(64, activation="relu"),
            layers.Dense(10),
        ]
    )
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    steps, batch = 200, 32
    x = rng.standard_normal((steps * batch, 16, 16, 3)).astype("float32")
    y = rng.integers(0, 10, len(x))
    model.train_on_batch(x[:batch], y[:batch])
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0
    jax.profiler.start_trace(str(log_dir), profiler_options=options)
    try:
        for step in range(steps):
            with jax.profiler.StepTraceAnnotation("train", step_num=step):
                model.train_on_batch(
                    x[step * batch : (step + 1) * batch], y[step * batch : (step + 1) * batch]
                )
    finally:
        jax.profiler.stop_trace()


def mlp(log_dir: Path) -> None:
    """`bench_analyze`'s default trace: a 7-layer MLP without XLA, 400 steps."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_analyze

    bench_analyze._build_trace(log_dir, 400, False)


WORKLOADS: dict[str, Callable[[Path], None]] = {
    "cnn": cnn,
    "transformer": transformer,
    "eager_loop": eager_loop,
    "autoclustering": autoclustering,
    "multiworker_chief": multiworker_chief,
    "jax_cpu": jax_cpu,
    "mlp": mlp,
}


if __name__ == "__main__":
    WORKLOADS[sys.argv[1]](Path(sys.argv[2]))
