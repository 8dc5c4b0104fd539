"""Figures read from a trace without the package: the raw XSpace proto and
xprof's own tools, to check the package's figures against."""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Every run of a compiled XLA:CPU program is one span of this name on the
# host plane, whatever op launched it (TF 2.21, see tf-trace-facts.md; TF 2.20
# emits only `ThunkExecutor::Execute` spans, several per run, so the tests
# that use this oracle run in `make test`, on TF 2.21).
XLA_CPU_RUN = "CpuExecutable::ExecuteAsyncOnStream"


def _host_spans(trace: str | Path, name: str) -> list[Any]:
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(Path(trace).read_bytes())
    spans = []
    for plane in space.planes:
        if plane.name != "/host:CPU":
            continue
        ids = {i for i, m in plane.event_metadata.items() if m.name == name}
        spans += [e for line in plane.lines for e in line.events if e.metadata_id in ids]
    return spans


def span_seconds(trace: str | Path, name: str) -> float:
    """Total duration of the host-plane spans called `name` in `trace`, in seconds."""
    return sum(e.duration_ps for e in _host_spans(trace, name)) * 1e-12


def count_xla_runs(trace: str | Path) -> int:
    """XLA:CPU program runs in `trace`, counted from the raw proto."""
    return len(_host_spans(trace, XLA_CPU_RUN))


def xla_run_seconds(trace: str | Path) -> float:
    """Total duration of the XLA:CPU program runs in `trace`, in seconds."""
    return span_seconds(trace, XLA_CPU_RUN)


def xprof_tool(trace: str | Path, tool: str) -> Any:
    """xprof's `tool` output for `trace`, parsed from JSON.

    xprof caches the op stats of a profile directory in that directory
    (`ALL_HOSTS.op_stats_v2.pb`) and answers any later trace there from the
    cache: two traces converted in one directory get the first one's
    tables. So each conversion reads a copy of `trace` in a directory of its
    own.
    """
    from xprof.convert import raw_to_tool_data

    with tempfile.TemporaryDirectory(prefix="xprof_") as folder:
        copy = Path(folder) / Path(trace).name
        shutil.copyfile(trace, copy)
        data, _ = raw_to_tool_data.xspace_to_tool_data([str(copy)], tool, {})
    return json.loads(data)


def xprof_table(trace: str | Path, tool: str, index: int = 0) -> list[dict[str, Any]]:
    """The rows of table `index` of xprof's `tool` (a DataTable list or one table) for `trace`."""
    data = xprof_tool(trace, tool)
    table = data[index] if isinstance(data, list) else data
    cols = [c["id"] for c in table["cols"]]
    return [dict(zip(cols, [c.get("v") for c in row["c"]])) for row in table["rows"]]


def xprof_op_rows(trace: str | Path) -> list[dict[str, Any]]:
    """xprof's framework_op_stats rows for `trace` (times in microseconds)."""
    return xprof_table(trace, "framework_op_stats")


def xprof_device_lines(trace: str | Path) -> dict[str, list[tuple[str, float]]]:
    """The lines xprof's trace viewer shows for `/device:` planes: name -> [(event, duration us)].

    These include the lines xprof derives when it loads a trace ("XLA
    Modules - from #<stream>", "Steps", ...), after it grouped the events.
    """
    events = xprof_tool(trace, "trace_viewer")["traceEvents"]
    processes = {
        e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
    }
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in events
        if e.get("ph") == "M" and e.get("name") == "thread_name"
    }
    lines: dict[str, list[tuple[str, float]]] = {}
    for e in events:
        if e.get("ph") == "X" and processes.get(e.get("pid"), "").startswith("/device:"):
            lines.setdefault(threads[(e["pid"], e["tid"])], []).append((e["name"], float(e["dur"])))
    return lines


def xprof_device_op_rows(trace: str | Path) -> dict[tuple[str, str], dict[str, Any]]:
    """xprof's framework_op_stats rows that ran on a device, by (type, operation), IDLE left out."""
    return {
        (r["type"], r["operation"]): r
        for r in xprof_op_rows(trace)
        if r.get("host_or_device") == "Device" and r["type"] != "IDLE"
    }


