"""keras-xla-guard: measure whether XLA really runs your TensorFlow training.

Public API (imported lazily: `import keras_xla_guard` does not import
TensorFlow or Keras; the first use of a name that needs them does):

- `XlaGuardCallback`: Keras callback that profiles selected epochs.
- `XlaGuard`: the same guard for custom training loops.
- `XlaGuardEngine`: the engine behind it, for other adapters; `GuardConfig`
  (the arguments all three share), `ReportSink` (where figures go),
  `EpochRecord` (what a sink gets: one epoch's figures, complete) and
  `CallRecord` (one call of the test or predict function).
- `analyze_trace`, `analyze_xspace`, `combine_reports`: pure trace analysis.
- `CoverageReport`, `MeasuredFigures`, `OpStat`, `ProgramStat`, `TraceQuality`, `format_report`:
  result types.
- `doctor`, `explain`, `model_verdicts`: why XLA does or does not run
  (`DoctorReport`, `ExplainReport`, `Verdict`).
- `Signature`, `SignatureTracker`, `EpochSignatures`, `recommend_buckets`,
  `bucketing_code`: input signatures and recompilation explanations;
  `pad_to_buckets`: the padding fix (tf.data, or any examples: no TensorFlow needed).
- `warm_up`, `WarmUpReport`, `CompileRecord`: compile cost ahead of time
  (compile the known shapes before `fit`; the per-window compile table).
- `compare`, `CompareReport`, `ModeFigures`: is XLA worth it for this
  model? Each mode trained and measured on the same batches, with a verdict.
- `worker_coverage`, `WorkerCoverage`, `read_reports`: a multi-worker run's
  figures per worker, read from its run files.
- Errors: `XlaGuardError` and its subclasses, `XlaGuardWarning`.

Every public name is listed once, with its module, in `__init__.pyi`; this
module reads that table for `__all__` and the lazy imports. The modules
behind the names are internal and may move.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Any

from keras_xla_guard._version import __version__ as __version__


def _public_table() -> dict[str, str]:
    """Public name -> the module it lives in, read from `__init__.pyi`."""
    stub = Path(__file__).with_suffix(".pyi")
    table = {}
    for node in ast.parse(stub.read_text(encoding="utf-8"), filename=str(stub)).body:
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            for alias in node.names:
                table[alias.asname or alias.name] = node.module
    return table


_LAZY = _public_table()
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'keras_xla_guard' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return list(__all__)
