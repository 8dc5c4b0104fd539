"""`diagnose.keras_env`: which backend doctor diagnoses, and doctor never writes the user's keras.json.

The writes it guards against are Keras' and TensorFlow's own, measured here
in fresh processes with a temporary HOME; so is doctor leaving that HOME as
it found it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _helpers import REPO, run_python

from keras_xla_guard.diagnose.keras_env import (
    DEFAULT_SOURCE,
    doctor_backend,
    keras_backend_setting,
    keras_config_path,
    keras_config_untouched,
)


def _fresh_home_env(home: Path, **extra: str) -> dict[str, str]:
    """This environment with HOME at `home` and neither KERAS_BACKEND nor KERAS_HOME."""
    env = {k: v for k, v in os.environ.items() if k not in ("KERAS_BACKEND", "KERAS_HOME")}
    return {**env, "HOME": str(home), **extra}


def _files(home: Path) -> list[str]:
    return sorted(str(p.relative_to(home)) for p in home.rglob("keras.json"))


@pytest.mark.slow
@pytest.mark.parametrize("module", ["keras", "tensorflow"])
def test_importing_keras_or_tensorflow_writes_a_keras_json_naming_tensorflow(tmp_path, module):
    """Keras' (and TensorFlow's) import writes ~/.keras/keras.json with backend tensorflow, even under KERAS_BACKEND=jax.

    This is why doctor must not import either before it has kept the user's file out of reach.
    """
    env = _fresh_home_env(tmp_path, KERAS_BACKEND="jax" if module == "keras" else "tensorflow")
    subprocess.run(
        [sys.executable, "-c", f"import {module}"], env=env, check=True, capture_output=True, timeout=300
    )
    assert _files(tmp_path) == [".keras/keras.json"]
    assert json.loads((tmp_path / ".keras" / "keras.json").read_text())["backend"] == "tensorflow"


@pytest.mark.slow
def test_config_untouched_keeps_a_first_import_of_tensorflow_and_keras_away_from_the_users_file(tmp_path):
    """Inside the block Keras reads and writes a scratch KERAS_HOME; after it, KERAS_HOME is as before and the scratch is gone."""
    code = """
        import json, os
        from keras_xla_guard.diagnose.keras_env import keras_config_untouched
        with keras_config_untouched():
            scratch = os.environ["KERAS_HOME"]
            import tensorflow, keras
            wrote = os.path.exists(os.path.join(scratch, "keras.json"))
        print(json.dumps({"wrote_scratch": wrote, "scratch_left": os.path.exists(scratch),
                          "keras_home": os.environ.get("KERAS_HOME"), "backend": keras.backend.backend()}))
    """
    home = tmp_path / "home"
    home.mkdir()
    out = run_python(code, env=_fresh_home_env(home))
    assert out == {"wrote_scratch": True, "scratch_left": False, "keras_home": None, "backend": "tensorflow"}
    assert _files(home) == []


def test_config_untouched_changes_nothing_when_the_file_exists(tmp_path, monkeypatch):
    """With a keras.json where Keras reads it, Keras only reads it: the block leaves KERAS_HOME alone."""
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    (tmp_path / "keras.json").write_text('{"backend": "jax"}')
    assert keras_config_path() == str(tmp_path / "keras.json")
    with keras_config_untouched():
        assert os.environ["KERAS_HOME"] == str(tmp_path)
    (tmp_path / "keras.json").unlink()
    with keras_config_untouched():
        scratch = Path(os.environ["KERAS_HOME"])
        assert scratch != tmp_path and scratch.is_dir()
    assert os.environ["KERAS_HOME"] == str(tmp_path) and not scratch.exists()


@pytest.mark.parametrize(
    ("env_backend", "json_backend", "hidden", "requested", "expected"),
    [
        (None, None, (), None, "tensorflow"),  # nothing set: the installed one, TensorFlow first
        (None, None, ("tensorflow",), None, "jax"),
        (None, None, ("tensorflow", "jax"), None, "tensorflow"),  # neither: doctor says what to install
        ("jax", None, (), None, "jax"),
        ("", "jax", (), None, "jax"),  # an empty KERAS_BACKEND is unset, as Keras reads it
        (None, "jax", (), None, "jax"),
        # The keras.json Keras writes on its first import names TensorFlow: no proof of a choice.
        (None, "tensorflow", ("tensorflow",), None, "jax"),
        (None, "torch", ("tensorflow",), None, "jax"),
        (None, "torch", (), None, "tensorflow"),
        # KERAS_BACKEND is the user's choice: kept, and doctor says what to install.
        ("tensorflow", None, ("tensorflow",), None, "tensorflow"),
        ("jax", "tensorflow", (), "tensorflow", "tensorflow"),  # --backend wins
    ],
)
def test_doctor_backend_reads_the_setting_then_what_is_installed(
    tmp_path, monkeypatch, env_backend, json_backend, hidden, requested, expected
):
    """KERAS_BACKEND, then keras.json when its framework is installed, then the installed framework."""
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    if env_backend is None:
        monkeypatch.delenv("KERAS_BACKEND", raising=False)
    else:
        monkeypatch.setenv("KERAS_BACKEND", env_backend)
    if json_backend is not None:
        (tmp_path / "keras.json").write_text(json.dumps({"backend": json_backend}))
    for module in hidden:
        monkeypatch.setitem(sys.modules, module, None)  # find_spec then says: not installed
    assert doctor_backend(requested) == expected
    assert keras_backend_setting() == (env_backend or json_backend)


@pytest.mark.slow
@pytest.mark.parametrize("argv", [("doctor",), ("doctor", "--backend", "jax", "--json")])
def test_doctor_in_a_fresh_home_writes_no_keras_json(tmp_path, argv):
    """`doctor` (TensorFlow, with its probe) and `doctor --backend jax` leave a HOME without keras.json without one.

    Under JAX with KERAS_BACKEND unset, Keras' default backend (TensorFlow, installed here) starts, and the
    report says Keras is not on JAX, where that setting comes from.
    """
    env = _fresh_home_env(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "keras_xla_guard.cli", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _files(tmp_path) == []
    if "--json" in argv:
        data = json.loads(proc.stdout)
        assert (data["backend"], data["keras_backend"]) == ("jax", "tensorflow")
        (verdict,) = [v for v in data["verdicts"] if v["code"] == "KERAS_NOT_ON_JAX"]
        assert verdict["message"] == (
            f"Keras runs on backend='tensorflow' ({DEFAULT_SOURCE}); these are JAX's facts, "
            "which Keras uses only with KERAS_BACKEND=jax."
        )
    else:
        assert proc.stdout.startswith("keras-xla-guard doctor\n")
