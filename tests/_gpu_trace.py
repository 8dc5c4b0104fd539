"""Raw GPU traces shaped like what the TF profiler saves, built event by event.

No GPU is needed: the layout follows the writers' source.

- Device plane `/device:GPU:<n>`, one line per CUDA stream named
  `Stream #<id>(<event types>)`, line timestamps in ns
  (`xla/backends/profiler/gpu/cupti_collector.cc`: `GetDeviceXLineName`,
  `CreateXEvent`). Kernels carry `kernel_details` (a ref stat),
  `correlation_id` and `context_id`; memory copies `memcpy_details`
  (`kind_src:... kind_dst:... size:... dest:... async:...`), memsets
  `memset_details`; an event's annotation stack adds `tf_op` (the
  outermost annotation's name) and each annotation's keys.
- XLA's GPU annotations (`xla/backends/gpu/runtime/annotation.cc`):
  `XlaModule:#hlo_module=<name>,program_id=<id>#` around a program's
  thunks, `Thunk:#name=<op_name>,hlo_op=<instr>,unique_hlo_op_id=<id>#`
  around each; so an XLA kernel carries `hlo_module`, `program_id` and
  `hlo_op`, and `tf_op` of the TF op that launched the program.
- Host side: CUPTI's driver-API events (`cuLaunchKernel`,
  `cuMemcpyHtoDAsync_v2`, with `correlation_id` and `device_id`) land on
  the launching thread's line of `/host:CPU` (TF merges the CUPTI host
  plane into it before saving); the step marker is the guard's
  `train` TraceMe with `step_num` and `_r=1`. XLA's GPU executable runs
  each program execution inside a TraceMe `<module>:XLA GPU module`
  (`GpuExecutable::ExecuteAsyncOnStreamImpl`,
  `xla/service/gpu/gpu_executable.cc`), which holds its driver calls.
- TensorFlow 2.21's host layout of a `jit_compile=True` Keras step
  (`layout="tf"`): the Python thread runs `EagerExecute` >
  `EagerLocalExecute: __inference_*` > `EagerKernelExecute` >
  `KernelAndDeviceFunc::Run` > `FunctionRun` (`id`, `_r=1`, `_pt=2`, `_p`;
  `tensorflow/core/common_runtime/function.cc`, `_r` without `step_num`);
  a `tf_Compute` thread runs `ExecutorState::Process` (`id`, `iter_num`,
  `_ct=2`, `_c`; `tensorflow/core/common_runtime/executor.cc`) >
  `ExecutorState::ProcessAsync::Start` (`name`, `kernel_type`) >
  `PjRtStreamExecutorLoadedExecutable::Execute`
  (`xla/pjrt/pjrt_stream_executor_client.cc`) > the module TraceMe > the
  driver calls; TF's own GPU kernels are launched inside their
  `<op_name>:<OpType>` TraceMe on the same thread. JAX
  (`_gpu_shapes.py`): `layout="jax_se"`, the StreamExecutor client, whose
  `PjitFunction(<fn>)` (jaxlib `pjit.cc`) >
  `PjRtStreamExecutorLoadedExecutable::Execute` > `...::ExecuteHelper` >
  the module TraceMe run on the Python thread, or `layout="jax_tfrt"`,
  the TFRT GPU client, whose `TfrtGpuExecutable::ExecuteHelper` on the
  Python thread hands the execution to a worker thread's `execute_fn`,
  which holds the module TraceMe (`xla/pjrt/gpu/tfrt/tfrt_gpu_executable.cc`).
  `layout="bare"` writes driver calls alone (a host tracer that recorded
  no TraceMe).
- CUDA graphs (XLA command buffers): a graph launch is one host event
  `cuGraphLaunch (CudaGraph:<id>)` (`CreateXEvent` appends the graph id to
  a CudaGraph driver callback's name) whose correlation id every kernel of
  that run shares; each kernel has `cuda_graph_id` and
  `cuda_graph_node_id` (`SetEventGraphId` in
  `xla/backends/profiler/gpu/cupti_buffer_events.cc`) and the annotation
  of the launch: XLA's module annotation and the `CommandBufferThunk`'s,
  whose instruction is the `call` `CommandBufferScheduling` outlines the
  commands into (`xla/service/gpu/transforms/command_buffer_scheduling.cc`,
  `xla/backends/gpu/runtime/command_buffer_thunk.cc`). With CUPTI's
  graph-level tracing a whole run is one event `CudaGraphExec:<id>` with
  `cuda_graph_exec_id` and no `kernel_details`
  (`AddGraphTraceActivityEvent`).
- XLA's detailed annotation (`--xla_gpu_trace_annotation_level=1`,
  `MakeInstructionName` in `xla/backends/gpu/runtime/annotation.cc`) adds
  `op_type`, `op_name`, `source_file`, `source_line` and `shape` to each
  thunk's keys; the basic one has `name` (the op's scope under the module
  annotation's `prefix`).
- The collector's caps: dropped events are counted in the XSpace's
  `warnings` ("Detected GPU events dropped on <host>: Profiler has
  collected N driver events and M device events. K events dropped because
  total device(activity) events reaches max.",
  `CuptiTraceCollectorImpl::ReportNumEventsIfDropped` in
  `xla/backends/profiler/gpu/cupti_collector.cc`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from keras_xla_guard.trace.xplane import xplane_pb2

PS_PER_US = 1_000_000
T0_NS = 1_700_000_000_000_000_000
_REF_STATS = frozenset({"kernel_details", "memcpy_details", "memset_details", "tf_op", "context_id"})
KERNEL_DETAILS = "regs:32 static_shared:0 dynamic_shared:0 grid:8,1,1 block:128,1,1 occ_pct:50.0"


class _Plane:
    """One plane with get-or-create metadata, as `XPlaneBuilder` keeps it."""

    def __init__(self, space: Any, name: str, pid: int) -> None:
        self.plane = space.planes.add(id=pid, name=name)
        self._events: dict[str, int] = {}
        self._stats: dict[str, int] = {}
        self._lines: dict[int, Any] = {}

    def event_id(self, name: str) -> int:
        if name not in self._events:
            mid = self._events[name] = len(self._events) + 1
            self.plane.event_metadata[mid].id = mid
            self.plane.event_metadata[mid].name = name
        return self._events[name]

    def stat_id(self, name: str) -> int:
        if name not in self._stats:
            sid = self._stats[name] = len(self._stats) + 1
            self.plane.stat_metadata[sid].id = sid
            self.plane.stat_metadata[sid].name = name
        return self._stats[name]

    def line(self, line_id: int, name: str) -> Any:
        if line_id not in self._lines:
            self._lines[line_id] = self.plane.lines.add(
                id=line_id, display_id=line_id, name=name, timestamp_ns=T0_NS
            )
        return self._lines[line_id]

    def event(self, line: Any, event_name: str, start_us: float, dur_us: float, **stats: Any) -> None:
        event = line.events.add(
            metadata_id=self.event_id(event_name),
            offset_ps=round(start_us * PS_PER_US),
            duration_ps=round(dur_us * PS_PER_US),
        )
        for key, value in stats.items():
            stat = event.stats.add(metadata_id=self.stat_id(key))
            if key in _REF_STATS:
                stat.ref_value = self.stat_id(str(value))
            elif isinstance(value, str):
                stat.str_value = value
            else:
                stat.int64_value = int(value)


LAYOUTS = ("tf", "jax_se", "jax_tfrt", "bare")
TF_FUNCTION = "__inference_one_step_on_data_812"


@dataclass
class GpuTrace:
    """A trace being built: host threads and a GPU's streams.

    Attributes:
        with_steps: Whether `step` writes the guard's step marker.
        group_ids: Whether device events carry xprof's `group_id` (a trace
            saved after xprof grouped it).
        layout: Whose host events: `"tf"`, `"jax_se"`, `"jax_tfrt"` or
            `"bare"` (see the module docstring).
    """

    with_steps: bool = True
    group_ids: bool = False
    layout: str = "tf"
    space: Any = field(init=False)
    host: _Plane = field(init=False)
    gpu: _Plane = field(init=False)
    _correlation: int = field(init=False, default=0)
    _step: int = field(init=False, default=0)
    _context: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        assert self.layout in LAYOUTS, self.layout
        self.space = xplane_pb2().XSpace(hostnames=["gpu-host"])
        self.host = _Plane(self.space, "/host:CPU", 0)
        self.gpu = _Plane(self.space, "/device:GPU:0", 1)
        self.python = self.host.line(4242, "python")
        # The thread whose driver calls launch the device work.
        self.launcher = {
            "tf": lambda: self.host.line(4243, "tf_Compute/4243"),
            "jax_tfrt": lambda: self.host.line(4244, "tfrt_gpu_execute/4244"),
        }.get(self.layout, lambda: self.python)()

    def step(self, step: int, start_us: float, dur_us: float, function: str = "train_step") -> None:
        """Opens step `step` on the host: the marker when `with_steps`, and the layout's call of the step.

        Under `layout="tf"` the call is the eager chain to `FunctionRun`
        (`_r=1`, no `step_num`), under JAX `PjitFunction(<function>)`, each
        from 1 us into the step to 10 us before its end.
        """
        self._step = step
        if self.with_steps:
            self.host.event(self.python, "train", start_us, dur_us, step_num=step, _r=1)
        if self.layout == "tf":
            self._context += 1
            names = ("EagerExecute", f"EagerLocalExecute: {TF_FUNCTION}", "EagerKernelExecute")
            for depth, name in enumerate((*names, "KernelAndDeviceFunc::Run")):
                self.host.event(
                    self.python, name, start_us + 1 + 0.1 * depth, max(dur_us - 11 - 0.2 * depth, 0.5)
                )
            self.host.event(
                self.python,
                "FunctionRun",
                start_us + 1.5,
                max(dur_us - 12, 0.1),
                id=self._context,
                _r=1,
                _pt=2,
                _p=self._context,
            )
        elif self.layout in ("jax_se", "jax_tfrt"):
            self.host.event(self.python, f"PjitFunction({function})", start_us + 1, max(dur_us - 11, 0.1))

    def execution(self, module: str, start_us: float, dur_us: float) -> None:
        """One run of program `module`: its host events, the `<module>:XLA GPU module` TraceMe from
        `start_us` for `dur_us` innermost, which must hold the run's driver calls."""
        line = self.launcher
        if self.layout == "tf":
            self.host.event(
                line,
                "ExecutorState::Process",
                start_us - 0.3,
                dur_us + 0.6,
                id=self._context,
                iter_num=0,
                _ct=2,
                _c=self._context,
            )
            self.host.event(
                line,
                "ExecutorState::ProcessAsync::Start",
                start_us - 0.2,
                dur_us + 0.4,
                name="StatefulPartitionedCall",
                kernel_type="StatefulPartitionedCall",
            )
            self.host.event(line, "PjRtStreamExecutorLoadedExecutable::Execute", start_us - 0.1, dur_us + 0.2)
        elif self.layout == "jax_se":
            self.host.event(line, "PjRtStreamExecutorLoadedExecutable::Execute", start_us - 0.2, dur_us + 0.4)
            self.host.event(
                line, "PjRtStreamExecutorLoadedExecutable::ExecuteHelper", start_us - 0.1, dur_us + 0.2
            )
        elif self.layout == "jax_tfrt":
            self.host.event(self.python, "TfrtGpuExecutable::ExecuteHelper", start_us - 0.5, 0.4)
            self.host.event(line, "execute_fn", start_us - 0.1, dur_us + 0.2)
        if self.layout != "bare":
            self.host.event(line, f"{module}:XLA GPU module", start_us, dur_us)

    def _launch(self, name: str, at_us: float) -> dict[str, Any]:
        self._correlation += 1
        self.host.event(self.launcher, name, at_us, 0.5, correlation_id=self._correlation, device_id=0)
        stats: dict[str, Any] = {"correlation_id": self._correlation, "context_id": "$$1"}
        if self.group_ids:
            stats["group_id"] = self._step
        return stats

    def xla_kernel(
        self,
        stream: int,
        kernel: str,
        launch_us: float,
        start_us: float,
        dur_us: float,
        *,
        module: str,
        program: int,
        hlo_op: str,
        tf_op: str,
        **annotation: Any,
    ) -> None:
        """Kernel `kernel` of XLA program `module` (`program_id` `program`), more annotation keys in `annotation`."""
        stats = self._launch("cuLaunchKernel", launch_us)
        self.gpu.event(
            self._stream(stream, "Kernel"),
            kernel,
            start_us,
            dur_us,
            **stats,
            kernel_details=KERNEL_DETAILS,
            tf_op=tf_op,
            hlo_module=module,
            program_id=program,
            hlo_op=hlo_op,
            **annotation,
        )

    def graph_launch(self, graph_id: int, launch_us: float) -> dict[str, Any]:
        """The host's launch of CUDA graph `graph_id`; its stats go to each kernel of the run."""
        self._correlation += 1
        self.host.event(
            self.launcher,
            f"cuGraphLaunch (CudaGraph:{graph_id})",
            launch_us,
            0.5,
            correlation_id=self._correlation,
            device_id=0,
            cuda_graph_id=graph_id,
        )
        stats: dict[str, Any] = {"correlation_id": self._correlation, "context_id": "$$1"}
        if self.group_ids:
            stats["group_id"] = self._step
        return stats

    def graph_kernel(
        self,
        launch: dict[str, Any],
        stream: int,
        name: str,
        start_us: float,
        dur_us: float,
        *,
        graph_id: int,
        node: int,
        **annotation: Any,
    ) -> None:
        """A kernel inside a run of CUDA graph `graph_id` (node `node`), under the launch's annotation."""
        self.gpu.event(
            self._stream(stream, "Kernel"),
            name,
            start_us,
            dur_us,
            **launch,
            kernel_details=KERNEL_DETAILS,
            cuda_graph_id=graph_id,
            cuda_graph_node_id=node,
            **annotation,
        )

    def graph_exec(
        self,
        launch: dict[str, Any],
        stream: int,
        start_us: float,
        dur_us: float,
        *,
        graph_id: int,
        **annotation: Any,
    ) -> None:
        """A whole run of CUDA graph `graph_id` as CUPTI's graph-level tracing records it."""
        self.gpu.event(
            self._stream(stream, "CudaGraph"),
            f"CudaGraphExec:{graph_id}",
            start_us,
            dur_us,
            **launch,
            cuda_graph_exec_id=graph_id,
            **annotation,
        )

    def host_event(self, name: str, start_us: float, dur_us: float) -> None:
        """A TraceMe on the host thread (e.g. XLA's note that it ran command buffers op by op)."""
        self.host.event(self.python, name, start_us, dur_us)

    def tf_kernel(
        self, stream: int, name: str, launch_us: float, start_us: float, dur_us: float, *, tf_op: str | None
    ) -> None:
        """A kernel of a plain TF op (`tf_op` is `<op_name>:<OpType>`), launched inside its op's TraceMe under
        `layout="tf"`; with `tf_op=None` a kernel that ran under no annotation at all."""
        if self.layout == "tf" and tf_op is not None:
            self.host.event(self.launcher, tf_op, launch_us - 0.1, 0.7)
        stats = self._launch("cuLaunchKernel", launch_us)
        annotation = {} if tf_op is None else {"tf_op": tf_op}
        self.gpu.event(
            self._stream(stream, "Kernel"),
            name,
            start_us,
            dur_us,
            **stats,
            kernel_details=KERNEL_DETAILS,
            **annotation,
        )

    def memcpy(
        self, stream: int, kind: str, launch_us: float, start_us: float, dur_us: float, **annotation: Any
    ) -> None:
        """A memory copy, `kind` `H2D`, `D2H` or `D2D`, under `annotation` stats."""
        api = {"H2D": "cuMemcpyHtoDAsync_v2", "D2H": "cuMemcpyDtoHAsync_v2", "D2D": "cuMemcpyDtoDAsync_v2"}
        src, dst = {
            "H2D": ("pageable", "device"),
            "D2H": ("device", "pageable"),
            "D2D": ("device", "device"),
        }[kind]
        stats = self._launch(api[kind], launch_us)
        self.gpu.event(
            self._stream(stream, f"Memcpy{kind}"),
            f"Memcpy{kind}",
            start_us,
            dur_us,
            **stats,
            memcpy_details=f"kind_src:{src} kind_dst:{dst} size:65536 dest:0 async:1",
            **annotation,
        )

    def memset(self, stream: int, launch_us: float, start_us: float, dur_us: float) -> None:
        """A memset."""
        stats = self._launch("cuMemsetD32Async", launch_us)
        self.gpu.event(
            self._stream(stream, "Memset"),
            "Memset",
            start_us,
            dur_us,
            **stats,
            memset_details="kind:device num_bytes:4096 async:1",
        )

    def _stream(self, stream: int, kind: str) -> Any:
        line = self.gpu.line(stream, f"Stream #{stream}")
        kinds = set(line.name[line.name.index("(") + 1 : -1].split(",")) if "(" in line.name else set()
        kinds.add(kind)
        line.name = f"Stream #{stream}({','.join(sorted(kinds))})"
        return line

    def drop_device_events_after(self, at_us: float) -> None:
        """Removes the device events that start after `at_us`, their host launches kept.

        What the collector leaves when it reached its cap on device events,
        or when the profiler stopped before the device ran the launches.
        """
        for line in self.gpu.plane.lines:
            kept = [type(e)() for e in line.events if e.offset_ps <= at_us * PS_PER_US]
            originals = [e for e in line.events if e.offset_ps <= at_us * PS_PER_US]
            for copy, original in zip(kept, originals):
                copy.CopyFrom(original)
            del line.events[:]
            line.events.extend(kept)

    def derived_module_line(self, stream: int, runs: list[tuple[str, float, float, int]]) -> None:
        """The per-stream "XLA Modules" line xprof derives: (name, start, duration, group)."""
        line = self.gpu.line(0xDEADBEEF + stream, f"XLA Modules - from #{stream}")
        for name, start, dur, group in runs:
            self.gpu.event(line, name, start, dur, group_id=group)

    def write(self, path: Path) -> Path:
        """Writes the trace, each line's events sorted by start (longest first), as the profiler saves
        them (`SortXSpace`, `xla/tsl/profiler/utils/xplane_utils.cc`); returns `path`."""
        for plane in self.space.planes:
            for line in plane.lines:
                events = sorted(line.events, key=lambda e: (e.offset_ps, -e.duration_ps))
                copies = [type(e)() for e in events]
                for copy, event in zip(copies, events):
                    copy.CopyFrom(event)
                del line.events[:]
                line.events.extend(copies)
        path.write_bytes(self.space.SerializeToString())
        return path


