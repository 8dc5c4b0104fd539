"""Griffe extension: the shared `Args:` text and signature in the API reference.

`XlaGuardCallback`, `XlaGuard`, `XlaGuardEngine` and `GuardConfig` write
`{config_args}` in their docstrings and fill it at import
(`keras_xla_guard.runtime.config.config_args_doc`), which also puts
`GuardConfig`'s fields in place of the adapters' `**fields` in their
signatures. Griffe reads docstrings and signatures from the source, so this
does the same before they are rendered.
"""

from __future__ import annotations

from typing import Any

import griffe

from keras_xla_guard.runtime.config import config_fields, fill_config_args


class ConfigArgs(griffe.Extension):
    """Fills `{config_args}` in every class docstring that holds it."""

    def on_class_members(self, *, cls: griffe.Class, **kwargs: Any) -> None:
        if cls.docstring is None or "{config_args}" not in cls.docstring.value:
            return
        cls.docstring.value = fill_config_args(cls.docstring.value)
        init = cls.members.get("__init__")
        if not isinstance(init, griffe.Function) or "fields" not in init.parameters:
            return
        params = [p for p in init.parameters if p.kind is not griffe.ParameterKind.var_keyword]
        named = {p.name for p in params}
        fields = [
            griffe.Parameter(
                name, annotation=annotation, kind=griffe.ParameterKind.keyword_only, default=repr(default)
            )
            for name, annotation, default in config_fields()
            if name not in named
        ]
        at = next(
            (i for i, p in enumerate(params) if p.kind is griffe.ParameterKind.keyword_only), len(params)
        )
        for param in fields:
            param.function = init
        init.parameters = griffe.Parameters(*params[:at], *fields, *params[at:])
