"""The backend room: one module per framework behind one written interface.

`Backend` (`_base.py`) is the fixed set of calls keras-xla-guard makes into
the framework that runs the train step: start and stop the profiler, mark a
step, tell the XLA mode, read the persistent compilation cache, count
compilations as they happen. Each framework implements it in its own
module (`tensorflow.py`, `jax.py`), the way Keras
keeps `keras/src/backend/<name>/tensorboard.py`; the engine, the profiler
session and the adapters call only `Backend`'s methods. A new backend is one
module here and one entry in `_IMPLEMENTATIONS`.

`select` picks the implementation for a Keras model (or for the backend
Keras is configured with) and refuses, naming the versions, a backend that
has none; `get` picks one by name (a custom loop of `tf.function`s runs on
TensorFlow whatever Keras is configured with). Nothing here imports a
framework until a method is called.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from typing import Any

from keras_xla_guard.backend._base import Backend, StepProbe
from keras_xla_guard.errors import BackendError

__all__ = ["BACKENDS", "Backend", "StepProbe", "for_step", "get", "select"]

# Backend name (as `keras.backend.backend()` spells it) -> module and class.
_IMPLEMENTATIONS = {
    "tensorflow": ("keras_xla_guard.backend.tensorflow", "TensorFlowBackend"),
    "jax": ("keras_xla_guard.backend.jax", "JaxBackend"),
}
BACKENDS = tuple(_IMPLEMENTATIONS)

_lock = threading.Lock()
_instances: dict[str, Backend] = {}


def get(name: str) -> Backend:
    """The implementation of backend `name`, one instance per process.

    Args:
        name: A name from `BACKENDS`, e.g. `"tensorflow"`.

    Returns:
        The `Backend`.

    Raises:
        BackendError: If keras-xla-guard has no implementation of `name`.

    Example:

    ```python
    from keras_xla_guard import backend

    print(backend.get("tensorflow").xla_mode(jit_compile=True))  # "jit_compile"
    ```
    """
    found = _instances.get(name)
    if found is not None:
        return found
    if name not in _IMPLEMENTATIONS:
        raise BackendError(
            f"keras-xla-guard has no backend named {name!r}; it has {list(BACKENDS)}. Received: name={name!r}"
        )
    module, cls = _IMPLEMENTATIONS[name]
    with _lock:
        if name not in _instances:
            _instances[name] = getattr(importlib.import_module(module), cls)()
        return _instances[name]


def select(model: Any = None) -> Backend:
    """The backend that runs `model`, or the one Keras is configured with.

    Args:
        model: A Keras model (Keras 3 or tf_keras). Defaults to `None`:
            `keras.backend.backend()`.

    Returns:
        Its `Backend`.

    Raises:
        BackendError: If that backend has no implementation here; the
            message names the Keras and the backend's versions and how to
            switch (`KERAS_BACKEND=tensorflow`).

    Example:

    ```python
    from keras_xla_guard import backend

    tf_backend = backend.select(model)
    ```
    """
    from keras_xla_guard import seam

    name = seam.keras_backend(model)
    if name in _IMPLEMENTATIONS:
        return get(name)
    keras = seam.keras_version(model)
    module = sys.modules.get(name)
    version = getattr(module, "__version__", None)
    runs = f"{name} {version}" if version else name
    raise BackendError(
        f"keras-xla-guard measures XLA under TensorFlow or JAX, but {keras} runs on "
        f"backend={name!r} ({runs}); keras-xla-guard has backends {list(BACKENDS)}. Set "
        "KERAS_BACKEND=tensorflow or KERAS_BACKEND=jax before importing Keras to use it."
    )


def for_step(fn: Any) -> Backend:
    """The backend that runs a custom loop's step `fn` (`XlaGuard.watch`).

    The backend whose compiled function `fn` is (a `tf.function`, a
    `jax.jit`), looking through `functools.wraps` wrappers (`nnx.jit`);
    for any other callable, the one framework this process has imported,
    else the backend Keras is configured with, else TensorFlow when it is
    installed, else JAX.

    Args:
        fn: The step.

    Returns:
        Its `Backend`.
    """
    seen = fn
    for _ in range(8):
        for name in _IMPLEMENTATIONS:
            if get(name).owns(seen):
                return get(name)
        seen = getattr(seen, "__wrapped__", None)
        if seen is None:
            break
    loaded = [name for name in _IMPLEMENTATIONS if name in sys.modules]
    if len(loaded) == 1:
        return get(loaded[0])
    if "keras" in sys.modules:
        from keras_xla_guard import seam

        configured = seam.keras_backend(None)
        if configured in _IMPLEMENTATIONS:
            return get(configured)
    installed = [name for name in _IMPLEMENTATIONS if importlib.util.find_spec(name) is not None]
    return get(installed[0] if installed else "tensorflow")
