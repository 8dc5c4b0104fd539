"""Helpers of the JAX tests (tests/on_jax): a tiny Keras fit on JAX, and an oracle for its compilations.

Import only under `KERAS_BACKEND=jax`: Keras fixes its backend at import.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# 100 examples, validation_split=0.2, batch 32: 80 training examples in
# batches of 32, 32, 16 (two train programs, at steps 0 and 2 of epoch 0)
# and one validation batch of 20 (one test program).
EXAMPLES, BATCH, EPOCHS, PROFILED = 100, 32, 3, 1
TRAIN_SHAPES = ((32, 16), (16, 16))


@dataclass
class MonitoringOracle:
    """Backend compilations counted by the test's own `jax.monitoring` listener, by JAX's name."""

    compiles: list[str] = field(default_factory=list)
    active: bool = False

    def __call__(self, event: str, duration: float, **kwargs: Any) -> None:
        if self.active and event == "/jax/core/compile/backend_compile_duration":
            self.compiles.append(str(kwargs.get("fun_name")))

    @contextmanager
    def counting(self) -> Iterator[MonitoringOracle]:
        self.active = True
        try:
            yield self
        finally:
            self.active = False


_oracle_lock = threading.Lock()
_oracle: MonitoringOracle | None = None


def monitoring_oracle() -> MonitoringOracle:
    """One listener per process (JAX 0.6 cannot unregister one), active only inside `counting()`."""
    global _oracle
    with _oracle_lock:
        if _oracle is None:
            import jax

            _oracle = MonitoringOracle()
            jax.monitoring.register_event_duration_secs_listener(_oracle)
        return _oracle


def make_data(n: int = EXAMPLES, features: int = 16, seed: int = 0) -> tuple[Any, Any]:
    """A small deterministic regression data set."""
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, features)).astype("float32")
    return x, (x[:, :1] * 0.3 + 0.1).astype("float32")


def make_model(seed: int = 0) -> Any:
    """A small MLP with fixed initial weights, compiled (jit on: Keras' JAX default)."""
    import keras

    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [keras.Input((16,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer="adam", loss="mse")
    return model


def fit_evaluate_predict(model: Any, epochs: int = 3) -> None:
    """A fit with validation, an evaluate and a predict of `model` (tests/on_jax/test_budget.py's `CAUSED`)."""
    x, y = make_data()
    model.fit(x, y, batch_size=BATCH, epochs=epochs, validation_split=0.2, verbose=0, shuffle=False)
    model.evaluate(x[:50], y[:50], batch_size=BATCH, verbose=0)
    model.predict(x[:40], batch_size=BATCH, verbose=0)


@dataclass
class JaxFit:
    """A finished fit on JAX: the model, its guard (or `None`), what the oracle counted."""

    model: Any
    guard: Any
    log_dir: Path
    history: dict[str, list[float]]
    oracle_compiles: list[str]
    weights: list[Any]


def fit_on_jax(log_dir: Path, guard: bool = True, **guard_kwargs: Any) -> JaxFit:
    """Fits `make_model()` for `EPOCHS` epochs with `validation_split=0.2`, under the guard or not."""
    from keras_xla_guard import XlaGuardCallback

    x, y = make_data()
    model = make_model()
    guard_kwargs.setdefault("profile_epochs", (PROFILED,))
    guard_kwargs.setdefault("verbose", 0)
    callback = XlaGuardCallback(log_dir=log_dir, **guard_kwargs) if guard else None
    import keras

    with monitoring_oracle().counting() as oracle:
        # Counted from on_train_begin, where the guard starts counting (fit
        # compiles the optimizer's initial values before it).
        start = [len(oracle.compiles)]
        marker = keras.callbacks.LambdaCallback(
            on_train_begin=lambda logs=None: start.append(len(oracle.compiles))
        )
        history = model.fit(
            x,
            y,
            batch_size=BATCH,
            epochs=EPOCHS,
            validation_split=0.2,
            callbacks=[marker, callback] if callback else [marker],
            verbose=0,
            shuffle=False,
        )
        counted = oracle.compiles[start[-1] :]
    weights = [w.copy() for w in model.get_weights()]
    return JaxFit(model, callback, Path(log_dir), history.history, counted, weights)
