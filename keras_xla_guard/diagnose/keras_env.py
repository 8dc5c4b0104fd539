"""Which backend `doctor` diagnoses, and Keras' own facts, without writing `keras.json`.

Importing Keras writes `$KERAS_HOME/keras.json` (`~/.keras/keras.json`)
when it does not exist, naming the `tensorflow` backend whatever
`KERAS_BACKEND` says (Keras 3.15 `keras/src/backend/config.py`); importing
TensorFlow does too, since it imports Keras (TensorFlow 2.21
`tensorflow/python/keras/backend.py`). Both measured in
`tests/diagnose/test_keras_env.py`. A diagnosis must leave the user's
files alone, and a JAX user's doctor that wrote that file would read it
back on its next run as a request for TensorFlow. So:

- the backend to diagnose is read as Keras reads it, without importing
  Keras (`doctor_backend`);
- Keras' facts come from this process only when Keras or TensorFlow is
  already imported here (Keras has then read or written its file
  already), else from a child process (`keras_facts`);
- whatever would import them for the first time runs under
  `keras_config_untouched()`, which points `KERAS_HOME` at a temporary
  directory while the user's `keras.json` does not exist.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

from keras_xla_guard.diagnose.verdict import ERROR, RUNTIME, Verdict

__all__ = [
    "KerasFacts",
    "backend_unavailable_verdict",
    "doctor_backend",
    "keras_backend_setting",
    "keras_config_path",
    "keras_config_untouched",
    "keras_facts",
    "select_backend_fix",
]

KERAS_ENV_MODULE = "keras_xla_guard.diagnose.keras_env"
# What Keras runs on when neither KERAS_BACKEND nor keras.json names a backend.
KERAS_DEFAULT_BACKEND = "tensorflow"
DEFAULT_SOURCE = "Keras' default: KERAS_BACKEND is unset and there is no keras.json"
# The backends doctor diagnoses, in the order it falls back to them.
DIAGNOSED = ("tensorflow", "jax")
_CHILD_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class KerasFacts:
    """What Keras is and runs on here.

    Attributes:
        version: The installed Keras version; `None` when Keras is not installed.
        backend: The backend Keras runs on, or is set to when it cannot start.
        source: Where that setting comes from: `"KERAS_BACKEND"`, the
            `keras.json` path, or Keras' default.
        auto_jit_compile: What `compile(jit_compile="auto")` resolves to on
            the TensorFlow backend (asked for with `resolve`); else `None`.
        error: Why `import keras` fails here, in one line; `""` when it imports.
    """

    version: str | None
    backend: str | None = None
    source: str = ""
    auto_jit_compile: bool | None = None
    error: str = ""


def keras_config_path() -> str:
    """The `keras.json` Keras reads, found as Keras finds it (without importing it).

    Returns:
        `$KERAS_HOME/keras.json`, else `~/.keras/keras.json` (`/tmp/.keras`
        when the home directory is not writable, as Keras does).
    """
    home = os.environ.get("KERAS_HOME")
    if home is None:
        base = os.path.expanduser("~")
        home = os.path.join(base if os.access(base, os.W_OK) else "/tmp", ".keras")
    return os.path.expanduser(os.path.join(home, "keras.json"))


def _backend_setting() -> tuple[str | None, str]:
    """`(backend, source)` as Keras reads it; `(None, DEFAULT_SOURCE)` when nothing sets one."""
    configured = os.environ.get("KERAS_BACKEND")
    if configured:  # Keras ignores an empty value
        return configured, "KERAS_BACKEND"
    path = keras_config_path()
    try:
        with open(path, encoding="utf-8") as f:
            backend = json.load(f).get("backend")
    except (OSError, ValueError, AttributeError):
        return None, DEFAULT_SOURCE
    return (backend, path) if isinstance(backend, str) else (None, DEFAULT_SOURCE)


def keras_backend_setting() -> str | None:
    """The backend Keras is configured with, read as Keras reads it, without importing Keras.

    Returns:
        `KERAS_BACKEND`, else `"backend"` in `keras_config_path()`; `None`
        when neither sets one.
    """
    return _backend_setting()[0]


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def doctor_backend(requested: str | None = None) -> str:
    """The backend `doctor` diagnoses.

    `KERAS_BACKEND` is the user's choice and is kept even when its
    framework is missing (doctor then says what to install). `keras.json`
    is not always one: Keras writes it on its first import, naming
    TensorFlow whatever `KERAS_BACKEND` said, so when its framework is not
    installed the installed one is diagnosed (TensorFlow first, else JAX),
    as when nothing names a backend.

    Args:
        requested: `--backend`, which wins. Defaults to `None`.

    Returns:
        `"tensorflow"` or `"jax"` (the requested value as given).
    """
    if requested is not None:
        return requested
    configured, source = _backend_setting()
    if source == "KERAS_BACKEND" and configured in DIAGNOSED:
        return configured
    installed = [name for name in DIAGNOSED if _installed(name)]
    if configured in installed:
        return configured
    return installed[0] if installed else KERAS_DEFAULT_BACKEND


@contextlib.contextmanager
def keras_config_untouched() -> Iterator[None]:
    """Within the block, a first import of Keras or TensorFlow writes no `keras.json` of the user's.

    While `keras_config_path()` does not exist, `KERAS_HOME` points at a
    temporary directory (removed afterwards): Keras reads no file there,
    exactly as with none at the user's path, and writes its own there.
    When the file exists, Keras only reads it and nothing changes.

    Example:

    ```python
    with keras_config_untouched():
        import keras  # ~/.keras/keras.json is not created
    ```
    """
    if os.path.exists(keras_config_path()):
        yield
        return
    before = os.environ.get("KERAS_HOME")
    scratch = tempfile.mkdtemp(prefix="keras_xla_guard_keras_home_")
    os.environ["KERAS_HOME"] = scratch
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("KERAS_HOME", None)
        else:
            os.environ["KERAS_HOME"] = before
        shutil.rmtree(scratch, ignore_errors=True)


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _installed_version() -> str | None:
    try:
        return version("keras")
    except PackageNotFoundError:
        return None


def _facts_here(resolve: bool) -> KerasFacts:
    """Keras' facts read in this process (imports Keras)."""
    setting, source = _backend_setting()
    try:
        import keras
    except Exception as e:  # noqa: BLE001 - a Keras that cannot start is the finding
        if isinstance(e, ModuleNotFoundError) and e.name == "keras":
            return KerasFacts(None)
        installed = _installed_version()
        if installed is None:
            return KerasFacts(None)
        return KerasFacts(installed, setting or KERAS_DEFAULT_BACKEND, source, error=_one_line(e))
    backend = str(keras.backend.backend())
    source = source if backend == (setting or KERAS_DEFAULT_BACKEND) else "set in this process"
    if backend != "tensorflow" or not resolve:
        return KerasFacts(keras.__version__, backend, source)
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse", jit_compile="auto")
    return KerasFacts(keras.__version__, backend, source, bool(model.jit_compile))


