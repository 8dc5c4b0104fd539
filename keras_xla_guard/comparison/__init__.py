"""Is XLA worth it for this model? `compare` trains each mode and answers.

`report.py` (result types and their text) and `core.py` (arithmetic) are
pure (no Keras, no TensorFlow); `batches.py` takes the data, `measure.py`
trains and measures each mode (the Keras adapter), `runner.py` holds
`compare` itself, `processes.py` and `_worker.py` run one mode per process
for the CLI. Names are imported lazily, like the package's.
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