# The oracle's own reading of the trace facts (tf-trace-facts.md), written
# apart from keras_xla_guard/trace/classify.py so that a rule dropped there
# shows up as a disagreement here: the spans of one XLA program run, the
# compile-phase spans, and the TF kernels that can launch a program.
_EXEC_SPAN = re.compile(r"^(?:\w*Executable::Execute\w*|ThunkExecutor::Execute|PjRt\w*::Execute\w*)$")
_THUNK_SPAN = "ThunkExecutor::Execute"
_COMPILE_SPAN = re.compile(r"Compiler::|^HLO passes|^JitCompiler::Compile")
_TF_KERNEL = re.compile(r"^[A-Za-z0-9._][A-Za-z0-9_.\-/>]*:[A-Za-z_]\w*$")
_ASYNC_KERNEL = "ExecutorState::ProcessAsync::Start"
_CALL = "EagerLocalExecute: __inference_"


@dataclass(frozen=True)
class RawXla:
    """XLA time and launches of a trace, summed from its raw events.

    Attributes:
        seconds: Launch kernels' durations (a TF kernel enclosing a program
            run's span, innermost, each once); for a launch that also
            compiled, only its runs' spans; an executable span outside any
            kernel, its own duration; and for a `tf.function` call in which
            TF 2.20 dropped the kernel events, the extent of the loose thunk
            spans inside it.
        launches: How many launches that found.
    """

    seconds: float
    launches: int


def raw_xla(trace: str | Path) -> RawXla:
    """XLA time and launches of `trace`'s host plane, from the raw proto only."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(Path(trace).read_bytes())
    total_ps = launches = 0
    calls: list[tuple[int, int]] = []
    starts: list[int] = []
    loose: list[tuple[int, int]] = []
    for plane in space.planes:
        if plane.name != "/host:CPU":
            continue
        names = {i: m.name for i, m in plane.event_metadata.items()}
        kernel_type = {i for i, m in plane.stat_metadata.items() if m.name == "kernel_type"}
        for line in plane.lines:
            base = line.timestamp_ns * 1000
            kernels, runs, compiles = [], [], []
            for event in line.events:
                name = names[event.metadata_id]
                span = (event.offset_ps, event.offset_ps + event.duration_ps)
                if name.startswith(_CALL):
                    calls.append((base + span[0], base + span[1]))
                if _EXEC_SPAN.match(name):
                    runs.append((*span, name))
                elif _COMPILE_SPAN.search(name):
                    compiles.append(span)
                elif _TF_KERNEL.match(name) or (
                    name == _ASYNC_KERNEL and any(s.metadata_id in kernel_type for s in event.stats)
                ):
                    kernels.append(span)
            by_kernel: dict[tuple[int, int] | None, list[tuple[int, int, str]]] = {}
            for run in runs:
                around = [k for k in kernels if k[0] <= run[0] and run[1] <= k[1]]
                kernel = max(around, key=lambda k: (k[0], -k[1])) if around else None
                by_kernel.setdefault(kernel, []).append(run)
            for kernel, spans in by_kernel.items():
                if kernel is None:
                    for start, end, name in spans:
                        if name == _THUNK_SPAN:
                            loose.append((base + start, base + end))
                        else:
                            launches += 1
                            starts.append(base + start)
                            total_ps += end - start
                    continue
                launches += 1
                starts.append(base + kernel[0])
                if any(kernel[0] <= c[0] and c[1] <= kernel[1] for c in compiles):
                    outer = [
                        r
                        for r in spans
                        if not any(o is not r and o[0] <= r[0] and r[1] <= o[1] for o in spans)
                    ]
                    total_ps += sum(end - start for start, end, _ in outer)
                else:
                    total_ps += kernel[1] - kernel[0]
    for call_start, call_end in calls:
        if any(call_start <= s <= call_end for s in starts):
            continue
        inside = [(s, e) for s, e in loose if call_start <= s <= call_end]
        if inside:
            launches += 1
            total_ps += max(e for _, e in inside) - min(s for s, _ in inside)
    return RawXla(total_ps * 1e-12, launches)


def raw_fraction(trace: str | Path, non_xla_op_time_s: float) -> float:
    """The XLA share of op time with the XLA side from `raw_xla`."""
    xla = raw_xla(trace).seconds
    return xla / (xla + non_xla_op_time_s) if xla + non_xla_op_time_s else 0.0


def raw_figures(trace: str | Path, non_xla_op_time_s: float) -> tuple[float, int, float]:
    """`(xla_time_s, xla_executions, xla_time_fraction)` of `trace` as `raw_xla` reads them.

    Compare with `pytest.approx(..., rel=RAW_REL)`: both sides sum the same
    integer picoseconds, so only float rounding may differ.
    """
    raw = raw_xla(trace)
    return raw.seconds, raw.launches, raw_fraction(trace, non_xla_op_time_s)


# The tolerance of `raw_figures` comparisons: float rounding, nothing more.
RAW_REL = 1e-9


# What the oracle takes for an op run eagerly: TF 2.21's span of an eager
# execution, named for an op type, less function calls (`__inference_*`),
# Python functions, calls and the iterator plumbing around a loop.
_EAGER_SPAN = "EagerLocalExecute: "
_NOT_EAGER_OPS = frozenset(
    {
        "PartitionedCall",
        "StatefulPartitionedCall",
        "EagerPyFunc",
        "PyFunc",
        "PyFuncStateless",
        "IteratorGetNext",
        "AnonymousIteratorV3",
        "MakeIterator",
        "DeleteIterator",
        "OptionalGetValue",
        "OptionalHasValue",
        "IteratorGetNextAsOptional",
    }
)


def raw_eager_ops(trace: str | Path) -> tuple[int, dict[str, int]]:
    """The ops `trace` ran eagerly, from the raw proto: their spans' total duration (ps) and calls by type.

    Spans inside another counted span are not counted again.
    """
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(Path(trace).read_bytes())
    total, calls = 0, {}
    for plane in space.planes:
        if plane.name != "/host:CPU":
            continue
        types = {
            i: m.name[len(_EAGER_SPAN) :]
            for i, m in plane.event_metadata.items()
            if m.name.startswith(_EAGER_SPAN)
        }
        types = {i: t for i, t in types.items() if not t.startswith("__") and t not in _NOT_EAGER_OPS}
        for line in plane.lines:
            end = -1
            for e in sorted(line.events, key=lambda e: (e.offset_ps, -e.duration_ps)):
                if e.metadata_id in types and e.offset_ps >= end:
                    total += e.duration_ps
                    calls[types[e.metadata_id]] = calls.get(types[e.metadata_id], 0) + 1
                    end = e.offset_ps + e.duration_ps
    return total, calls


# ----------------------------------------------------------------- GPU traces

_TRANSFER_STATS = ("memcpy_details", "memset_details")
_TRANSFER_NAMES = ("Memcpy", "Memset", "CopyDeviceToDevice", "CopyHostToDevice", "CopyDeviceToHost")


def _device_events(space: Any) -> list[tuple[str, int, int, dict[str, Any], str]]:
    """`(plane, start ps, end ps, stats by name, event name)` of every event on a device plane's stream lines."""
    found = []
    for plane in space.planes:
        if not plane.name.startswith("/device:"):
            continue
        names = {i: m.name for i, m in plane.stat_metadata.items()}
        events = {i: m.name for i, m in plane.event_metadata.items()}
        for line in plane.lines:
            if not line.name.startswith("Stream"):
                continue
            base = line.timestamp_ns * 1000
            for e in line.events:
                stats = {}
                for s in e.stats:
                    kind = s.WhichOneof("value")
                    value = getattr(s, kind) if kind else None
                    stats[names.get(s.metadata_id)] = names.get(value) if kind == "ref_value" else value
                start = base + e.offset_ps
                found.append((plane.name, start, start + e.duration_ps, stats, events.get(e.metadata_id, "")))
    return found


