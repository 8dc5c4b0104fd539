"""Plain, frozen result types shared by the analysis, the guard and the CLI."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from keras_xla_guard.trace._text import format_report
from keras_xla_guard.trace.compiles import CompileRecord

if TYPE_CHECKING:
    from keras_xla_guard.signatures.explanation import Explanation

__all__ = [
    "CoverageReport",
    "DeviceStat",
    "MeasuredFigures",
    "OpStat",
    "ProgramStat",
    "StepStat",
    "TraceQuality",
]

# The figures a profiled window measures. A report that is not ok measured
# none of them: they are `None` (`null` in JSON), not a 0 that reads like a
# measurement.
_MEASURED_FIELDS = (
    "xla_time_s",
    "non_xla_op_time_s",
    "xla_time_fraction",
    "xla_executions",
    "compilations",
    "compile_time_s",
    "compile_thread_time_s",
    "input_pipeline_time_s",
    "eager_overhead_s",
    "eager_op_time_s",
    "tracing_time_s",
    "guard_op_time_s",
    "transfer_time_s",
    "collective_time_s",
    "xla_run_span_s",
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
        layer: The Keras layer whose name scope holds the op (e.g.
            `"block_14_depthwise"`, its gradient ops included), or
            `"optimizer <name>"` for the optimizer's update; `None` when
            nothing tells (a trace analyzed without its model). The guard
            fills it in from the model it watches.
    """

    op_type: str
    op_name: str
    self_time_s: float
    count: int
    layer: str | None = None

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
        time_s: Device-busy time of those runs: each run's kernels, each
            moment once, summed over the runs.
        per_op: `False` when some of its kernels ran inside CUDA graphs
            (XLA command buffers): their time is the program's, but the
            trace does not say which op inside the graph it went to.
    """

    program: str
    runs: int
    time_s: float
    per_op: bool = True

    def to_dict(self) -> dict[str, Any]:
        """Returns the program's figures as a JSON-serializable dict."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class DeviceStat:
    """One device's figures in a window, read from its plane of the trace.

    Attributes:
        device: The plane's name, e.g. `"/device:GPU:0"`.
        host: The host whose trace holds the plane; `None` for a trace
            analyzed on its own.
        xla_time_s: Device-busy time of its XLA kernels: their union over
            the device's streams (each moment once).
        xla_run_span_s: Its XLA program runs' spans (first kernel's start
            to last kernel's end of each), summed: `xla_time_s` plus the
            idle gaps inside runs.
        non_xla_op_time_s: Time of its plain (non-XLA) kernels, the
            guard's own ops left out as in the totals.
        xla_time_fraction: `xla / (xla + non_xla_op)` on this device; 0
            when it ran neither.
        launches: Its XLA program executions.
        transfer_time_s: Time of its memory copies and memsets.
        collective_time_s: Time of its collective kernels.
    """

    device: str
    host: str | None
    xla_time_s: float
    xla_run_span_s: float
    non_xla_op_time_s: float
    xla_time_fraction: float
    launches: int
    transfer_time_s: float
    collective_time_s: float

    def to_dict(self) -> dict[str, Any]:
        """Returns the device's figures as a JSON-serializable dict."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class StepStat:
    """One step of a window: its time, how much of it XLA programs ran, and the gap.

    Attributes:
        step: The step number its marker carries (`step_num`).
        wall_s: The step marker's span on the host.
        busy_s: Time XLA programs ran in it, each moment once: on host
            traces the union of the programs' spans over host threads, on
            device traces the union of the XLA kernels of the step's
            program runs, on every device.
        idle_s: `wall_s` less `busy_s` (never below 0): the host gap, when
            no program of the step ran.
        launches: Program launches that began in the step (host traces),
            or the step's runs (device traces).
        transfer_s: Device time of the copies and memsets launched in the
            step; `None` on host traces.
    """

    step: int
    wall_s: float
    busy_s: float
    idle_s: float
    launches: int
    transfer_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Returns the step's figures as a JSON-serializable dict."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class TraceQuality:
    """A condition of the trace that limits what its figures can say.

    Attributes:
        code: Which condition: `"command_buffers"` (kernels inside CUDA
            graphs: no per-op attribution),
            `"command_buffers_off_while_profiling"` (XLA ran its command
            buffers op by op because the profiler was on),
            `"no_step_markers"` (no step marker: steps unknown),
            `"launches_unattributed"` (XLA kernels the host's launches tie
            to no program execution),
            `"collectives"` (communication kernels beside compute),
            `"events_dropped"` (the profiler hit its event caps),
            `"device_events_missing"` (launches with no device event: the
            device plane ends early) or `"profiler_errors"`.
        detail: What the trace showed, with its figures.
        cost: What it costs the report's figures.
        remedy: What restores the lost attribution in a diagnostic run
            (an `XLA_FLAGS` setting, a profiler option, step markers).
    """

    code: str
    detail: str
    cost: str
    remedy: str

    def to_dict(self) -> dict[str, Any]:
        """Returns the entry as a JSON-serializable dict."""
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        return f"{self.code}: {self.detail}"


@dataclass(frozen=True)
class MeasuredFigures:
    """The figures every measured (`ok`) report holds, typed without `None`.

    On a `CoverageReport` they are `float | None` (or `int | None`), since
    a report that is not ok measured nothing; `CoverageReport.measured()`
    returns them once the report is known to be ok, so code that reads them
    needs no `None` check of its own. Each means what the report's
    attribute of the same name means.

    Attributes:
        xla_time_fraction: `xla / (xla + non_xla_op)`, in [0, 1].
        xla_time_s: Time inside XLA executables.
        non_xla_op_time_s: Self time of plain TF op kernels outside XLA.
        xla_executions: Number of XLA executable launches.
        compilations: Number of XLA programs compiled in the window.
        compile_time_s: Wall-clock time spent compiling them.
        input_pipeline_time_s: tf.data iterator and input-op time.
    """

    xla_time_fraction: float
    xla_time_s: float
    non_xla_op_time_s: float
    xla_executions: int
    compilations: int
    compile_time_s: float
    input_pipeline_time_s: float


@dataclass(frozen=True)
class CoverageReport:
    """XLA coverage of one profiled window (or one trace).

    Times are seconds of thread time summed over threads (see
    docs/coverage.md), but for `compile_time_s`, which is wall-clock. A
    report that is not ok (`status` `"skipped"`, `"failed"` or
    `"incomplete"`) measured nothing: its trace figures, `xla_time_s`
    through `xla_run_span_s` below, and its `steps` are `None` and its
    `programs`, `devices`, `top_xla_ops` and `trace_quality` empty,
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
        xla_time_s: Time inside XLA executables: on host traces the
            launching kernels' thread time (launch included), on device
            traces the device-busy time of XLA kernels (each device's union
            over its streams, summed over devices).
        non_xla_op_time_s: Self time of plain TF op kernels outside XLA.
        xla_time_fraction: `xla / (xla + non_xla_op)`, in [0, 1]; 0 when no
            op time was recorded.
        xla_executions: Number of XLA executable launches: program
            executions (on device traces, the host's `XLA GPU module`
            events whose launches ran kernels on a device, per device).
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
        eager_overhead_s: Self time of eager execution spans (`Eager*`,
            `TFE_*`) on their threads. A `tf.function` call is such a span
            on the calling thread while the function's ops run on
            TensorFlow's pool threads, so this includes the time the
            caller waits for them, not dispatch cost alone. Ops run
            eagerly are booked here too (`eager_op_time_s`).
        eager_op_time_s: Of `eager_overhead_s`, the time of ops run
            eagerly, one at a time from Python (`EagerLocalExecute: <op>`
            spans of ops other than function calls and input plumbing,
            with their dispatch and kernel run; host thread time). The XLA
            share leaves them out, as xprof's op tables do: a window where
            they take 5% of the op time or more, counting them, gets a
            note. `None` where it was not measured (a report saved before
            the figure existed).
        tracing_time_s: tf.function tracing (graph building) time.
        guard_op_time_s: Time of the guard's own signature-recording ops
            (the `xla_guard_tap` name scope), kept out of
            `non_xla_op_time_s` and the fraction.
        transfer_time_s: Device time of memory copies and memsets
            (host-to-device, device-to-host, device-to-device), kept out of
            both sides of the fraction; `None` when times are host times
            (`time_base="host"`), where there is no device to copy to.
        collective_time_s: Device time of collective kernels (NCCL's, XLA's
            all-reduce, all-gather, reduce-scatter, all-to-all and
            collective-permute): those an XLA program ran are part of its
            runs and of `xla_time_s`, the others are in neither side of
            the fraction. `None` when times are host times.
        xla_run_span_s: The XLA program runs' spans on the device, first
            kernel's start to last kernel's end of each, summed:
            `xla_time_s` plus the idle gaps inside runs (never the share's
            numerator). `None` when times are host times.
        devices: Each device plane's figures (`DeviceStat`), in trace
            order; the report's device figures are their sums (labelled
            `totals_label` when there are several). Empty when times are
            host times.
        programs: Each XLA program's runs and device time, longest first;
            when every XLA kernel named its program they add up to
            `xla_executions` and, where no two programs ran at once,
            `xla_time_s`. Empty when times are host
            times (a device plane's "XLA Modules" lines, as TPU planes
            have them, are counted but not listed).
        top_xla_ops: Up to `top_k` ops inside XLA programs by device time
            (device traces): named by the framework op XLA's detailed
            annotation gives (`--xla_gpu_trace_annotation_level=1`), else
            by the op's scope (`name` under the module's `prefix`), else
            by the HLO instruction; kernels inside CUDA graphs are one
            `(command buffer)` row per program.
        steps: Per step marker of the window (the guard's, JAX's
            `StepTraceAnnotation`, any event with `_r` and `step_num`), in
            time order: wall time, the time XLA programs ran, the gap
            between them, launches and transfers (`StepStat`). `None` when
            the trace has no step marker: steps unknown, never invented
            (a `no_step_markers` entry of `trace_quality` says how to mark
            them).
        trace_quality: The conditions of the trace that limit what these
            figures can say (`TraceQuality`), each with its cost and the
            setting that restores attribution for a diagnostic run.
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
    # None by default: a report saved before the figure existed did not measure it.
    eager_op_time_s: float | None = None
    tracing_time_s: float | None = 0.0
    guard_op_time_s: float | None = 0.0
    transfer_time_s: float | None = None
    collective_time_s: float | None = None
    xla_run_span_s: float | None = None
    devices: tuple[DeviceStat, ...] = ()
    programs: tuple[ProgramStat, ...] = ()
    top_xla_ops: tuple[OpStat, ...] = ()
    steps: tuple[StepStat, ...] | None = None
    trace_quality: tuple[TraceQuality, ...] = ()
    notes: tuple[str, ...] = field(default=())
    distinct_signatures: int | None = None
    new_signatures: int | None = None
    expected_compilations: int | None = None
    signature_explanations: tuple[Explanation, ...] = ()
    signatures_unavailable: str | None = None
    compile_table: tuple[CompileRecord, ...] = ()
    cache_hits: int | None = None
    persistent_cache: str | None = None
    backend: str | None = None

    def __post_init__(self) -> None:
        if self.status != "ok":
            for name in _MEASURED_FIELDS:
                object.__setattr__(self, name, None)
            for name in ("programs", "devices", "top_xla_ops", "trace_quality"):
                object.__setattr__(self, name, ())
            object.__setattr__(self, "steps", None)

    @property
    def trace_path(self) -> str | None:
        """The first trace file of the report, or `None` if none was taken."""
        return self.trace_paths[0] if self.trace_paths else None

    @property
    def totals_label(self) -> str | None:
        """What the report's totals add up, when more than one device or host: e.g. `"summed over 2 devices"`.

        `None` for one device (or one host without devices). Every output
        shows it beside the totals.
        """
        hosts = max(len(set(self.hosts)), len({d.host for d in self.devices if d.host}))
        on = f" on {hosts} hosts" if hosts > 1 else ""
        if len(self.devices) > 1:
            return f"summed over {len(self.devices)} devices{on}"
        return f"summed over {hosts} hosts" if hosts > 1 else None

    @property
    def ok(self) -> bool:
        """Whether the report holds measurements (`status == "ok"`)."""
        return self.status == "ok"

    def measured(self) -> MeasuredFigures:
        """The figures of an ok report, typed without `None`.

        Returns:
            The report's `MeasuredFigures`.

        Raises:
            ValueError: If the report is not ok (it measured nothing), or
                is ok but was built without one of these figures.

        Example:

        ```python
        from keras_xla_guard import analyze_trace

        figures = analyze_trace("logs/xla_guard").measured()
        print(f"{figures.xla_time_fraction:.0%} of op time ran under XLA")
        ```
        """
        if not self.ok:
            raise ValueError(
                f"Only an ok report holds measured figures. Received: status={self.status!r}, "
                f"reason={self.reason!r}"
            )
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(MeasuredFigures)}
        for name, value in values.items():
            if value is None:
                raise ValueError(f"An ok report must hold every measured figure. Received: {name}=None")
        return MeasuredFigures(**values)

    def to_dict(self) -> dict[str, Any]:
        """Returns the report as a JSON-serializable dict.

        Tuples become lists, `top_non_xla_ops` a list of dicts, and
        `trace_path` and `totals` (`totals_label`) are included for
        convenience. A report that is not ok
        has `None` trace figures, `null` here, while the signature figures,
        which do not come from the trace, keep their values.
        """
        d = dataclasses.asdict(self)
        d["trace_paths"] = list(self.trace_paths)
        d["hosts"] = list(self.hosts)
        d["compiled_modules"] = list(self.compiled_modules)
        d["top_non_xla_ops"] = [op.to_dict() for op in self.top_non_xla_ops]
        d["programs"] = [p.to_dict() for p in self.programs]
        d["devices"] = [device.to_dict() for device in self.devices]
        d["totals"] = self.totals_label
        d["top_xla_ops"] = [op.to_dict() for op in self.top_xla_ops]
        d["steps"] = None if self.steps is None else [step.to_dict() for step in self.steps]
        d["trace_quality"] = [q.to_dict() for q in self.trace_quality]
        d["notes"] = list(self.notes)
        d["signature_explanations"] = [e.to_dict() for e in self.signature_explanations]
        d["compile_table"] = [c.to_dict() for c in self.compile_table]
        d["trace_path"] = self.trace_path
        if self.backend is None:
            # Unknown for a trace read on its own: such reports keep the layout they always had.
            del d["backend"]
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CoverageReport:
        """Rebuilds a report from `to_dict()` output (e.g. read back from JSON).

        Args:
            data: A dict as `to_dict()` returns it; keys that are not
                fields (`trace_path`, `totals`) are ignored. A report saved
                before steps could be unknown reads `"steps": []` as no
                steps measured.

        Returns:
            An equal report.

        Raises:
            ValueError: If `data` is not a dict or its op tables, program
                table, devices, steps or trace quality entries are
                malformed.

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
        for key in ("top_non_xla_ops", "top_xla_ops"):
            try:
                values[key] = tuple(OpStat(**op) for op in values.get(key, ()))
            except TypeError as e:
                raise ValueError(f"`{key}` holds a malformed op ({e}). Received: data={data!r}") from None
        try:
            steps = values.get("steps")
            values["steps"] = None if steps is None else tuple(StepStat(**step) for step in steps)
        except TypeError as e:
            raise ValueError(f"`steps` holds a malformed step ({e}). Received: data={data!r}") from None
        try:
            values["devices"] = tuple(DeviceStat(**device) for device in values.get("devices", ()))
        except TypeError as e:
            raise ValueError(f"`devices` holds a malformed device ({e}). Received: data={data!r}") from None
        try:
            values["trace_quality"] = tuple(TraceQuality(**q) for q in values.get("trace_quality", ()))
        except TypeError as e:
            raise ValueError(
                f"`trace_quality` holds a malformed entry ({e}). Received: data={data!r}"
            ) from None
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
            raise ValueError(
                f"`compile_table` holds a malformed row ({e}). Received: data={data!r}"
            ) from None
        return cls(**values)

    def __str__(self) -> str:
        return format_report(self)
