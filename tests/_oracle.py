"""Figures read from a trace without the package: the raw XSpace proto and
xprof's own tools, to check the package's figures against."""

from __future__ import annotations

import json
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


def xprof_op_rows(trace: str | Path) -> list[dict[str, Any]]:
    """xprof's framework_op_stats rows for `trace` (times in microseconds)."""
    from xprof.convert import raw_to_tool_data

    data, _ = raw_to_tool_data.xspace_to_tool_data([str(trace)], "framework_op_stats", {})
    table = json.loads(data)[0]
    cols = [c["id"] for c in table["cols"]]
    return [dict(zip(cols, [c["v"] for c in row["c"]])) for row in table["rows"]]


def xprof_device_lines(trace: str | Path) -> dict[str, list[tuple[str, float]]]:
    """The lines xprof's trace viewer shows for `/device:` planes: name -> [(event, duration us)].

    These include the lines xprof derives when it loads a trace ("XLA
    Modules - from #<stream>", "Steps", ...), after it grouped the events.
    """
    from xprof.convert import raw_to_tool_data

    data, _ = raw_to_tool_data.xspace_to_tool_data([str(trace)], "trace_viewer", {})
    events = json.loads(data)["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events
                 if e.get("ph") == "M" and e.get("name") == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    lines: dict[str, list[tuple[str, float]]] = {}
    for e in events:
        if e.get("ph") == "X" and processes.get(e.get("pid"), "").startswith("/device:"):
            lines.setdefault(threads[(e["pid"], e["tid"])], []).append((e["name"], float(e["dur"])))
    return lines


def xprof_device_op_rows(trace: str | Path) -> dict[tuple[str, str], dict[str, Any]]:
    """xprof's framework_op_stats rows that ran on a device, by (type, operation), IDLE left out."""
    return {(r["type"], r["operation"]): r for r in xprof_op_rows(trace)
            if r.get("host_or_device") == "Device" and r["type"] != "IDLE"}