def _is_transfer(stats: dict[str, Any], name: str) -> bool:
    return any(k in stats for k in _TRANSFER_STATS) or name.startswith(_TRANSFER_NAMES)


def with_hlo_protos(trace: str | Path, out: str | Path) -> Path:
    """Writes `trace` to `out` with an HLO module in its `/host:metadata` plane for every program its
    device kernels name, as XLA's metadata collector writes them (`Hlo Proto` stat of the program's
    event metadata, `xla/backends/profiler/cpu/metadata_collector.cc`): xprof's `hlo_stats` finds a
    kernel's HLO op only there. A real trace has them already; a synthetic one gets a module whose
    instructions are the kernels' `hlo_op` names (elementwise ops on one f32[8] value, enough for
    xprof to build it). Programs the trace already describes are left as they are.
    """
    from tensorflow.compiler.xla import xla_data_pb2
    from tensorflow.compiler.xla.service import hlo_pb2
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(Path(trace).read_bytes())
    programs: dict[tuple[str, int], set[str]] = {}
    for _, _, _, stats, _ in _device_events(space):
        if "hlo_module" in stats and "program_id" in stats:
            op = str(stats.get("hlo_op") or "").rsplit("::", 1)[-1]
            programs.setdefault((stats["hlo_module"], int(stats["program_id"])), set()).update({op} - {""})
    meta = next((p for p in space.planes if p.name == "/host:metadata"), None)
    if meta is None:
        meta = space.planes.add(id=max(p.id for p in space.planes) + 1, name="/host:metadata")
    stat_id = next((i for i, m in meta.stat_metadata.items() if m.name == "Hlo Proto"), None)
    if stat_id is None:
        stat_id = max(meta.stat_metadata, default=0) + 1
        meta.stat_metadata[stat_id].id = stat_id
        meta.stat_metadata[stat_id].name = "Hlo Proto"

    def shape(s: Any) -> None:
        s.element_type = xla_data_pb2.F32
        s.dimensions.append(8)
        s.is_dynamic_dimension.append(False)
        s.layout.minor_to_major.append(0)

    for (module, program), ops in programs.items():
        if program in meta.event_metadata:
            continue
        proto = hlo_pb2.HloProto()
        m = proto.hlo_module
        m.name, m.id, m.entry_computation_name, m.entry_computation_id = module, program, "main", 1
        comp = m.computations.add(name="main", id=1)
        param = comp.instructions.add(name="p0", opcode="parameter", id=1, parameter_number=0)
        shape(param.shape)
        for i, op in enumerate(sorted(ops), start=2):
            ins = comp.instructions.add(name=op, opcode="negate", id=i)
            shape(ins.shape)
            ins.operand_ids.append(i - 1)
        comp.root_id = len(ops) + 1
        shape(comp.program_shape.parameters.add())
        shape(comp.program_shape.result)
        comp.program_shape.parameter_names.append("p0")
        m.host_program_shape.CopyFrom(comp.program_shape)
        md = meta.event_metadata[program]
        md.id, md.name = program, f"{module}({program})"
        md.stats.add(metadata_id=stat_id, bytes_value=proto.SerializeToString())
    Path(out).write_bytes(space.SerializeToString())
    return Path(out)


