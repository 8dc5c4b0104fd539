"""On JAX too, a `fail_fast` budget stop shows the user's line, one line of the model hook, and the message."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from _helpers import REPO

_STORM = """
import sys
# Keras 3.10's CallbackList.__del__ can run on its own executor thread and print an ignored
# "cannot join current thread" traceback into the middle of ours: not the guard's output.
sys.unraisablehook = lambda unraisable: None
sys.path.insert(0, {tests!r})
import keras_xla_guard
from _padding import batches_of_one_length, sequence_model

with keras_xla_guard.max_compilations(1, fail_fast=True):
    sequence_model().fit(batches_of_one_length([5] * 8 + [7] * 8 + [9] * 8), epochs=1, verbose=0, shuffle=False)
"""


def test_a_fail_fast_stop_on_jax_leaves_the_librarys_frames_out(tmp_path):
    """Batches of lengths 5, 7, 9: the second train compilation stops fit; no frame of Keras' loop or the guard."""
    script = tmp_path / "storm.py"
    script.write_text(_STORM.format(tests=str(REPO / "tests")))
    env = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 1, done.stderr[-3000:]
    tail = done.stderr[done.stderr.index("Traceback (most recent call last):") :]
    frames = re.findall(r'^  File "([^"]+)", line \d+, in (\S+)', tail, re.MULTILINE)
    assert [(os.path.basename(f), fn) for f, fn in frames] == [
        ("storm.py", "<module>"),
        ("_model_hooks.py", "entry"),
    ]
    assert (
        "keras_xla_guard.errors.RecompilationLimitError: keras-xla-guard: XLA compilation 2 inside "
        "max_compilations(1) goes over it (fail_fast=True); stopped at the step that caused it."
    ) in tail
