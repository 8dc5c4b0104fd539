"""Variable-length examples in every form `pad_to_buckets` takes, for its tests on TensorFlow and on JAX.

No TensorFlow here (tests/on_jax runs in a venv without it); `tf.data` cases live in the TF tests.
Each example is `(tokens, label)` with `label == len(tokens)`, so a padded batch shows which example
each row was and how much of it is padding.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# 40 examples; buckets (7, 13) take 16 and 24 of them: 2 and 3 full batches of 8.
LENGTHS = [5, 7, 9, 11, 13] * 8
BOUNDS = (7, 13)
BATCH = 8
PADDED_SHAPES = [(BATCH, 7), (BATCH, 13)]
KINDS = ("arrays", "dict", "list", "generator", "pydataset")


def tokens(n: int) -> np.ndarray:
    """Example tokens 1..n (no zero, which is the padding)."""
    return np.arange(1, n + 1, dtype="int32")


def examples(kind: str, lengths: list[int] = LENGTHS) -> Any:
    """The examples of `lengths` held as `kind` says (a PyDataset holds them in batches of 8, one length each)."""
    seqs = [tokens(n) for n in lengths]
    labels = np.array(lengths, "float32")
    if kind == "arrays":
        return seqs, labels
    if kind == "dict":
        return {"tokens": seqs}, labels
    if kind == "list":
        return list(zip(seqs, labels, strict=True))
    if kind == "generator":
        return ((s, np.float32(n)) for s, n in zip(seqs, lengths, strict=True))
    if kind == "pydataset":
        return batches_of_one_length(sorted(lengths))
    raise AssertionError(kind)


def batches_of_one_length(lengths: list[int], batch: int = BATCH) -> Any:
    """A `keras.utils.PyDataset` of batches of `batch` examples, each batch of one length (dynamic padding)."""
    import keras

    class Batches(keras.utils.PyDataset):
        def __init__(self) -> None:
            super().__init__()

        def __len__(self) -> int:
            return len(lengths) // batch

        def __getitem__(self, index: int) -> Any:
            chunk = lengths[index * batch : (index + 1) * batch]
            x = np.stack([np.pad(tokens(n), (0, max(chunk) - n)) for n in chunk])
            return x, np.array(chunk, "float32")

    return Batches()


def batch_inputs(batch: Any) -> np.ndarray:
    """The tokens array of a padded batch, whether x is an array or `{"tokens": ...}`."""
    x = batch[0]
    return x["tokens"] if isinstance(x, dict) else x


def check_padding(batches: Any) -> list[tuple[int, ...]]:
    """Asserts every row keeps its example's tokens followed by zeros; returns the sorted distinct shapes."""
    shapes = set()
    for batch in batches:
        x, y = batch_inputs(batch), np.asarray(batch[1]).reshape(-1).astype(int)
        shapes.add(tuple(x.shape))
        for row, n in zip(x, y, strict=True):
            np.testing.assert_array_equal(row[:n], tokens(n))
            assert not row[n:].any()
    return sorted(shapes)


def sequence_model(kind: str = "arrays") -> Any:
    """A masked embedding model that takes any sequence length (jit_compile=True); `{"tokens": x}` for "dict"."""
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input((None,), dtype="int32", name="tokens")
    hidden = keras.layers.Embedding(20, 4, mask_zero=True)(inputs)
    outputs = keras.layers.Dense(1)(keras.layers.GlobalAveragePooling1D()(hidden))
    model = keras.Model({"tokens": inputs} if kind == "dict" else inputs, outputs)
    model.compile(optimizer="sgd", loss="mse", jit_compile=True)
    return model
