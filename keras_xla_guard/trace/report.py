"""Plain, frozen result types shared by the analysis, the guard and the CLI."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from keras_xla_guard.trace._text import format_report
from keras_xla_guard.trace.compiles import CompileRecord

if TYPE_CHECKING:
    from keras_xla_guard.signatures.explanation import Explanation

__all__ = ["CoverageReport", "OpStat", "ProgramStat"]

# The figures a profiled window measures. A report that is not ok measured
# none of them: they are `None` (`null` in JSON), not a 0 that reads like a
# measurement.
_MEASURED_FIELDS = (
    "xla_time_s", "non_xla_op_time_s", "xla_time_fraction", "xla_executions", "compilations",
    "compile_time_s", "compile_thread_time_s", "input_pipeline_time_s", "eager_overhead_s", "tracing_time_s", "guard_op_time_s",
    "transfer_time_s",
)


@dataclass(frozen=True)
class OpStat:
    """Time spent in one plain TF op (a kernel that did not run under XLA).

    Attributes:
        op_type: The TF op type, e.g. `"MatMul"`.
        op_name: The op's full name, e.g. `"sequential/dense/MatMul"`.
        self_time_s: Total self time in seconds (children excluded), summed
            over all executions and threads.
        count: Number of executions in the profiled window.
    """

    op_type: str
    op_name: str
    self_time_s: float
    count: int

    def to_dict(self) -> dict[str, Any]:
        """Returns the op as a JSON-serializable dict."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ProgramStat:
    """Device time of one XLA program in a window, read from an accelerator plane.

    Attributes:
        program: The program as xprof names its module events:
            `"<hlo_module>(<program_id>)"`, or the module alone.
        runs: Its runs (launches) in the window.
        time_s: Device time of those runs (first kernel's start to last
            kernel's end of each run), summed.
    """

    program: str
    runs: int
    time_s: float

    def to_dict(self) -> dict[str, Any]:
        """Returns the program's figures as a JSON-serializable dict."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class CoverageReport:
    """XLA coverage of one profiled window (or one trace).

    Times are seconds of thread time summed over threads (see
    docs/coverage.md), but for `compile_time_s`, which is wall-clock. A
    report that is not ok (`status` `"skipped"`, `"failed"` or
    `"incomplete"`) measured nothing: its trace figures, `xla_time_s`
    through `transfer_time_s` below, are `None` and its `programs` empty,
    whatever the constructor got.

    Attributes:
        status: `"ok"`, `"skipped"` (no trace taken, see `reason`),
            `"failed"` (the guard failed; training went on) or
            `"incomplete"` (training stopped inside the window: its
            partial trace, in `trace_paths`, is no measurement).
        reason: Why the window was skipped or failed; `""` when ok.
        epoch: 0-based epoch index of the window; `None` for a trace
            analyzed on its own.
        steps_profiled: Training steps inside the window; `None` when
            unknown.
        window_wall_s: Wall time of the window; for a standalone trace the
            profiler's own start-to-stop time.
        trace_paths: The `.xplane.pb` file(s) the report was computed from.
        hosts: Host names of those files.
        time_base: `"host"` (CPU threads) or `"device"` (accelerator planes).
        xla_time_s: Time inside XLA executables (launch included).
        non_xla_op_time_s: Self time of plain TF op kernels outside XLA.
        xla_time_fraction: `xla / (xla + non_xla_op)`, in [0, 1]; 0 when no
            op time was recorded.
        xla_executions: Number of XLA executable launches.
        compilations: Number of XLA programs compiled in the window.
        compile_time_s: Wall-clock time spent compiling them: the union,
            over host threads, of their compile events, so never more than
            the window; the sum of `compile_table`'s `compile_s`.
        compile_thread_time_s: The compile time summed over threads (XLA:CPU
            compiles one program on several threads at once, so this can
            exceed `compile_time_s` and the window), with the compiling
            kernels' own time.
        compiled_modules: Names of the compiled HLO modules.
        top_non_xla_ops: Up to `top_k` plain TF ops by self time.
        input_pipeline_time_s: tf.data iterator and input-op time.
        eager_overhead_s: Python/eager dispatch time (`Eager*`, `TFE_*`).
        tracing_time_s: tf.function tracing (graph building) time.
        guard_op_time_s: Time of the guard's own signature-recording ops
            (the `xla_guard_tap` name scope), kept out of
            `non_xla_op_time_s` and the fraction.
        transfer_time_s: Device time of memory copies and memsets
            (host-to-device, device-to-host, device-to-device), kept out of
            both sides of the fraction; `None` when times are host times
            (`time_base="host"`), where there is no device to copy to.
        programs: Each XLA program's runs and device time, longest first;
            when every XLA kernel named its program they add up to
            `xla_executions` and `xla_time_s`. Empty when times are host
            times (a device plane's "XLA Modules" lines, as TPU planes
            have them, are counted but not listed).
        notes: Human-readable remarks (diagnoses, caveats).
        distinct_signatures: Different input signatures (structure,
            shapes, dtypes) of the epoch's training steps; `None` when
            signatures were not tracked.
        new_signatures: Signatures first seen in this epoch of the run.
        expected_compilations: XLA compilations the new signatures cause
            (one each); `None` when XLA is off or signatures not tracked.
        signature_explanations: What varied, the closest earlier signature
            of new ones, and the recommended fix.
        signatures_unavailable: Why the signature figures are `None` when
            tracking was on but could not record this epoch's batches
            (e.g. an unsupported Keras version); `None` otherwise.
        compile_table: Every XLA compilation of the window (program, HLO
            module, wall-clock compile time, step, input signature) and,
            with signatures tracked, every new signature that ran without
            one (`cache_hit=True`); see `CompileRecord`.
        cache_hits: New signatures that found their program already
            compiled (by `warm_up` or TensorFlow's persistent cache);
            `None` when signatures were not tracked or XLA is off.
        persistent_cache: The directory of the persistent compilation
            cache when one is set (TensorFlow's `TF_XLA_FLAGS`, JAX's
            `jax_compilation_cache_dir`); `None` otherwise.
        backend: The framework whose guard took the window (`"tensorflow"`,
            `"jax"`); `None` for a trace analyzed on its own. Under JAX
            every step is one XLA program, so `xla_time_fraction` is 1.0
            by construction and the outputs show the programs' share of
            the window instead.
    """

    status: str = "ok"
    reason: str = ""
    epoch: int | None = None
    steps_profiled: int | None = None
    window_wall_s: float | None = None
    trace_paths: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()
    time_base: str = "host"
    xla_time_s: float | None = 0.0
    non_xla_op_time_s: float | None = 0.0
    xla_time_fraction: float | None = 0.0
    xla_executions: int | None = 0
    compilations: int | None = 0
    compile_time_s: float | None = 0.0
    compile_thread_time_s: float | None = 0.0
    compiled_modules: tuple[str, ...] = ()
    top_non_xla_ops: tuple[OpStat, ...] = ()
    input_pipeline_time_s: float | None = 0.0
    eager_overhead_s: float | None = 0.0
    tracing_time_s: float | None = 0.0
    guard_op_time_s: float | None = 0.0
    transfer_time_s: float | None = None
    programs: tuple[ProgramStat, ...] = ()
    notes: tuple[str, ...] = field(default=())
    distinct_signatures: int | None = None
    new_signatures: int | None = None
    expected_compilations: int | None = None
    signature_explanations: "tuple[Explanation, ...]" = ()
    signatures_unavailable: str | None = None
    compile_table: tuple[CompileRecord, ...] = ()
    cache_hits: int | None = None
    persistent_cache: str | None = None
    backend: str | None = None

    def __post_init__(self) -> None:
        if self.status != "ok":
            for name in _MEASURED_FIELDS:
                object.__setattr__(self, name, None)
            object.__setattr__(self, "programs", ())

    @property
    def trace_path(self) -> str | None:
        """The first trace file of the report, or `None` if none was taken."""
        return self.trace_paths[0] if self.trace_paths else None

    @property
    def ok(self) -> bool:
        """Whether the report holds measurements (`status == "ok"`)."""
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        """Returns the report as a JSON-serializable dict.

        Tuples become lists, `top_non_xla_ops` a list of dicts, and
        `trace_path` is included for convenience. A report that is not ok
        has `None` trace figures, `null` here, while the signature figures,
        which do not come from the trace, keep their values.
        """
        d = dataclasses.asdict(self)
        d["trace_paths"] = list(self.trace_paths)
        d["hosts"] = list(self.hosts)
        d["compiled_modules"] = list(self.compiled_modules)
        d["top_non_xla_ops"] = [op.to_dict() for op in self.top_non_xla_ops]
        d["programs"] = [p.to_dict() for p in self.programs]
        d["notes"] = list(self.notes)
        d["signature_explanations"] = [e.to_dict() for e in self.signature_explanations]
        d["compile_table"] = [c.to_dict() for c in self.compile_table]
        d["trace_path"] = self.trace_path
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CoverageReport":
        """Rebuilds a report from `to_dict()` output (e.g. read back from JSON).

        Args:
            data: A dict as `to_dict()` returns it; keys that are not
                fields (`trace_path`) are ignored.

        Returns:
            An equal report.

        Raises:
            ValueError: If `data` is not a dict or its op or program table
                is malformed.

        Example:

        ```python
        import json
        from keras_xla_guard import CoverageReport

        report = CoverageReport(xla_time_s=0.9, non_xla_op_time_s=0.1, xla_time_fraction=0.9)
        assert CoverageReport.from_dict(json.loads(json.dumps(report.to_dict()))) == report
        ```
        """
        if not isinstance(data, dict):
            raise ValueError(f"`data` must be a dict from CoverageReport.to_dict(). Received: data={data!r}")
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        from keras_xla_guard.signatures.explanation import Explanation

        for key in ("trace_paths", "hosts", "compiled_modules", "notes"):
            if key in values:
                values[key] = tuple(values[key])
        try:
            values["top_non_xla_ops"] = tuple(OpStat(**op) for op in values.get("top_non_xla_ops", ()))
        except TypeError as e:
            raise ValueError(f"`top_non_xla_ops` holds a malformed op ({e}). Received: data={data!r}") from None
        try:
            values["programs"] = tuple(ProgramStat(**p) for p in values.get("programs", ()))
        except TypeError as e:
            raise ValueError(f"`programs` holds a malformed program ({e}). Received: data={data!r}") from None
        values["signature_explanations"] = tuple(
            Explanation.from_dict(e) for e in values.get("signature_explanations", ())
        )
        try:
            values["compile_table"] = tuple(CompileRecord(**c) for c in values.get("compile_table", ()))
        except TypeError as e:
            raise ValueError(f"`compile_table` holds a malformed row ({e}). Received: data={data!r}") from None
        return cls(**values)

    def __str__(self) -> str:
        return format_report(self)