MODULE = "a_inference_one_step_on_data_812__.37"
PROGRAM = 37
STEP_US = 1000.0


def jit_fit(steps: int = 6, **kwargs: Any) -> GpuTrace:
    """A `jit_compile=True` step per marker: batch copied in, one XLA program of 3 kernels,
    a plain TF kernel, a memset and the loss copied out.

    Per step by construction: one XLA run of 3x40 us kernels 5 us apart
    (busy 120 us, span 130 us), plain op `BiasAdd` 25 us, transfers
    30 + 4 + 8 = 42 us.
    """
    trace = GpuTrace(**kwargs)
    for step in range(steps):
        base = step * STEP_US
        trace.step(step, base, 900)
        trace.memcpy(1, "H2D", base + 5, base + 20, 30, tf_op="IteratorGetNext:IteratorGetNext")
        trace.execution(MODULE, base + 9.5, 3.5)
        for k in range(3):
            trace.xla_kernel(
                7,
                f"loop_fusion_{k}",
                base + 10 + k,
                base + 60 + 45 * k,
                40,
                module=MODULE,
                program=PROGRAM,
                hlo_op=f"fusion.{k}",
                tf_op="StatefulPartitionedCall:StatefulPartitionedCall",
            )
        trace.memset(7, base + 14, base + 200, 4)
        trace.tf_kernel(
            7,
            "void Eigen::internal::EigenMetaKernel",
            base + 15,
            base + 220,
            25,
            tf_op="model/dense/BiasAdd:BiasAdd",
        )
        trace.memcpy(
            7,
            "D2H",
            base + 16,
            base + 260,
            8,
            tf_op="StatefulPartitionedCall:StatefulPartitionedCall",
            hlo_module=MODULE,
            program_id=PROGRAM,
            hlo_op="copy.3",
        )
    return trace