def xprof_xla_kernel_us(trace: str | Path) -> float:
    """XLA kernel time as xprof's `hlo_stats` sums it (us): every row of an XLA program (program id
    not 0), less the rows of HLO ops that ran as memory copies or memsets (the package's transfers)."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(Path(trace).read_bytes())
    copies = {
        (str(int(stats["program_id"])), str(stats["hlo_op"]).rsplit("::", 1)[-1])
        for _, _, _, stats, name in _device_events(space)
        if _is_transfer(stats, name) and "hlo_op" in stats and "program_id" in stats
    }
    return sum(
        row["total_time"]
        for row in xprof_table(trace, "hlo_stats")
        if row["program_id"] != "0" and (row["program_id"], row["hlo_op_name"]) not in copies
    )


def xprof_kernel_us(trace: str | Path) -> float:
    """Every kernel's device time as xprof's `kernel_stats` sums it (us)."""
    return sum(row["total_duration_us"] for row in xprof_table(trace, "kernel_stats"))


def xprof_step_count(trace: str | Path) -> int:
    """The steps xprof's step grouping makes (`group_events.cc`, `xplane_to_step_events.cc`): the groups
    whose host events include a step marker, explicit (named `train...`, `test...` or `TraceContext`,
    no `/`) or given a `step_name` by the grouping (a user-defined root event)."""
    events = xprof_tool(trace, "trace_viewer")["traceEvents"]
    hosts = {
        e["pid"]
        for e in events
        if e.get("ph") == "M" and e.get("name") == "process_name" and e["args"]["name"].startswith("/host:")
    }
    return len(
        {
            e["args"]["group_id"]
            for e in events
            if e.get("ph") == "X"
            and e.get("pid") in hosts
            and "group_id" in e.get("args", {})
            and (
                "step_name" in e["args"]
                or (re.match(r"^(train|test|TraceContext)", e["name"]) and "/" not in e["name"])
            )
        }
    )


def raw_xla_busy_us(trace: str | Path) -> dict[str, float]:
    """Per device plane, the union of its XLA kernels' intervals (us), from the raw proto: events that
    carry `hlo_module` or `hlo_op` (or ran in a CUDA graph) and are no copy or memset."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(Path(trace).read_bytes())
    spans: dict[str, list[tuple[int, int]]] = {}
    for plane, start, end, stats, name in _device_events(space):
        xla = (
            "hlo_module" in stats
            or "hlo_op" in stats
            or "cuda_graph_id" in stats
            or "cuda_graph_exec_id" in stats
        )
        if xla and not _is_transfer(stats, name) and end > start:
            spans.setdefault(plane, []).append((start, end))
    busy = {}
    for plane, found in spans.items():
        total, reach = 0, -1
        for start, end in sorted(found):
            total += max(0, end - max(start, reach))
            reach = max(reach, end)
        busy[plane] = total * 1e-6
    return busy
