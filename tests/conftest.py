"""Shared fixtures: small real Keras models trained with the real profiler.

Training is the slow part of this suite, so each distinct training run is
done once per session and shared by every test that only reads its results.
The helpers they use live in `_helpers.py`.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# tests/jax needs Keras on JAX, and Keras fixes its backend once per process:
# `make test-jax` runs it in a pytest of its own with KERAS_BACKEND=jax (in a
# venv without TensorFlow); every other test needs the TensorFlow backend.
collect_ignore = [] if os.environ.get("KERAS_BACKEND") == "jax" else ["jax"]

from _helpers import Fit, fit_with_guard  # noqa: E402 - after the TF log level


@pytest.fixture(scope="session")
def jit_fit(tmp_path_factory: pytest.TempPathFactory) -> Fit:
    """3 epochs, jit_compile=True, epoch 1 profiled."""
    return fit_with_guard(True, tmp_path_factory.mktemp("jit") / "xla_guard", profile_epochs=(1,))


@pytest.fixture(scope="session")
def plain_fit(tmp_path_factory: pytest.TempPathFactory) -> Fit:
    """3 epochs, jit_compile=False, epoch 1 profiled."""
    return fit_with_guard(False, tmp_path_factory.mktemp("plain") / "xla_guard", profile_epochs=(1,))
