"""Reading TensorFlow's persistent XLA cache flags, and the line that turns the cache on."""

from __future__ import annotations

from keras_xla_guard.backend.xla_cache import PersistentCache, persistent_cache, recommended_flags


def test_no_directory_means_no_cache():
    """Without `--tf_xla_persistent_cache_directory` (or with it empty) the cache is off."""
    assert persistent_cache({}) is None
    assert persistent_cache({"TF_XLA_FLAGS": "--tf_xla_auto_jit=2"}) is None
    assert persistent_cache({"TF_XLA_FLAGS": "--tf_xla_persistent_cache_directory="}) is None


def test_all_four_flags_are_read():
    """Directory, device types, read-only and prefix come from TF_XLA_FLAGS."""
    env = {
        "TF_XLA_FLAGS": "--tf_xla_cpu_global_jit --tf_xla_persistent_cache_directory=/c "
        "--tf_xla_persistent_cache_device_types=CPU,GPU "
        "--tf_xla_persistent_cache_read_only=true --tf_xla_persistent_cache_prefix=p"
    }
    assert persistent_cache(env) == PersistentCache("/c", ("CPU", "GPU"), True, "p")
    assert persistent_cache({"TF_XLA_FLAGS": "--tf_xla_persistent_cache_directory=/c"}) == PersistentCache(
        "/c"
    )


def test_entries_counts_the_programs_in_the_directory(tmp_path):
    """One `<prefix>__...pb` file per stored program; other files are not counted."""
    cache = PersistentCache(str(tmp_path))
    assert PersistentCache(str(tmp_path / "absent")).entries() == 0
    (tmp_path / "xla_compile_cache__1__2__XLA_CPU_JIT.pb").write_bytes(b"")
    (tmp_path / "xla_compile_cache__3__4__XLA_CPU_JIT.pb").write_bytes(b"")
    (tmp_path / "other.pb").write_bytes(b"")
    assert cache.entries() == 2


def test_recommended_line_keeps_other_flags_and_replaces_an_old_directory():
    """The export line keeps the user's other XLA flags."""
    env = {"TF_XLA_FLAGS": "--tf_xla_cpu_global_jit --tf_xla_persistent_cache_directory=/old"}
    assert recommended_flags("/new", env) == (
        'export TF_XLA_FLAGS="--tf_xla_cpu_global_jit --tf_xla_persistent_cache_directory=/new"'
    )
    assert (
        recommended_flags(env={})
        == 'export TF_XLA_FLAGS="--tf_xla_persistent_cache_directory=$HOME/.cache/xla"'
    )