GRAPH_ID = 3
# The call instruction `CommandBufferScheduling` outlines a command buffer into.
COMMAND_BUFFER_CALL = "call.3"


def command_buffer_fit(steps: int = 6, *, graph_level: bool = False, annotated: bool = True) -> GpuTrace:
    """`jit_fit`'s steps with the program's 3 kernels run as one CUDA graph (an XLA command buffer).

    The kernels carry the graph launch's annotation (module, program, the
    command buffer's call instruction); with `graph_level` the run is one
    `CudaGraphExec` event spanning them (130 us). Without `annotated` the
    graph carries no XLA annotation at all. The plain `BiasAdd` kernel,
    memset and copies are as in `jit_fit`.
    """
    trace = GpuTrace()
    annotation = (
        dict(
            tf_op="StatefulPartitionedCall:StatefulPartitionedCall",
            hlo_module=MODULE,
            program_id=PROGRAM,
            hlo_op=COMMAND_BUFFER_CALL,
        )
        if annotated
        else {}
    )
    for step in range(steps):
        base = step * STEP_US
        trace.step(step, base, 900)
        trace.memcpy(1, "H2D", base + 5, base + 20, 30, tf_op="IteratorGetNext:IteratorGetNext")
        trace.execution(MODULE, base + 9.5, 1.5)
        launch = trace.graph_launch(GRAPH_ID, base + 10)
        if graph_level:
            trace.graph_exec(launch, 7, base + 60, 130, graph_id=GRAPH_ID, **annotation)
        else:
            for k in range(3):
                trace.graph_kernel(
                    launch,
                    7,
                    f"loop_fusion_{k}",
                    base + 60 + 45 * k,
                    40,
                    graph_id=GRAPH_ID,
                    node=k + 1,
                    **annotation,
                )
        trace.memset(7, base + 14, base + 200, 4)
        trace.tf_kernel(
            7,
            "void Eigen::internal::EigenMetaKernel",
            base + 15,
            base + 220,
            25,
            tf_op="model/dense/BiasAdd:BiasAdd",
        )
    return trace