def _facts_in_child(resolve: bool, timeout: float) -> KerasFacts:
    """Keras' facts read in a fresh process, which imports Keras without writing the user's keras.json."""
    cmd = [sys.executable, "-m", KERAS_ENV_MODULE, *(["--resolve"] if resolve else [])]
    setting, source = _backend_setting()
    installed = _installed_version()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        error = f"importing Keras in a child process took more than {timeout:g} s"
        return KerasFacts(installed, setting or KERAS_DEFAULT_BACKEND, source, error=error)
    line = next((x for x in reversed(done.stdout.splitlines()) if x.startswith("{")), None)
    if done.returncode != 0 or line is None:
        tail = " | ".join(done.stderr.strip().splitlines()[-2:])
        error = f"a child process importing Keras exited with code {done.returncode}: {tail}"
        return KerasFacts(installed, setting or KERAS_DEFAULT_BACKEND, source, error=error)
    return KerasFacts(**json.loads(line))


def keras_facts(resolve: bool = False, timeout: float = _CHILD_TIMEOUT_S) -> KerasFacts:
    """Keras' version, backend and (on TensorFlow) `jit_compile="auto"`, never writing `keras.json`.

    Read in this process when Keras or TensorFlow (which imports Keras) is
    imported here already; else in a child process under
    `keras_config_untouched()`, so that neither this process nor the
    user's files get Keras started by a diagnosis.

    Args:
        resolve: On the TensorFlow backend, compile a throwaway one-layer
            model to read what `jit_compile="auto"` resolves to. Defaults to
            `False`.
        timeout: Seconds the child process may take. Defaults to `120`.

    Returns:
        A `KerasFacts`; a Keras that cannot start is reported in `error`.
    """
    if "keras" in sys.modules or "tensorflow" in sys.modules:
        return _facts_here(resolve)
    if _installed_version() is None:
        return KerasFacts(None)
    return _facts_in_child(resolve, timeout)


def select_backend_fix(backend: str) -> str:
    """The code that makes Keras run on `backend`."""
    return (
        f"# Select the backend before Keras is imported (in a shell: export KERAS_BACKEND={backend}):\n"
        "import os\n"
        f'os.environ["KERAS_BACKEND"] = "{backend}"\n'
        "import keras"
    )


def backend_unavailable_verdict(facts: KerasFacts, use: str) -> Verdict | None:
    """`KERAS_BACKEND_UNAVAILABLE` when Keras is installed but cannot start; else `None`.

    Args:
        facts: What `keras_facts` found.
        use: The backend the fix selects (the one being diagnosed).

    Returns:
        The verdict, whose fix selects `use`, or `None`.
    """
    if not facts.error:
        return None
    return Verdict(
        "KERAS_BACKEND_UNAVAILABLE",
        RUNTIME,
        ERROR,
        f"Keras {facts.version} cannot start here: it is set to the {facts.backend!r} backend "
        f"({facts.source}), and importing Keras fails with {facts.error.rstrip('.')}.",
        select_backend_fix(use),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Child side of `keras_facts`, as `python -m keras_xla_guard.diagnose.keras_env`.

    Args:
        argv: Command-line arguments. Defaults to `None` (`sys.argv[1:]`).

    Returns:
        0 after printing the facts as one JSON line.
    """
    parser = argparse.ArgumentParser(prog=f"python -m {KERAS_ENV_MODULE}")
    parser.add_argument("--resolve", action="store_true", help="resolve jit_compile='auto' on TensorFlow")
    args = parser.parse_args(argv)
    # Under a scratch KERAS_HOME only while the user's keras.json does not
    # exist: the setting and its source read there are the user's.
    with keras_config_untouched():
        facts = _facts_here(args.resolve)
    print(json.dumps(dataclasses.asdict(facts)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
