"""Tests for the public API surface in keras_xla_guard/__init__.py."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import keras_xla_guard


def test_every_public_name_resolves_after_all_submodules_are_imported():
    """Each name in __all__ resolves, and no submodule shadows a public function."""
    for info in pkgutil.iter_modules(keras_xla_guard.__path__):
        if info.name not in ("demo",):
            importlib.import_module(f"keras_xla_guard.{info.name}")
    for name in keras_xla_guard.__all__:
        value = getattr(keras_xla_guard, name)
        assert value is not None, name
        assert not isinstance(value, type(keras_xla_guard)) or name == "__version__", name
    assert callable(keras_xla_guard.doctor)
    assert callable(keras_xla_guard.explain)
    assert sorted(dir(keras_xla_guard)) == sorted(keras_xla_guard.__all__)


def test_the_stub_is_the_one_table_of_public_names():
    """__all__ is exactly the stub's names; each lives where the stub says and re-exports under its own name."""
    stub = ast.parse((Path(keras_xla_guard.__file__).with_suffix(".pyi")).read_text())
    table = {}
    for node in stub.body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                assert alias.asname == alias.name, ast.dump(node)  # `X as X`: a re-export for checkers
                table[alias.name] = node.module
    assert keras_xla_guard.__all__ == sorted(table)
    assert len(table) == len(keras_xla_guard.__all__) == len(set(keras_xla_guard.__all__))
    for name, module in table.items():
        assert getattr(keras_xla_guard, name) is getattr(importlib.import_module(module), name), name


def test_importing_the_package_reads_the_table_without_importing_the_modules_behind_it():
    """`import keras_xla_guard` imports none of the modules the table names (only _version)."""
    code = (
        "import sys, keras_xla_guard as k\n"
        "mods = {m for m in sys.modules if m.startswith('keras_xla_guard.')}\n"
        "print(sorted(mods))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['keras_xla_guard._version']"


def test_an_unknown_name_is_an_attribute_error_naming_it():
    """A name not in the table raises AttributeError with the module and the name."""
    with pytest.raises(AttributeError, match="module 'keras_xla_guard' has no attribute 'nope'"):
        keras_xla_guard.nope  # noqa: B018 - the attribute access is the test
