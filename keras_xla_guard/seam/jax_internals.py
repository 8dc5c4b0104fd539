"""JAX internals keras-xla-guard relies on, each behind one function.

As `tf_internals.py` for TensorFlow: each function says what it touches and
what happens when a JAX release no longer has it. The versions each was
verified on are listed in `docs/compatibility.md`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["cache_size", "free_profiler", "jit_statics", "looks_jitted"]


def free_profiler() -> str | None:
    """Forgets JAX's profiler session after its stop failed, so the next start works.

    `jax.profiler.stop_trace()` keeps its session in
    `jax._src.profiler._profile_state` and resets that only after the trace
    is written: an export that fails (a full disk) raises before the reset,
    and every later `start_trace` then raises "Profile has already been
    started" for the rest of the process (jax 0.6.2 to 0.10.2). The native
    session has stopped by then (`ProfilerSession.stop_and_export` stops it
    before writing); this drops JAX's reference to it, as its own
    `_ProfileState.reset()` would have.

    Returns:
        `None` when JAX's state was reset (or held no session); else why
        it could not be (this JAX keeps its state elsewhere).
    """
    try:
        from jax._src import profiler
    except ImportError as e:
        return f"jax._src.profiler is not importable ({e})"
    state = getattr(profiler, "_profile_state", None)
    lock = getattr(state, "lock", None)
    if state is None or lock is None or not callable(getattr(state, "reset", None)):
        return "jax._src.profiler has no _profile_state with a lock and reset()"
    with lock:
        state.reset()
    return None


def jit_statics(fn: Any) -> tuple[tuple[int, ...], tuple[str, ...], Any] | None:
    """A `jax.jit` function's static argument positions and names, and the function it wraps.

    JAX keeps them in the private `PjitFunction._jit_info` (a `PjitInfo`
    with `static_argnums`, `static_argnames`; jax 0.6.2 to 0.10.2) and the
    wrapped function in `_fun`; nothing public gives the static arguments.

    Args:
        fn: Any callable.

    Returns:
        `(static_argnums, static_argnames, wrapped)`; `None` when `fn` is
        not a `jax.jit` function, or this JAX keeps them elsewhere (then
        `jit_internals_missing(fn)` says so).
    """
    info = getattr(fn, "_jit_info", None)
    wrapped = getattr(fn, "_fun", None)
    nums = getattr(info, "static_argnums", None)
    names = getattr(info, "static_argnames", None)
    if info is None or wrapped is None or nums is None or names is None:
        return None
    return tuple(int(n) for n in nums), tuple(str(n) for n in names), wrapped


def looks_jitted(fn: Any) -> bool:
    """Whether `fn` has the public face of a `jax.jit` function (`lower`, `trace`, `eval_shape`)."""
    return all(callable(getattr(fn, name, None)) for name in ("lower", "eval_shape"))


def cache_size(fn: Any) -> int | None:
    """The number of compiled programs a `jax.jit` function holds (`PjitFunction._cache_size()`).

    Private in every JAX since 0.4. Flax NNX's `nnx.jit` keeps its
    `jax.jit` function in `jitted_fn` (flax 0.12); that one's count is read.

    Returns:
        The count; `None` when `fn` has no such cache.
    """
    size = getattr(fn, "_cache_size", None) or getattr(getattr(fn, "jitted_fn", None), "_cache_size", None)
    if not callable(size):
        return None
    try:
        return int(size())
    except Exception:  # noqa: BLE001 - a count the guard shows, never worth a failure
        return None
