"""Small real Keras fits shared by the signature and seam tests.

A sequence model whose batches differ only in their length (dimension 1 of
`tokens`), so the number of distinct input signatures - and of XLA
compilations - is known by construction.
"""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np

LENGTHS = (5, 7, 9, 5, 11, 7, 13)
HEADLINE = "input 'tokens' dim 1 varied across 5 values (5, 7, 9, 11, 13)"

ROWS = 44  # 5 full batches of 8 and a short last batch of 4
BATCH = 8


def _seq_model(jit_compile: bool, steps_per_execution: int = 1):
    import keras

    tokens = keras.Input((None,), dtype="int32", name="tokens")
    hidden = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(50, 8)(tokens))
    model = keras.Model({"tokens": tokens}, keras.layers.Dense(1)(hidden))
    model.compile("adam", "mse", jit_compile=jit_compile, steps_per_execution=steps_per_execution)
    return model


def _seq_batches(lengths, batch=BATCH):
    rng = np.random.default_rng(0)
    return [
        (
            {"tokens": rng.integers(0, 50, (batch, n)).astype("int32")},
            rng.standard_normal((batch, 1)).astype("float32"),
        )
        for n in lengths
    ]


def _seq_dataset(lengths, batch=BATCH):
    import tensorflow as tf

    batches = _seq_batches(lengths, batch)
    spec = ({"tokens": tf.TensorSpec((None, None), tf.int32)}, tf.TensorSpec((None, 1), tf.float32))
    return tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=spec)


def _guard(log_dir, **kwargs):
    from keras_xla_guard import XlaGuardCallback

    kwargs.setdefault("profile_epochs", ())
    return XlaGuardCallback(log_dir=log_dir, verbose=0, async_analysis=False, **kwargs)


def _events(log_dir: Path) -> dict[str, dict[int, object]]:
    """tag -> step -> value (float for scalars, str for text) from the run's event files."""
    import tensorflow as tf

    out: dict[str, dict[int, object]] = collections.defaultdict(dict)
    for path in sorted(log_dir.glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                if not value.tag.startswith("xla_guard/"):
                    continue
                array = tf.make_ndarray(value.tensor)
                item = array.item() if array.size == 1 else array
                out[value.tag][event.step] = item.decode() if isinstance(item, bytes) else item
    return out


def profiler_is_free() -> bool:
    """Whether TensorFlow's process-wide profiler can be started (nobody holds it)."""
    import tensorflow as tf

    try:
        tf.profiler.experimental.start("")
    except tf.errors.AlreadyExistsError:
        return False
    tf.profiler.experimental.stop()
    return True
