"""Is XLA worth it for this model? `compare` trains each mode and answers.

`report.py` and `core.py` are pure (no Keras, no TensorFlow); `runner.py`
is the Keras adapter, `_worker.py` runs one mode in its own process for the
CLI. Names are imported lazily, like the package's.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from keras_xla_guard.comparison.core import MODES
from keras_xla_guard.comparison.report import CompareReport, ModeFigures

if TYPE_CHECKING:
    from keras_xla_guard.comparison.runner import compare

__all__ = ["MODES", "CompareReport", "ModeFigures", "compare"]


def __getattr__(name: str) -> Any:
    if name != "compare":
        raise AttributeError(f"module 'keras_xla_guard.comparison' has no attribute {name!r}")
    value = importlib.import_module("keras_xla_guard.comparison.runner").compare
    globals()[name] = value
    return value