NCCL_XLA = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
NCCL_TF = "ncclKernel_AllReduce_RING_LL_Sum_float"


def collective_fit(steps: int = 6) -> GpuTrace:
    """`jit_fit`'s program with an asynchronous all-reduce on its own stream, and a TF all-reduce.

    Per step by construction: the program's 3 compute kernels on stream 7
    (60-100, 105-145, 150-190 us: one run of 130 us), its NCCL all-reduce
    (`all-reduce-start.1`) on stream 12 from 100 to 180 us, 70 us of it
    beside compute kernels; then TF's own all-reduce of a gradient outside
    XLA (`CollectiveReduceV2`, an NCCL kernel) on stream 12, 20 us; and the
    plain `BiasAdd` kernel, 25 us. Collectives: 100 us per step.
    """
    trace = GpuTrace()
    for step in range(steps):
        base = step * STEP_US
        trace.step(step, base, 900)
        trace.execution(MODULE, base + 9.5, 3.5)
        for k in range(3):
            trace.xla_kernel(
                7,
                f"loop_fusion_{k}",
                base + 10 + k,
                base + 60 + 45 * k,
                40,
                module=MODULE,
                program=PROGRAM,
                hlo_op=f"fusion.{k}",
                tf_op="StatefulPartitionedCall:StatefulPartitionedCall",
            )
        trace.xla_kernel(
            12,
            NCCL_XLA,
            base + 12,
            base + 100,
            80,
            module=MODULE,
            program=PROGRAM,
            hlo_op="all-reduce-start.1",
            tf_op="StatefulPartitionedCall:StatefulPartitionedCall",
        )
        trace.tf_kernel(
            12, NCCL_TF, base + 14, base + 300, 20, tf_op="Adam/CollectiveReduceV2:CollectiveReduceV2"
        )
        trace.tf_kernel(
            7,
            "void Eigen::internal::EigenMetaKernel",
            base + 15,
            base + 220,
            25,
            tf_op="model/dense/BiasAdd:BiasAdd",
        )
    return trace


