"""`doctor` under Keras on JAX: which backend, jit on, JAX's persistent cache; and the cache at work."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from _helpers import REPO, run_python

pytestmark = pytest.mark.slow


def _doctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cli = Path(sys.executable).with_name("keras-xla-guard")
    return subprocess.run(
        [str(cli), "doctor", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={**os.environ, "KERAS_BACKEND": "jax", **(env or {})},
    )


def test_doctor_on_jax_names_the_backend_jit_and_the_cache_off():
    """Keras on JAX: `doctor` prints the JAX section; jit on, the device checked, the cache off with its fix."""
    done = _doctor()
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert text.startswith("keras-xla-guard doctor (JAX)")
    import jax

    assert "(backend jax)" in text and "jit: on" in text
    assert f"jax.jit on {jax.devices()[0]}: compiles and runs" in text
    assert (
        'export JAX_COMPILATION_CACHE_DIR="$HOME/.cache/jax" JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0'
        in text
    )


@pytest.fixture
def jax_config():
    """Sets jax.config options for one test and puts the previous values back."""
    import jax

    names = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs", "jax_disable_jit")
    before = {name: getattr(jax.config, name) for name in names}
    yield jax.config
    for name, value in before.items():
        jax.config.update(name, value)


def test_the_cache_verdict_follows_its_threshold(tmp_path, jax_config):
    """A cache with the default 1 s threshold is JAX_CACHE_THRESHOLD (with its fix); with 0, JAX_CACHE_ON."""
    from keras_xla_guard.diagnose.doctor_jax import doctor_jax

    jax_config.update("jax_compilation_cache_dir", str(tmp_path))
    codes = {}
    for threshold in (1.0, 0.0):
        jax_config.update("jax_persistent_cache_min_compile_time_secs", threshold)
        report = doctor_jax(check_devices=False)
        assert (report.cache_dir, report.cache_min_compile_time_s) == (str(tmp_path), threshold)
        codes[threshold] = report.codes
        assert report.to_dict()["backend"] == "jax"
    assert codes == {1.0: ("JAX_JIT_ON", "JAX_CACHE_THRESHOLD"), 0.0: ("JAX_JIT_ON", "JAX_CACHE_ON")}


def test_doctor_names_disabled_jit_as_an_error(jax_config):
    """jax_disable_jit on: the JAX_JIT_DISABLED error with the line that turns it back on."""
    from keras_xla_guard.diagnose.doctor_jax import doctor_jax

    jax_config.update("jax_disable_jit", True)
    (disabled,) = [v for v in doctor_jax(check_devices=False).verdicts if v.code == "JAX_JIT_DISABLED"]
    assert disabled.status == "error" and "jax_disable_jit" in disabled.fix


def test_a_second_process_loads_its_programs_from_the_persistent_cache(tmp_path):
    """With the cache on and no threshold, a second process's train compilations are cache hits, counted as such."""
    code = """
        import json, sys, tempfile
        sys.path.insert(0, "tests")
        from pathlib import Path
        from _jax_helpers import fit_on_jax
        run = fit_on_jax(Path(tempfile.mkdtemp()), profile_epochs=())
        rows = [r for c in run.guard.compilations.values() for r in c.rows if r.function == "train"]
        print(json.dumps({"hits": [r.cache_hit for r in rows]}))
    """
    env = {
        "KERAS_BACKEND": "jax",
        "JAX_COMPILATION_CACHE_DIR": str(tmp_path),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    }
    first, second = run_python(code, env=env), run_python(code, env=env)
    assert first["hits"] and not any(first["hits"])
    assert second["hits"] == [True] * len(first["hits"])
