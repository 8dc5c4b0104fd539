"""keras-xla-guard: measure whether XLA really runs your TensorFlow training.

Public API (imported lazily: `import keras_xla_guard` does not import
TensorFlow or Keras; the first use of a name that needs them does):

- `XlaGuardCallback`: Keras callback that profiles selected epochs.
- `XlaGuard`: the same guard for custom training loops.
- `XlaGuardEngine`: the engine behind it, for other adapters.
- `analyze_trace`, `analyze_xspace`, `combine_reports`: pure trace analysis.
- `CoverageReport`, `OpStat`, `format_report`: result types.
- `doctor`, `explain`, `model_verdicts`: why XLA does or does not run
  (`DoctorReport`, `ExplainReport`, `Verdict`).
- `Signature`, `SignatureTracker`, `EpochSignatures`, `recommend_buckets`,
  `bucketing_code`: input signatures and recompilation explanations;
  `pad_to_buckets`: the tf.data fix.
- `compare`, `CompareReport`: is XLA worth it for this model? Each mode
  trained and measured on the same batches, with a verdict.
- Errors: `XlaGuardError` and its subclasses, `XlaGuardWarning`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from keras_xla_guard._version import __version__
from keras_xla_guard.errors import (
    BackendError,
    ProfilerBusyError,
    RecompilationLimitError,
    TraceError,
    TraceNotFoundError,
    TraceParseError,
    TraceTooLargeError,
    XlaGuardError,
    XlaGuardWarning,
)
from keras_xla_guard.report import CoverageReport, OpStat, format_report

if TYPE_CHECKING:
    from keras_xla_guard.analysis import analyze_trace, analyze_xspace, combine_reports
    from keras_xla_guard.callback import XlaGuardCallback
    from keras_xla_guard.comparison import CompareReport, compare
    from keras_xla_guard.data import pad_to_buckets
    from keras_xla_guard.diagnosis import DoctorReport, Verdict, doctor
    from keras_xla_guard.engine import XlaGuardEngine
    from keras_xla_guard.explainer import ExplainReport, explain, model_verdicts
    from keras_xla_guard.loop import XlaGuard
    from keras_xla_guard.signatures import (
        EpochSignatures,
        Signature,
        SignatureTracker,
        bucketing_code,
        recommend_buckets,
    )

__all__ = [
    "BackendError",
    "CompareReport",
    "CoverageReport",
    "DoctorReport",
    "EpochSignatures",
    "ExplainReport",
    "OpStat",
    "ProfilerBusyError",
    "RecompilationLimitError",
    "Signature",
    "SignatureTracker",
    "TraceError",
    "TraceNotFoundError",
    "TraceParseError",
    "TraceTooLargeError",
    "Verdict",
    "XlaGuard",
    "XlaGuardCallback",
    "XlaGuardEngine",
    "XlaGuardError",
    "XlaGuardWarning",
    "__version__",
    "analyze_trace",
    "analyze_xspace",
    "bucketing_code",
    "combine_reports",
    "compare",
    "doctor",
    "explain",
    "format_report",
    "model_verdicts",
    "pad_to_buckets",
    "recommend_buckets",
]

_LAZY = {
    "XlaGuard": "keras_xla_guard.loop",
    "XlaGuardCallback": "keras_xla_guard.callback",
    "XlaGuardEngine": "keras_xla_guard.engine",
    "CompareReport": "keras_xla_guard.comparison",
    "compare": "keras_xla_guard.comparison",
    "analyze_trace": "keras_xla_guard.analysis",
    "analyze_xspace": "keras_xla_guard.analysis",
    "combine_reports": "keras_xla_guard.analysis",
    "DoctorReport": "keras_xla_guard.diagnosis",
    "Verdict": "keras_xla_guard.diagnosis",
    "doctor": "keras_xla_guard.diagnosis",
    "ExplainReport": "keras_xla_guard.explainer",
    "explain": "keras_xla_guard.explainer",
    "model_verdicts": "keras_xla_guard.explainer",
    "EpochSignatures": "keras_xla_guard.signatures",
    "Signature": "keras_xla_guard.signatures",
    "SignatureTracker": "keras_xla_guard.signatures",
    "bucketing_code": "keras_xla_guard.signatures",
    "recommend_buckets": "keras_xla_guard.signatures",
    "pad_to_buckets": "keras_xla_guard.data",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'keras_xla_guard' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
