"""`doctor` under Keras on JAX: which backend, jit on, JAX's persistent cache; and the cache at work."""

from __future__ import annotations

import json
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


def _new_user(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`keras-xla-guard doctor ARGS` as a new user runs it: KERAS_BACKEND unset, HOME without ~/.keras."""
    cli = Path(sys.executable).with_name("keras-xla-guard")
    clean = {k: v for k, v in os.environ.items() if k not in ("KERAS_BACKEND", "KERAS_HOME")}
    return subprocess.run(
        [str(cli), "doctor", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={**clean, "HOME": str(home), **env},
    )


def test_a_new_users_doctor_diagnoses_jax_says_why_keras_cannot_start_and_writes_nothing(tmp_path):
    """JAX-only venv, KERAS_BACKEND unset, no ~/.keras: JAX's facts, exit 0, and no keras.json, run after run.

    Keras' default backend is TensorFlow, which this venv lacks: `import keras` fails here, and doctor says
    so with the line that selects JAX. It once wrote a keras.json naming tensorflow (Keras' import does),
    said "keras not installed", and on its next run exited 2 asking for TensorFlow.
    """
    import importlib.util
    from importlib.metadata import version

    import jax
    import jaxlib

    assert importlib.util.find_spec("tensorflow") is None  # the venv this test is about
    for args in ((), (), ("--backend", "jax")):
        done = _new_user(tmp_path, *args)
        assert done.returncode == 0, done.stderr
        assert list(tmp_path.rglob("keras.json")) == []
        text = done.stdout
        assert text.startswith("keras-xla-guard doctor (JAX)\n")
        assert f"jax {jax.__version__} (jaxlib {jaxlib.__version__})" in text
        assert "(backend tensorflow: cannot start here)" in text
        assert f"jax.jit on {jax.devices()[0]}: compiles and runs" in text
        assert "  persistent compilation cache: (off)" in text
        assert "  jax_log_compiles: False; jax_explain_cache_misses: False" in text
        assert (
            f"KERAS_BACKEND_UNAVAILABLE: Keras {version('keras')} cannot start here: it is set to the 'tensorflow' backend "
            "(Keras' default: KERAS_BACKEND is unset and there is no keras.json), and importing Keras fails "
            "with ModuleNotFoundError: No module named 'tensorflow'."
        ) in text.replace("[ERROR] ", "")
        assert 'os.environ["KERAS_BACKEND"] = "jax"' in text and "export KERAS_BACKEND=jax" in text
    data = json.loads(_new_user(tmp_path, "--json").stdout)
    assert (data["backend"], data["keras_version"], data["keras_backend"]) == (
        "jax",
        version("keras"),
        "tensorflow",
    )
    assert [v["code"] for v in data["verdicts"]] == [
        "XLA_BACKEND_OK",
        "KERAS_BACKEND_UNAVAILABLE",
        "JAX_JIT_ON",
        "JAX_CACHE_OFF",
    ]
    # Lists hold each item once (devices, device checks, verdicts).
    lists = [value for value in data.values() if isinstance(value, list)]
    assert all(len({json.dumps(v, sort_keys=True) for v in items}) == len(items) for items in lists), lists


def test_doctor_follows_the_users_backend_setting_without_writing(tmp_path):
    """KERAS_BACKEND=jax: Keras starts on JAX, nothing written; a keras.json naming TensorFlow (as Keras writes it) is
    read, named, and JAX is diagnosed; KERAS_BACKEND=tensorflow is a choice: exit 2 naming what to install.
    """
    from importlib.metadata import version

    done = _new_user(tmp_path, "--json", KERAS_BACKEND="jax")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert (data["keras_backend"], data["keras_version"]) == ("jax", version("keras"))
    assert [v["code"] for v in data["verdicts"]] == ["XLA_BACKEND_OK", "JAX_JIT_ON", "JAX_CACHE_OFF"]
    assert list(tmp_path.rglob("keras.json")) == []
    written = tmp_path / ".keras" / "keras.json"
    written.parent.mkdir()
    written.write_text('{"backend": "tensorflow"}')
    done = _new_user(tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"the 'tensorflow' backend ({written})" in done.stdout
    assert written.read_text() == '{"backend": "tensorflow"}'
    done = _new_user(tmp_path, KERAS_BACKEND="tensorflow")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "keras-xla-guard: error: `keras-xla-guard doctor` runs TensorFlow and Keras, and tensorflow is not "
        'installed: pip install "keras-xla-guard[cpu]" (or [gpu] on a GPU machine).\n'
    )


def test_doctor_jax_reads_keras_in_this_process_once_it_is_imported():
    """From Python with Keras already on JAX (this test process): the facts are this process' own."""
    import keras

    from keras_xla_guard.diagnose.doctor_jax import doctor_jax

    report = doctor_jax(check_devices=False)
    assert (report.keras_version, report.keras_backend) == (keras.__version__, "jax")
    assert "KERAS_BACKEND_UNAVAILABLE" not in report.codes and "KERAS_NOT_ON_JAX" not in report.codes


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
