"""JAX internals keras-xla-guard relies on, each behind one function.

As `tf_internals.py` for TensorFlow: each function says what it touches and
what happens when a JAX release no longer has it. The versions each was
verified on are listed in `docs/compatibility.md`.
"""

from __future__ import annotations

__all__ = ["free_profiler"]


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
