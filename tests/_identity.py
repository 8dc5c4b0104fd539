"""A seeded fit whose batch order and randomness come from every generator there is, for warm_up's
bit-identity tests on both backends (tests/test_warmup.py, tests/on_jax/test_warmup.py).

Backend-neutral: Keras picks its backend at import, the caller's suite set it.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

BATCH, EPOCHS, EXAMPLES, FEATURES = 32, 3, 100, 16
# warm_up's signatures: the full batches and the short last one (100 = 3 * 32 + 4).
SIGNATURES = [((BATCH, FEATURES), (BATCH, 1)), ((4, FEATURES), (4, 1))]


def _data() -> tuple[Any, Any]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((EXAMPLES, FEATURES)).astype("float32")
    return x, (x[:, :1] * 0.3 + 0.1).astype("float32")


def shuffled_batches() -> Any:
    """A `keras.utils.PyDataset` that reshuffles its batch order each epoch with Python's `random`
    and adds NumPy noise to each batch's targets: both global generators are drawn from as Keras
    reads it, and a fit that builds the model from its first batch draws once more."""
    import keras

    x, y = _data()

    class Batches(keras.utils.PyDataset):
        def __init__(self) -> None:
            super().__init__()
            self.order = list(range(-(-EXAMPLES // BATCH)))

        def __len__(self) -> int:
            return len(self.order)

        def __getitem__(self, index: int) -> tuple[Any, Any]:
            rows = slice(self.order[index] * BATCH, (self.order[index] + 1) * BATCH)
            noise = np.random.standard_normal(y[rows].shape).astype("float32") * 0.01
            return x[rows], y[rows] + noise

        def on_epoch_end(self) -> None:
            random.shuffle(self.order)

    return Batches()


def seeded_fit(warm: bool, data: str) -> tuple[list[Any], dict[str, list[float]], tuple[float, ...]]:
    """A seeded fit (Dropout, Adam, a metric; `shuffle=True` arrays or `shuffled_batches()`), after
    `warm_up(model, SIGNATURES)` or not.

    Returns:
        Every model, optimizer and metric array; the history; a draw from NumPy's, Python's and
        Keras' global generators after the fit (equal only if the fit drew from each alike).
    """
    import keras

    from keras_xla_guard import warm_up

    keras.utils.set_random_seed(0)
    # Keras 3.10's set_random_seed keeps the global seed generator an earlier fit of the process
    # made (later releases start a new one): without this two identical fits' last draws differ.
    from keras.src.backend.common import global_state

    global_state.set_global_attribute("global_seed_generator", None)
    model = keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(8, activation="relu"),
            keras.layers.Dropout(0.3),
            keras.layers.Dense(1),
        ]
    )
    model.compile("adam", "mse", metrics=["mae"], jit_compile=True)
    if warm:
        warm_up(model, SIGNATURES)
    if data == "arrays":
        x, y = _data()
        history = model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=True, verbose=0)
    else:
        history = model.fit(shuffled_batches(), epochs=EPOCHS, verbose=0)
    variables = [*model.variables, *model.optimizer.variables, *model.metrics_variables]
    arrays = [np.array(keras.ops.convert_to_numpy(v.value), copy=True) for v in variables]
    states = (float(np.random.standard_normal()), random.random(), float(keras.random.uniform(())))
    return arrays, history.history, states
