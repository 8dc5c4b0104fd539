"""Shared JAX fits: a tiny Keras model on KERAS_BACKEND=jax, guarded and not.

Collected only with `KERAS_BACKEND=jax` (tests/conftest.py); `make test-jax`
runs this folder in its own process, in a venv without TensorFlow.
"""

from __future__ import annotations

import pytest
from _jax_helpers import JaxFit, fit_on_jax


@pytest.fixture(scope="session")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> JaxFit:
    """3 epochs under the guard, epoch 1 profiled, with jax.monitoring's own count beside it."""
    return fit_on_jax(tmp_path_factory.mktemp("jax_guarded") / "xla_guard", guard=True)


@pytest.fixture(scope="session")
def unguarded(tmp_path_factory: pytest.TempPathFactory) -> JaxFit:
    """The same fit without the guard."""
    return fit_on_jax(tmp_path_factory.mktemp("jax_plain") / "xla_guard", guard=False)
