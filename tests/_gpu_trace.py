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
  `train` TraceMe with `step_num` and `_r=1`.
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
            self._lines[line_id] = self.plane.lines.add(id=line_id, display_id=line_id, name=name,
                                                        timestamp_ns=T0_NS)
        return self._lines[line_id]

    def event(self, line: Any, name: str, start_us: float, dur_us: float, **stats: Any) -> None:
        event = line.events.add(metadata_id=self.event_id(name), offset_ps=round(start_us * PS_PER_US),
                                duration_ps=round(dur_us * PS_PER_US))
        for key, value in stats.items():
            stat = event.stats.add(metadata_id=self.stat_id(key))
            if key in _REF_STATS:
                stat.ref_value = self.stat_id(str(value))
            elif isinstance(value, str):
                stat.str_value = value
            else:
                stat.int64_value = int(value)


@dataclass
class GpuTrace:
    """A trace being built: a host thread and a GPU's streams.

    Attributes:
        with_steps: Whether `step` writes the guard's step marker.
        group_ids: Whether device events carry xprof's `group_id` (a trace
            saved after xprof grouped it).
    """

    with_steps: bool = True
    group_ids: bool = False
    space: Any = field(init=False)
    host: _Plane = field(init=False)
    gpu: _Plane = field(init=False)
    _correlation: int = field(init=False, default=0)
    _step: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.space = xplane_pb2().XSpace(hostnames=["gpu-host"])
        self.host = _Plane(self.space, "/host:CPU", 0)
        self.gpu = _Plane(self.space, "/device:GPU:0", 1)
        self.python = self.host.line(4242, "python")

    def step(self, step: int, start_us: float, dur_us: float) -> None:
        """Opens step `step` on the host (the marker, when `with_steps`)."""
        self._step = step
        if self.with_steps:
            self.host.event(self.python, "train", start_us, dur_us, step_num=step, _r=1)

    def _launch(self, name: str, at_us: float) -> dict[str, Any]:
        self._correlation += 1
        self.host.event(self.python, name, at_us, 0.5, correlation_id=self._correlation, device_id=0)
        stats: dict[str, Any] = {"correlation_id": self._correlation, "context_id": "$$1"}
        if self.group_ids:
            stats["group_id"] = self._step
        return stats

    def xla_kernel(self, stream: int, name: str, launch_us: float, start_us: float, dur_us: float, *,
                   module: str, program: int, hlo_op: str, tf_op: str) -> None:
        """A kernel of XLA program `module` (`program_id` `program`)."""
        stats = self._launch("cuLaunchKernel", launch_us)
        self.gpu.event(self._stream(stream, "Kernel"), name, start_us, dur_us, **stats,
                       kernel_details=KERNEL_DETAILS, tf_op=tf_op, hlo_module=module, program_id=program,
                       hlo_op=hlo_op)

    def tf_kernel(self, stream: int, name: str, launch_us: float, start_us: float, dur_us: float, *,
                  tf_op: str) -> None:
        """A kernel of a plain TF op (`tf_op` is `<op_name>:<OpType>`)."""
        stats = self._launch("cuLaunchKernel", launch_us)
        self.gpu.event(self._stream(stream, "Kernel"), name, start_us, dur_us, **stats,
                       kernel_details=KERNEL_DETAILS, tf_op=tf_op)

    def memcpy(self, stream: int, kind: str, launch_us: float, start_us: float, dur_us: float,
               **annotation: Any) -> None:
        """A memory copy, `kind` `H2D`, `D2H` or `D2D`, under `annotation` stats."""
        api = {"H2D": "cuMemcpyHtoDAsync_v2", "D2H": "cuMemcpyDtoHAsync_v2", "D2D": "cuMemcpyDtoDAsync_v2"}
        src, dst = {"H2D": ("pageable", "device"), "D2H": ("device", "pageable"),
                    "D2D": ("device", "device")}[kind]
        stats = self._launch(api[kind], launch_us)
        self.gpu.event(self._stream(stream, f"Memcpy{kind}"), f"Memcpy{kind}", start_us, dur_us, **stats,
                       memcpy_details=f"kind_src:{src} kind_dst:{dst} size:65536 dest:0 async:1", **annotation)

    def memset(self, stream: int, launch_us: float, start_us: float, dur_us: float) -> None:
        """A memset."""
        stats = self._launch("cuMemsetD32Async", launch_us)
        self.gpu.event(self._stream(stream, "Memset"), "Memset", start_us, dur_us, **stats,
                       memset_details="kind:device num_bytes:4096 async:1")

    def _stream(self, stream: int, kind: str) -> Any:
        line = self.gpu.line(stream, f"Stream #{stream}")
        kinds = set(line.name[line.name.index("(") + 1:-1].split(",")) if "(" in line.name else set()
        kinds.add(kind)
        line.name = f"Stream #{stream}({','.join(sorted(kinds))})"
        return line

    def derived_module_line(self, stream: int, runs: list[tuple[str, float, float, int]]) -> None:
        """The per-stream "XLA Modules" line xprof derives: (name, start, duration, group)."""
        line = self.gpu.line(0xDEADBEEF + stream, f"XLA Modules - from #{stream}")
        for name, start, dur, group in runs:
            self.gpu.event(line, name, start, dur, group_id=group)

    def write(self, path: Path) -> Path:
        """Writes the trace; returns `path`."""
        path.write_bytes(self.space.SerializeToString())
        return path


MODULE = "a_inference_one_step_on_data_812__.37"
PROGRAM = 37
STEP_US = 1000.0


def jit_fit(steps: int = 6, **kwargs: Any) -> GpuTrace:
    """A `jit_compile=True` step per marker: batch copied in, one XLA program of 3 kernels,
    a plain TF kernel, a memset and the loss copied out.

    Per step by construction: XLA run 3x40 us kernels 5 us apart (130 us),
    plain op `BiasAdd` 25 us, transfers 30 + 4 + 8 = 42 us.
    """
    trace = GpuTrace(**kwargs)
    for step in range(steps):
        base = step * STEP_US
        trace.step(step, base, 900)
        trace.memcpy(1, "H2D", base + 5, base + 20, 30, tf_op="IteratorGetNext:IteratorGetNext")
        for k in range(3):
            trace.xla_kernel(7, f"loop_fusion_{k}", base + 10 + k, base + 60 + 45 * k, 40, module=MODULE,
                             program=PROGRAM, hlo_op=f"fusion.{k}",
                             tf_op="StatefulPartitionedCall:StatefulPartitionedCall")
        trace.memset(7, base + 14, base + 200, 4)
        trace.tf_kernel(7, "void Eigen::internal::EigenMetaKernel", base + 15, base + 220, 25,
                        tf_op="model/dense/BiasAdd:BiasAdd")
        trace.memcpy(7, "D2H", base + 16, base + 260, 8, tf_op="StatefulPartitionedCall:StatefulPartitionedCall",
                     hlo_module=MODULE,
                     program_id=PROGRAM, hlo_op="copy.3")
    return trace
