"""A jit-compiled sequence model fed batches of 4 lengths: what the guard says at the end of `fit`.

Runs on Keras' TensorFlow or JAX backend (`KERAS_BACKEND`); the README's
sample output is this script's, on TensorFlow:

    python examples/variable_lengths.py [LOG_DIR]
"""

from __future__ import annotations

import sys

import keras
import numpy as np

from keras_xla_guard import XlaGuardCallback

LENGTHS = (12, 17, 23, 31, 38, 45, 52, 64) * 2  # 16 batches of 8 sequence lengths


class Batches(keras.utils.PyDataset):
    """Token batches whose length varies, as a text pipeline without padding makes them."""

    def __init__(self) -> None:
        super().__init__()
        rng = np.random.default_rng(0)
        self.batches = [
            (rng.integers(1, 1000, (32, n)).astype("int32"), rng.random((32, 1)).astype("float32"))
            for n in LENGTHS
        ]

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, index: int):
        return self.batches[index]


def main(log_dir: str = "logs/variable_lengths") -> XlaGuardCallback:
    keras.utils.set_random_seed(0)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    hidden = keras.layers.Embedding(1000, 32)(tokens)
    hidden = keras.layers.GlobalAveragePooling1D()(keras.layers.Dense(32, activation="relu")(hidden))
    model = keras.Model(tokens, keras.layers.Dense(1)(hidden))
    model.compile("adam", "mse", jit_compile=True)
    guard = XlaGuardCallback(log_dir=log_dir)
    model.fit(Batches(), epochs=3, shuffle=False, verbose=0, callbacks=[guard])
    return guard


if __name__ == "__main__":
    main(*sys.argv[1:2])
