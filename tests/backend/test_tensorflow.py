"""The TensorFlow backend against TensorFlow's real profiler and switches."""

from __future__ import annotations

import pytest
from _fit_helpers import profiler_is_free
from _helpers import run_python
from _traces import step_markers

from keras_xla_guard.backend import BACKENDS, Backend, get
from keras_xla_guard.backend.tensorflow import TensorFlowBackend
from keras_xla_guard.backend.xla_cache import PersistentCache
from keras_xla_guard.errors import BackendError, ProfilerBusyError, ProfilerNotRunningError
from keras_xla_guard.trace.xplane import find_trace_files

pytestmark = pytest.mark.slow


def test_get_returns_one_tensorflow_backend_per_process():
    """get("tensorflow") is the one TensorFlowBackend instance, and it satisfies Backend."""
    backend = get("tensorflow")
    assert backend is get("tensorflow")
    assert isinstance(backend, TensorFlowBackend)
    assert isinstance(backend, Backend)
    assert backend.name == "tensorflow"
    assert BACKENDS == ("tensorflow", "jax")


def test_an_unknown_backend_name_is_refused_naming_what_exists():
    """get() of a name without implementation raises BackendError quoting it and the known names."""
    with pytest.raises(BackendError) as info:
        get("torch")
    assert "no backend named 'torch'; it has ['tensorflow', 'jax']. Received: name='torch'" in str(info.value)


def test_version_names_the_running_tensorflow():
    """version() is "tensorflow <tf.__version__>"."""
    import tensorflow as tf

    assert get("tensorflow").version() == f"tensorflow {tf.__version__}"


def test_start_while_a_session_runs_is_busy_and_keeps_that_session(tmp_path):
    """TF's AlreadyExistsError becomes ProfilerBusyError with TF's words; the running session is untouched."""
    backend = get("tensorflow")
    backend.start_trace(str(tmp_path / "first"))
    with pytest.raises(ProfilerBusyError, match="TensorFlow said: Another profiler is running"):
        backend.start_trace(str(tmp_path / "second"))
    assert not profiler_is_free()
    backend.stop_trace()
    assert len(find_trace_files(tmp_path / "first", all_runs=True)) == 1
    assert not (tmp_path / "second").exists()
    assert profiler_is_free()


def test_stop_without_a_session_is_not_running():
    """TF's UnavailableError on stop becomes ProfilerNotRunningError with TF's words."""
    assert profiler_is_free()
    with pytest.raises(ProfilerNotRunningError, match="No profiler is running"):
        get("tensorflow").stop_trace()


def test_step_trace_marks_each_step_for_xprof(tmp_path):
    """Entered step_trace(n) regions appear in the trace as "train" events with step_num n."""
    import tensorflow as tf

    backend = get("tensorflow")
    backend.start_trace(str(tmp_path))
    for step in (3, 4, 7):
        with backend.step_trace(step):
            tf.reduce_sum(tf.ones((4, 4))).numpy()
    backend.stop_trace()
    (trace,) = find_trace_files(tmp_path, all_runs=True)
    assert step_markers(trace) == [3, 4, 7]


def test_xla_mode_follows_jit_compile_then_autoclustering():
    """jit_compile wins; else tf.config.optimizer.get_jit() gives "autoclustering"; else None."""
    import tensorflow as tf

    backend = get("tensorflow")
    assert backend.xla_mode(True) == "jit_compile"
    assert backend.xla_mode(False) is None
    tf.config.optimizer.set_jit("autoclustering")
    try:
        assert backend.xla_mode(False) == "autoclustering"
        assert backend.xla_mode(True) == "jit_compile"
    finally:
        tf.config.optimizer.set_jit(False)
    assert backend.xla_mode(False) is None


def test_persistent_cache_reads_tf_xla_flags():
    """persistent_cache(env) is TF_XLA_FLAGS' cache, None without a directory."""
    backend = get("tensorflow")
    assert backend.persistent_cache({}) is None
    env = {"TF_XLA_FLAGS": "--tf_xla_persistent_cache_directory=/c --tf_xla_persistent_cache_read_only=1"}
    assert backend.persistent_cache(env) == PersistentCache("/c", read_only=True)


def test_the_backend_room_imports_no_framework():
    """Importing the backend room and the TF backend, and reading the cache flags, loads no TF or Keras."""
    out = run_python(
        """
        import json, sys
        from keras_xla_guard.backend import get
        backend = get("tensorflow")
        backend.persistent_cache({})
        backend.xla_mode(False)
        print(json.dumps({"loaded": sorted(m for m in ("tensorflow", "keras", "jax") if m in sys.modules)}))
        """
    )
    assert out == {"loaded": []}
