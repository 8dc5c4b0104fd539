"""The JAX backend on a real JAX: profiler with the Python tracer off, errors mapped, cache, compile events."""

from __future__ import annotations

import collections

import pytest

from keras_xla_guard.backend import Backend, get, select
from keras_xla_guard.backend.jax import JaxBackend
from keras_xla_guard.errors import ProfilerBusyError, ProfilerNotRunningError
from keras_xla_guard.trace.xplane import find_trace_files, load_xspace


def test_keras_on_jax_selects_the_one_jax_backend():
    """select() under KERAS_BACKEND=jax is get("jax"), a Backend naming the running JAX."""
    import jax

    backend = select()
    assert backend is get("jax") and isinstance(backend, JaxBackend) and isinstance(backend, Backend)
    assert backend.version() == f"jax {jax.__version__}"
    assert (backend.xla_mode(True), backend.xla_mode(False)) == ("jit_compile", None)


def test_profiler_errors_become_the_package_errors(tmp_path):
    """A second start is ProfilerBusyError (the first session survives); stop without one is ProfilerNotRunningError."""
    backend = get("jax")
    with pytest.raises(ProfilerNotRunningError, match="JAX said"):
        backend.stop_trace()
    backend.start_trace(str(tmp_path / "a"))
    try:
        with pytest.raises(ProfilerBusyError, match="already running"):
            backend.start_trace(str(tmp_path / "b"))
    finally:
        backend.stop_trace()
    assert len(find_trace_files(tmp_path / "a")) == 1


def test_a_window_has_step_markers_and_no_python_tracer_events(tmp_path):
    """Steps marked through step_trace are `train` events with step_num; no `$file:line` Python-tracer event."""
    import jax
    import jax.numpy as jnp

    backend = get("jax")
    double = jax.jit(lambda x: 2 * x)
    backend.start_trace(str(tmp_path))
    for step in range(3):
        with backend.step_trace(step):
            double(jnp.ones(4)).block_until_ready()
    backend.stop_trace()
    (trace,) = find_trace_files(tmp_path)
    space = load_xspace(trace)
    names = collections.Counter(
        plane.event_metadata[e.metadata_id].name
        for plane in space.planes
        for line in plane.lines
        for e in line.events
    )
    assert names["train"] == 3
    assert not [n for n in names if n.startswith("$")]


def test_persistent_cache_reads_jax_config(tmp_path):
    """jax_compilation_cache_dir and the min compile time come back from jax.config; None when unset."""
    import jax

    backend = get("jax")
    before = jax.config.jax_compilation_cache_dir
    assert backend.persistent_cache() is None
    jax.config.update("jax_compilation_cache_dir", str(tmp_path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    try:
        cache = backend.persistent_cache()
        assert (cache.directory, cache.min_compile_time_s, cache.entries()) == (str(tmp_path), 0.0, 0)
    finally:
        jax.config.update("jax_compilation_cache_dir", before)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)


def test_watch_compiles_reports_each_phase_until_unsubscribed():
    """A new shape of a jitted function: trace, lower and compile named for it; nothing after unsubscribing."""
    import jax
    import jax.numpy as jnp

    def triple(x):
        return 3 * x

    three, five = jnp.ones(3), jnp.ones(5)
    seen: list[tuple[str, str]] = []
    stop = get("jax").watch_compiles(lambda phase, name, seconds: seen.append((phase, name)))
    jitted = jax.jit(triple)
    jitted(three)
    jitted(three)
    stop()
    jitted(five)
    # JAX 0.6 also reports the trace of the op inside (`multiply`, ending first); one lowering, one compile.
    assert ("trace", "triple") in seen
    assert [(p, n) for p, n in seen if p != "trace"][-1] == ("compile", "jit(triple)")
    assert [p for p, _ in seen if p != "trace"] == ["lower", "compile"]


def test_a_jax_whose_profiler_state_cannot_be_reset_is_named_once(monkeypatch):
    """After a failed export the backend forgets JAX's session; where this JAX keeps it elsewhere, one
    warning names the JAX version and what is lost (later windows are refused)."""
    import types
    import warnings

    import jax
    from jax._src import profiler

    from keras_xla_guard.backend import jax as jax_backend
    from keras_xla_guard.errors import XlaGuardWarning
    from keras_xla_guard.seam.jax_internals import free_profiler

    assert free_profiler() is None  # this JAX: reset (no session held)
    monkeypatch.setattr(profiler, "_profile_state", types.SimpleNamespace(profile_session=None))
    monkeypatch.setattr(jax_backend, "_warned", set())
    assert free_profiler() == "jax._src.profiler has no _profile_state with a lock and reset()"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        get("jax")._free_after_failed_stop()
        get("jax")._free_after_failed_stop()
    assert [str(w.message) for w in caught if w.category is XlaGuardWarning] == [
        f"keras-xla-guard: jax {jax.__version__}: writing a trace failed and JAX's profiler could not be "
        "reset (jax._src.profiler has no _profile_state with a lock and reset()); JAX refuses every later "
        "profiling window in this process"
    ]
