"""keras-xla-guard: measure whether XLA really runs your TensorFlow training.

Public API (imported lazily: `import keras_xla_guard` does not import
TensorFlow or Keras; the first use of a name that needs them does):

- `XlaGuardCallback`: Keras callback that profiles selected epochs.
- `XlaGuard`: the same guard for custom training loops.
- `XlaGuardEngine`: the engine behind it, for other adapters; `GuardConfig`
  (the arguments all three share), `ReportSink` (where figures go) and
  `EpochRecord` (what a sink gets: one epoch's figures, complete).
- `analyze_trace`, `analyze_xspace`, `combine_reports`: pure trace analysis.
- `CoverageReport`, `OpStat`, `ProgramStat`, `TraceQuality`, `format_report`: result types.
- `doctor`, `explain`, `model_verdicts`: why XLA does or does not run
  (`DoctorReport`, `ExplainReport`, `Verdict`).
- `Signature`, `SignatureTracker`, `EpochSignatures`, `recommend_buckets`,
  `bucketing_code`: input signatures and recompilation explanations;
  `pad_to_buckets`: the tf.data fix.
- `warm_up`, `WarmUpReport`, `CompileRecord`: compile cost ahead of time
  (compile the known shapes before `fit`; the per-window compile table).
- `compare`, `CompareReport`, `ModeFigures`: is XLA worth it for this
  model? Each mode trained and measured on the same batches, with a verdict.
- Errors: `XlaGuardError` and its subclasses, `XlaGuardWarning`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from keras_xla_guard._version import __version__
from keras_xla_guard.errors import (
    BackendError,
    MissingDependencyError,
    ProfilerBusyError,
    RecompilationLimitError,
    RunFileError,
    TraceError,
    TraceNotFoundError,
    TraceParseError,
    TraceTooLargeError,
    XlaGuardError,
    XlaGuardWarning,
)
from keras_xla_guard.trace._text import format_report
from keras_xla_guard.trace.report import CoverageReport, OpStat, ProgramStat, TraceQuality

if TYPE_CHECKING:
    from keras_xla_guard.trace.analysis import analyze_trace, analyze_xspace, combine_reports
    from keras_xla_guard.callback import XlaGuardCallback
    from keras_xla_guard.comparison import CompareReport, ModeFigures, compare
    from keras_xla_guard.signatures.data import pad_to_buckets
    from keras_xla_guard.trace.compiles import CompileRecord
    from keras_xla_guard.warmup import WarmUpReport, warm_up
    from keras_xla_guard.diagnose.doctor import DoctorReport, doctor
    from keras_xla_guard.diagnose.verdict import Verdict
    from keras_xla_guard.runtime.config import GuardConfig
    from keras_xla_guard.runtime.engine import XlaGuardEngine
    from keras_xla_guard.runtime.sink import EpochRecord, ReportSink
    from keras_xla_guard.diagnose.explain import ExplainReport, explain, model_verdicts
    from keras_xla_guard.loop import XlaGuard
    from keras_xla_guard.signatures import (
        EpochSignatures,
        Explanation,
        Signature,
        SignatureTracker,
        bucketing_code,
        recommend_buckets,
    )

__all__ = [
    "BackendError",
    "CompareReport",
    "CompileRecord",
    "CoverageReport",
    "DoctorReport",
    "EpochRecord",
    "EpochSignatures",
    "ExplainReport",
    "Explanation",
    "GuardConfig",
    "MissingDependencyError",
    "ModeFigures",
    "OpStat",
    "ProfilerBusyError",
    "ProgramStat",
    "RecompilationLimitError",
    "ReportSink",
    "RunFileError",
    "Signature",
    "SignatureTracker",
    "TraceError",
    "TraceNotFoundError",
    "TraceParseError",
    "TraceQuality",
    "TraceTooLargeError",
    "Verdict",
    "WarmUpReport",
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
    "warm_up",
]

_LAZY = {
    "XlaGuard": "keras_xla_guard.loop",
    "XlaGuardCallback": "keras_xla_guard.callback",
    "XlaGuardEngine": "keras_xla_guard.runtime.engine",
    "CompareReport": "keras_xla_guard.comparison",
    "ModeFigures": "keras_xla_guard.comparison",
    "compare": "keras_xla_guard.comparison",
    "GuardConfig": "keras_xla_guard.runtime.config",
    "ReportSink": "keras_xla_guard.runtime.sink",
    "EpochRecord": "keras_xla_guard.runtime.sink",
    "analyze_trace": "keras_xla_guard.trace.analysis",
    "analyze_xspace": "keras_xla_guard.trace.analysis",
    "combine_reports": "keras_xla_guard.trace.analysis",
    "DoctorReport": "keras_xla_guard.diagnose.doctor",
    "Verdict": "keras_xla_guard.diagnose.verdict",
    "doctor": "keras_xla_guard.diagnose.doctor",
    "ExplainReport": "keras_xla_guard.diagnose.explain",
    "explain": "keras_xla_guard.diagnose.explain",
    "model_verdicts": "keras_xla_guard.diagnose.explain",
    "EpochSignatures": "keras_xla_guard.signatures",
    "Explanation": "keras_xla_guard.signatures",
    "Signature": "keras_xla_guard.signatures",
    "SignatureTracker": "keras_xla_guard.signatures",
    "bucketing_code": "keras_xla_guard.signatures",
    "recommend_buckets": "keras_xla_guard.signatures",
    "pad_to_buckets": "keras_xla_guard.signatures.data",
    "CompileRecord": "keras_xla_guard.trace.compiles",
    "WarmUpReport": "keras_xla_guard.warmup",
    "warm_up": "keras_xla_guard.warmup",
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
