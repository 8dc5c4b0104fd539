"""Tests for the public API surface in keras_xla_guard/__init__.py."""

from __future__ import annotations

import importlib
import pkgutil

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
