"""Griffe extension: the shared `Args:` text in the API reference.

`XlaGuardCallback`, `XlaGuard`, `XlaGuardEngine` and `GuardConfig` write
`{config_args}` in their docstrings and fill it at import
(`keras_xla_guard.runtime.config.config_args_doc`). Griffe reads docstrings
from the source, so this fills them the same way before they are rendered.
"""

from __future__ import annotations

from typing import Any

import griffe

from keras_xla_guard.runtime.config import fill_config_args


class ConfigArgs(griffe.Extension):
    """Fills `{config_args}` in every class docstring that holds it."""

    def on_class_members(self, *, cls: griffe.Class, **kwargs: Any) -> None:
        if cls.docstring is not None and "{config_args}" in cls.docstring.value:
            cls.docstring.value = fill_config_args(cls.docstring.value)
