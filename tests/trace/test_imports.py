"""The trace room is pure core: it imports no room above it, and no Keras or TensorFlow."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import keras_xla_guard.trace

TRACE = Path(keras_xla_guard.trace.__file__).parent
# What trace/ may import from the package: itself and the rooms below it.
_ALLOWED = (
    "keras_xla_guard.trace",
    "keras_xla_guard.errors",
    "keras_xla_guard._checks",
    "keras_xla_guard.signatures",
)


def _imports(path: Path) -> list[str]:
    """Every module `path` imports, at any depth (function-level imports included)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(node.module)
    return found


@pytest.mark.parametrize("path", sorted(TRACE.glob("*.py")), ids=lambda p: p.name)
def test_trace_modules_import_only_the_core_below_them(path):
    """A trace/ module imports the package only from trace, errors, _checks and signatures."""
    ours = [m for m in _imports(path) if m.split(".")[0] == "keras_xla_guard"]
    assert [m for m in ours if not m.startswith(_ALLOWED)] == []


@pytest.mark.parametrize("path", sorted(TRACE.glob("*.py")), ids=lambda p: p.name)
def test_trace_modules_import_no_framework(path):
    """No trace/ module imports Keras, TensorFlow, JAX or xprof, even inside a function."""
    third = {m.split(".")[0] for m in _imports(path)} - {"keras_xla_guard", "__future__"}
    assert third & {"keras", "tensorflow", "tf_keras", "jax", "xprof", "tensorboard"} == set()