def annotated_fit(steps: int = 6, *, detailed: bool) -> GpuTrace:
    """`jit_fit`'s program with XLA's thunk annotations: basic (`prefix`, `name`) or detailed.

    Kernel k of each step is 40 us: `fusion.0` is the Dense layer's MatMul,
    `fusion.1` and `fusion.2` its BiasAdd (two kernels of one framework op).
    """
    trace = GpuTrace()
    ops = (
        ("fusion.0", "dense/MatMul", "MatMul"),
        ("fusion.1", "dense/BiasAdd", "BiasAdd"),
        ("fusion.2", "dense/BiasAdd", "BiasAdd"),
    )
    for step in range(steps):
        base = step * STEP_US
        trace.step(step, base, 900)
        trace.execution(MODULE, base + 9.5, 3.5)
        for k, (hlo_op, name, op_type) in enumerate(ops):
            keys: dict[str, Any] = {"prefix": "model", "name": name}
            if detailed:
                keys.update(op_type=op_type, op_name=f"model/{name}", shape="f32[8,1]")
            trace.xla_kernel(
                7,
                f"loop_fusion_{k}",
                base + 10 + k,
                base + 60 + 45 * k,
                40,
                module=MODULE,
                program=PROGRAM,
                hlo_op=hlo_op,
                tf_op="StatefulPartitionedCall:StatefulPartitionedCall",
                **keys,
            )
    return trace
