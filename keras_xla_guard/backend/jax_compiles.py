"""Every JAX compilation of the process, from `jax.monitoring`, to whoever subscribed.

JAX reports each phase of a compilation to its monitoring listeners, on the
thread that compiles, with the function's name:

- `/jax/core/compile/jaxpr_trace_duration` (`fun_name="train_step"`):
  tracing the Python function to a jaxpr;
- `/jax/core/compile/jaxpr_to_mlir_module_duration` (`"jit(train_step)"`
  from JAX 0.7; the name stack, often empty, before): lowering;
- `/jax/core/compile/backend_compile_duration` (`"jit(train_step)"`): XLA's
  compilation, or the load from the persistent cache, which JAX marks
  with a `/jax/compilation_cache/cache_hits` event inside it.

One backend-compile event is one compiled program: an exact count, with
no profiler. JAX 0.6 has no way to unregister a listener (the
`unregister_*` functions came later), so this module registers one
dispatcher per process, once, and guards subscribe to it and leave it;
an idle dispatcher costs one dictionary lookup per event.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from typing import Any

from keras_xla_guard.errors import XlaGuardWarning

__all__ = ["CACHE_HIT_EVENT", "PHASES", "subscribe"]

# jax.monitoring event -> the phase it reports.
PHASES = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    "/jax/core/compile/backend_compile_duration": "compile",
}
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"

Subscriber = Callable[[str, str, float], None]
_lock = threading.Lock()
_subscribers: dict[int, Subscriber] = {}
_next_id = 0
_registered = False


def _on_duration(event: str, duration: float, **kwargs: Any) -> None:
    phase = PHASES.get(event)
    if phase is None or not _subscribers:
        return
    name = str(kwargs.get("fun_name", ""))
    for callback in list(_subscribers.values()):
        try:
            callback(phase, name, float(duration))
        except Exception:  # noqa: BLE001 - a guard's bookkeeping must never fail a compilation
            pass


def _on_event(event: str, **kwargs: Any) -> None:
    if event != CACHE_HIT_EVENT or not _subscribers:
        return
    for callback in list(_subscribers.values()):
        try:
            callback("cache_hit", "", 0.0)
        except Exception:  # noqa: BLE001 - see _on_duration
            pass


def _register() -> bool:
    """Registers the dispatcher with `jax.monitoring` once per process; whether it could."""
    global _registered
    if _registered:
        return True
    import jax

    monitoring = getattr(jax, "monitoring", None)
    durations = getattr(monitoring, "register_event_duration_secs_listener", None)
    events = getattr(monitoring, "register_event_listener", None)
    if durations is None or events is None:
        warnings.warn(
            f"keras-xla-guard: jax {jax.__version__} has no jax.monitoring duration listeners: "
            "compilations are not counted (figures unavailable, not 0); profiled windows still "
            "count the ones inside them",
            XlaGuardWarning,
            stacklevel=4,
        )
        return False
    durations(_on_duration)
    events(_on_event)
    _registered = True
    return True


def subscribe(callback: Subscriber) -> Callable[[], None] | None:
    """Calls `callback(phase, name, seconds)` for every compile phase of the process.

    Args:
        callback: Receives `phase` (`"trace"`, `"lower"`, `"compile"`,
            `"cache_hit"`), JAX's function name and the phase's seconds, on
            the compiling thread. Its exceptions are swallowed.

    Returns:
        The function that unsubscribes `callback` (safe to call twice), or
        `None` when this JAX reports no compile events (warned).
    """
    global _next_id
    with _lock:
        if not _register():
            return None
        key = _next_id
        _next_id += 1
        _subscribers[key] = callback

    def unsubscribe() -> None:
        with _lock:
            _subscribers.pop(key, None)

    return unsubscribe
