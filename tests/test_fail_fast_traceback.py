"""A `fail_fast` budget stop shows the user's line and the budget's message, not the library's frames.

Between `fit` and the budget that raises lie some 20 frames (Keras' loop, the guard's callback,
signature feed, engine and ledger); under pytest, with their source, about 65 lines. The error's
message is the whole story (each compilation, what changed, the fix, docs/budgets.md), so the
model hooks re-raise it without them. Real fits in fresh processes, in plain Python and under pytest.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest
from _helpers import REPO

pytestmark = pytest.mark.slow

_STORM = """
import numpy as np, keras, keras_xla_guard
import tensorflow as tf

def storm():
    model = keras.Sequential([keras.Input((None, 1)), keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(1)])
    model.compile("sgd", "mse", jit_compile=True)
    def gen():
        for n in (4, 5, 6, 7):
            yield np.ones((8, n, 1), "float32"), np.ones((8, 1), "float32")
    spec = (tf.TensorSpec((8, None, 1)), tf.TensorSpec((8, 1)))
    model.fit(tf.data.Dataset.from_generator(gen, output_signature=spec), epochs=1, verbose=0)
"""
_INTERNALS = (
    "callback.py",
    "signature_feed.py",
    "runtime/engine.py",
    "runtime/budget.py",
    "traceback_utils.py",
)
_HEAD = (
    "keras_xla_guard.errors.RecompilationLimitError: keras-xla-guard: XLA compilation 2 inside "
    "max_compilations(1) goes over it (fail_fast=True); stopped at the step that caused it."
)


def _run(args: list[str], cwd) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(REPO)}
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=300, cwd=cwd, check=False)


def test_in_plain_python_the_traceback_holds_one_library_line(tmp_path):
    """The user's `fit` line, then one line of the model hook saying a budget stopped it, then the message."""
    script = tmp_path / "storm.py"
    script.write_text(_STORM + "with keras_xla_guard.max_compilations(1, fail_fast=True):\n    storm()\n")
    done = _run([sys.executable, str(script)], tmp_path)
    assert done.returncode == 1
    tail = done.stderr[done.stderr.index("Traceback (most recent call last):") :]
    frames = re.findall(r'^  File "([^"]+)", line \d+, in (\S+)', tail, re.MULTILINE)
    assert [(os.path.basename(f), fn) for f, fn in frames] == [
        ("storm.py", "<module>"),
        ("storm.py", "storm"),
        ("_model_hooks.py", "entry"),
    ]
    assert "raise stop.with_traceback(None) from None  # a budget stopped it: the message says why" in tail
    assert _HEAD + " Each one, with what changed and the fix:" in tail
    assert tail.rstrip().endswith("docs/budgets.md.)")


def test_under_pytest_the_failure_shows_the_tests_line_and_the_message_only(tmp_path):
    """The marker with fail_fast=True: no frame of the library in pytest's report of the failure."""
    (tmp_path / "test_storm.py").write_text(
        _STORM
        + textwrap.dedent(
            """
            import pytest

            @pytest.mark.max_compilations(1, fail_fast=True)
            def test_storm():
                storm()
            """
        )
    )
    done = _run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "keras_xla_guard.pytest_plugin",
            "-p",
            "no:cacheprovider",
        ],
        tmp_path,
    )
    assert done.returncode == 1, done.stdout[-3000:]
    failure = done.stdout[done.stdout.index("_ test_storm _") : done.stdout.index("short test summary")]
    assert not [line for line in failure.splitlines() if "keras_xla_guard" in line and ".py" in line]
    assert not [name for name in _INTERNALS if name in failure]
    assert "E       " + _HEAD + " Each one, with what changed and the fix:" in failure
