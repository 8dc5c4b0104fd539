"""Shared test helpers: tiny real Keras models, a guarded fit, a fresh interpreter.

Imported by test modules (`from _helpers import ...`; `tests/` is on
pytest's `pythonpath`); `conftest.py` only holds fixtures built on them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Fit:
    """A finished `model.fit` run with an `XlaGuardCallback`."""

    model: Any
    callback: Any
    log_dir: Path
    history: Any


def make_data(n: int = 512, features: int = 16, seed: int = 0) -> tuple[Any, Any]:
    """Returns a small deterministic regression data set."""
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, features)).astype("float32")
    y = (x[:, :1] * 0.3 + 0.1).astype("float32")
    return x, y


def make_model(jit_compile: bool | str, features: int = 16, seed: int = 0) -> Any:
    """Builds and compiles a small MLP with fixed initial weights."""
    import keras

    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [
            keras.Input((features,)),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer="adam", loss="mse", jit_compile=jit_compile)
    return model


def make_dataset(batch_size: int = 32) -> Any:
    """A tf.data pipeline over `make_data()` (16 batches)."""
    import tensorflow as tf

    x, y = make_data()
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size)


def fit_with_guard(jit_compile: bool | str, log_dir: Path, epochs: int = 3, **guard_kwargs: Any) -> Fit:
    """Trains `make_model(jit_compile)` on `make_dataset()` with a guard."""
    from keras_xla_guard import XlaGuardCallback

    model = make_model(jit_compile)
    guard_kwargs.setdefault("verbose", 0)
    callback = XlaGuardCallback(log_dir=log_dir, **guard_kwargs)
    history = model.fit(make_dataset(), epochs=epochs, callbacks=[callback], verbose=0)
    return Fit(model, callback, Path(log_dir), history)


def run_python(code: str, env: dict[str, str] | None = None, timeout: float = 300) -> dict[str, Any]:
    """Runs `code` in a fresh interpreter and returns the JSON it prints last.

    Used where TensorFlow must start with a different environment (flags
    read once at import, another Keras backend).
    """
    full_env = dict(os.environ)
    full_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        cwd=str(REPO),
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise AssertionError(
            f"subprocess failed (rc={proc.returncode}):\nstdout:\n{proc.stdout[-3000:]}\n"
            f"stderr:\n{proc.stderr[-5000:]}"
        )
    return json.loads(lines[-1])
