"""What an exception, a Ctrl-C or a full disk may leave of a guard, checked as a user would.

Shared by tests/test_exits.py (TensorFlow) and tests/on_jax/test_exits.py
(Keras on JAX): the same small jit-compiled model and data, a callback that
records which hooks Keras calls and raises where asked, and the checks made
after each case: the backend's profiler starts again, Keras' functions are
its own, nothing of the guard is left on `_model_hooks`' stack, and the run
file is read by `keras-xla-guard report`. Backend-neutral: Keras picks its
backend at import, each suite sets it.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

EXAMPLES, VALIDATION, FEATURES, BATCH = 192, 64, 16, 32
# A 3-epoch fit has 6 steps an epoch; the guard profiles epoch 1 from step 0.
EPOCHS, PROFILED, STEPS = 3, 1, EXAMPLES // BATCH


def make_model(seed: int = 0) -> Any:
    """A small MLP compiled with jit_compile=True, fixed initial weights."""
    import keras

    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [keras.Input((FEATURES,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile("adam", "mse", jit_compile=True)
    return model


def data() -> tuple[Any, Any, tuple[Any, Any]]:
    """`(x, y, validation_data)`."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((EXAMPLES + VALIDATION, FEATURES)).astype("float32")
    y = (x[:, :1] * 0.3 + 0.1).astype("float32")
    return x[:EXAMPLES], y[:EXAMPLES], (x[EXAMPLES:], y[EXAMPLES:])


def hooks(raise_at: tuple[str, int, BaseException] | None = None, stop_at: int | None = None) -> Any:
    """A callback that records every hook Keras calls (`.seen`, with its epoch or batch).

    Args:
        raise_at: `(hook, epoch or batch, exception)`: raise it there.
        stop_at: Set `model.stop_training` at this train batch of the last epoch begun.
    """
    import keras

    class Hooks(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[tuple[str, int | None]] = []

        def _hook(self, name: str, index: int | None = None) -> None:
            self.seen.append((name, index))
            if raise_at is not None and raise_at[:2] == (name, index):
                raise raise_at[2]

    def method(name: str, indexed: bool) -> Any:
        if indexed:
            return lambda self, index, logs=None: self._hook(name, index)
        return lambda self, logs=None: self._hook(name)

    for name in ("on_train_begin", "on_train_end", "on_test_begin", "on_test_end"):
        setattr(Hooks, name, method(name, False))
    for name in ("on_predict_begin", "on_predict_end"):
        setattr(Hooks, name, method(name, False))
    for name in ("on_epoch_begin", "on_epoch_end", "on_test_batch_end", "on_predict_batch_end"):
        setattr(Hooks, name, method(name, True))

    def on_train_batch_end(self: Any, batch: int, logs: Any = None) -> None:
        self._hook("on_train_batch_end", batch)
        if stop_at is not None and batch == stop_at:
            self.model.stop_training = True

    Hooks.on_train_batch_end = on_train_batch_end  # type: ignore[method-assign]  # why: built per call
    return Hooks()


def keras_own(model: Any) -> dict[str, Any]:
    """Keras' train, test and predict functions of `model` as they stand (built first)."""
    x, y, _ = data()
    model.make_train_function()
    model.make_test_function()
    model.make_predict_function()
    return {name: getattr(model, f"{name}_function") for name in ("train", "test", "predict")}


def resync(model: Any) -> None:
    """Gives the model its variables back after an exception left `evaluate` or `predict` (Keras on JAX).

    Keras' JAX trainer empties the model's variables while a call runs and
    writes them back at its end; `fit` does so in a `finally`, `evaluate`
    and `predict` do not, so after an exception there the model's next use
    fails (`TypeError: 'NoneType' object is not callable`), guard or no
    guard. `jax_state_sync()` writes them back. Nothing to do on TensorFlow.
    """
    sync = getattr(model, "jax_state_sync", None)
    if sync is not None:
        sync()


def left_of_the_guard(model: Any, own: dict[str, Any]) -> list[str]:
    """What of a guard is still in place: a function not Keras' own, a call scope, a stand-in."""
    from keras_xla_guard import _model_hooks

    left = [f"{name}_function" for name, fn in own.items() if getattr(model, f"{name}_function") is not fn]
    left += ["a call scope"] * len(getattr(_model_hooks._calls, "stack", []))
    return left


def profiler_starts(model: Any, directory: Path) -> bool:
    """Whether the model's backend's profiler starts now (it is then stopped again)."""
    from keras_xla_guard import backend
    from keras_xla_guard.errors import ProfilerBusyError

    runs = backend.select(model)
    try:
        runs.start_trace(str(directory))
    except ProfilerBusyError:
        return False
    runs.stop_trace()
    return True


def report_of(log_dir: Path) -> tuple[int, dict[str, Any]]:
    """`keras-xla-guard report LOG_DIR --json --all`: its exit code and the JSON it printed."""
    from keras_xla_guard.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["report", str(log_dir), "--json", "--all"])
    return code, json.loads(out.getvalue()) if out.getvalue().strip() else {}


def saved_statuses(log_dir: Path) -> dict[str, str]:
    """Epoch -> status of each report in the run file."""
    from keras_xla_guard.output.runfile import read_run_file

    return {str(r["epoch"]): r["status"] for r in read_run_file(log_dir).reports}


def state(model: Any) -> list[Any]:
    """Every model and optimizer array, copied."""
    import keras

    variables = [*model.variables, *model.optimizer.variables]
    return [np.array(keras.ops.convert_to_numpy(v.value), copy=True) for v in variables]


def sigint_inside(monkeypatch: pytest.MonkeyPatch, model: Any, method: str = "stop_trace") -> list[bool]:
    """Makes the backend send this process a real SIGINT from inside its `method`, before the real call.

    Returns:
        One `True` per signal sent.
    """
    from keras_xla_guard import backend

    cls = type(backend.select(model))
    real = getattr(cls, method)
    sent: list[bool] = []

    def with_a_signal(self: Any, *args: Any) -> Any:
        if not sent:
            sent.append(True)
            os.kill(os.getpid(), signal.SIGINT)
        return real(self, *args)

    monkeypatch.setattr(cls, method, with_a_signal)
    return sent


@contextlib.contextmanager
def full_disk(directory: Path) -> Iterator[Path]:
    """A directory where every write fails: a tmpfs of one page, filled (root), else one made read-only.

    As root a read-only mode does not stop writes; without the right to
    mount a tmpfs there either, nothing here can make a write fail.
    """
    directory.mkdir(parents=True)
    if os.geteuid() != 0:
        directory.chmod(0o555)
        try:
            yield directory
        finally:
            directory.chmod(0o755)
        return
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", str(directory)], capture_output=True, check=False
    )
    if mounted.returncode != 0:
        pytest.skip(f"running as root, and mounting a tmpfs failed: {mounted.stderr.decode().strip()}")
    try:
        with contextlib.suppress(OSError):
            (directory / "filler").write_bytes(b"\0" * 4096)
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=False)
