# The public API: every name `keras_xla_guard` exports and the module it
# lives in. This stub is the one table: type checkers read it, and
# `__init__.py` builds `__all__` and its lazy imports from it at import time,
# so a new public name is one line here (tests/test_init.py checks the rest).
# Everything else in the package is internal and may move.

from keras_xla_guard._version import __version__ as __version__
from keras_xla_guard.budget import BudgetCompilation as BudgetCompilation
from keras_xla_guard.budget import CompilationBudget as CompilationBudget
from keras_xla_guard.budget import max_compilations as max_compilations
from keras_xla_guard.callback import XlaGuardCallback as XlaGuardCallback
from keras_xla_guard.comparison import CompareReport as CompareReport
from keras_xla_guard.comparison import ModeFigures as ModeFigures
from keras_xla_guard.comparison import compare as compare
from keras_xla_guard.diagnose.doctor import DoctorReport as DoctorReport
from keras_xla_guard.diagnose.doctor import doctor as doctor
from keras_xla_guard.diagnose.explain import ExplainReport as ExplainReport
from keras_xla_guard.diagnose.explain import explain as explain
from keras_xla_guard.diagnose.explain import model_verdicts as model_verdicts
from keras_xla_guard.diagnose.verdict import Verdict as Verdict
from keras_xla_guard.distributed import WorkerCoverage as WorkerCoverage
from keras_xla_guard.distributed import read_reports as read_reports
from keras_xla_guard.distributed import worker_coverage as worker_coverage
from keras_xla_guard.errors import BackendError as BackendError
from keras_xla_guard.errors import CompilationsUnknownError as CompilationsUnknownError
from keras_xla_guard.errors import MissingDependencyError as MissingDependencyError
from keras_xla_guard.errors import ProfilerBusyError as ProfilerBusyError
from keras_xla_guard.errors import RecompilationLimitError as RecompilationLimitError
from keras_xla_guard.errors import RunFileError as RunFileError
from keras_xla_guard.errors import TraceError as TraceError
from keras_xla_guard.errors import TraceNotFoundError as TraceNotFoundError
from keras_xla_guard.errors import TraceParseError as TraceParseError
from keras_xla_guard.errors import TraceTooLargeError as TraceTooLargeError
from keras_xla_guard.errors import XlaGuardError as XlaGuardError
from keras_xla_guard.errors import XlaGuardWarning as XlaGuardWarning
from keras_xla_guard.loop import WatchedFunction as WatchedFunction
from keras_xla_guard.loop import XlaGuard as XlaGuard
from keras_xla_guard.runtime.compile_log import Compilation as Compilation
from keras_xla_guard.runtime.compile_log import EpochCompilations as EpochCompilations
from keras_xla_guard.runtime.config import GuardConfig as GuardConfig
from keras_xla_guard.runtime.engine import XlaGuardEngine as XlaGuardEngine
from keras_xla_guard.runtime.sink import CallRecord as CallRecord
from keras_xla_guard.runtime.sink import EpochRecord as EpochRecord
from keras_xla_guard.runtime.sink import ReportSink as ReportSink
from keras_xla_guard.signatures import EpochSignatures as EpochSignatures
from keras_xla_guard.signatures import Explanation as Explanation
from keras_xla_guard.signatures import Signature as Signature
from keras_xla_guard.signatures import SignatureTracker as SignatureTracker
from keras_xla_guard.signatures import bucketing_code as bucketing_code
from keras_xla_guard.signatures import recommend_buckets as recommend_buckets
from keras_xla_guard.signatures.data import pad_to_buckets as pad_to_buckets
from keras_xla_guard.trace._text import format_report as format_report
from keras_xla_guard.trace.analysis import analyze_trace as analyze_trace
from keras_xla_guard.trace.analysis import analyze_xspace as analyze_xspace
from keras_xla_guard.trace.analysis import combine_reports as combine_reports
from keras_xla_guard.trace.compiles import CompileRecord as CompileRecord
from keras_xla_guard.trace.report import CoverageReport as CoverageReport
from keras_xla_guard.trace.report import MeasuredFigures as MeasuredFigures
from keras_xla_guard.trace.report import OpStat as OpStat
from keras_xla_guard.trace.report import ProgramStat as ProgramStat
from keras_xla_guard.trace.report import TraceQuality as TraceQuality
from keras_xla_guard.warmup import WarmUpReport as WarmUpReport
from keras_xla_guard.warmup import warm_up as warm_up

__all__: list[str]
