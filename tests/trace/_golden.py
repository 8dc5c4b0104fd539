"""Real traces kept in the repository, and the reports the code before the
streaming reader (commit 9c25e2f) gave for them.

`data/*.xplane.pb.gz` are real TF 2.21 profiles: `plain` and `jit` from
`_traces.profiled_fit` (a tiny MLP, without and with `jit_compile`), `mlp`
from `benchmarks/bench_analyze.py --steps 8` (the benchmark's model),
`eager_loop` from `bench_analyze.py --eager-loop --steps 40`
(`py_function`, for tests/trace/test_py_function.py, has no golden
report). `variants`
adds edits of `mlp` (made with `xplane_pb2`) that send the analysis down
its rarer paths: a line out of order, kernels on a tf.data thread, and all
of a thread's kernels nested in one outer kernel.

`data/golden_9c25e2f.json.gz` holds, per variant, `analyze_trace(...,
top_k=1000).to_dict()` without the path fields, as commit 9c25e2f computed
it. Regenerate (only ever from that commit's code) with:

```
git worktree add /tmp/old 9c25e2f
PYTHONPATH=/tmp/old .venv/bin/python tests/trace/_golden.py
```

`data/golden_oracle.json` holds, beside those figures, what an independent
oracle reads from the same trace, with the tolerance a figure is checked
against it (`tests/_oracle.py`: XLA time and launches summed from the raw
proto with TensorFlow's own `xplane_pb2`, the share with them; compilations
counted as `CpuCompiler::RunBackend` spans; plain op time as xprof's
`framework_op_stats` books the same ops, where xprof and the package book
the same ops). It depends on the trace only; rewrite it with
`.venv/bin/python tests/trace/_golden.py --oracle`.
"""

from __future__ import annotations

import gzip
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data"
GOLDEN = DATA / "golden_9c25e2f.json.gz"
ORACLE = DATA / "golden_oracle.json"
# Tolerances of a figure against its oracle: the raw sums add the same
# integer picoseconds (float rounding only); xprof rounds its times to
# nanoseconds and cuts ops at the window's edges (5%, as in test_analysis).
RAW_REL, XPROF_REL = 1e-9, 0.05
# Variants whose plain ops xprof books as the package does (each file
# converted in a directory of its own: xprof caches its op stats per
# directory, `ALL_HOSTS.op_stats_v2.pb`, and hands a second trace there the
# first one's tables; that, not xprof's rules, once made the `mlp` traces
# read 329 of 466 ops unmatched and 6 steps of 8). tests/trace/
# test_xprof_differential.py compares every variant op by op and explains
# the rest: `eager_loop` has no plain op kernel, and the edited `mlp_*`
# variants move kernels where xprof reads them otherwise.
XPROF_OPS_VARIANTS = ("jit", "mlp", "mlp_unsorted", "plain")
TOP_K = 1000
_PATH_FIELDS = ("trace_paths", "hosts", "trace_path")
# Report fields added after 9c25e2f (the compile table; the device figures,
# None or empty on these host traces; trace quality): no golden value;
# tests/trace/test_golden.py pins the compile table streamed against parsed
# instead, tests/trace/test_trace_quality.py the rest.
NEW_FIELDS = (
    "compile_table",
    "cache_hits",
    "persistent_cache",
    "transfer_time_s",
    "programs",
    "collective_time_s",
    "top_xla_ops",
    "steps",
    "trace_quality",
    "eager_op_time_s",
    "xla_run_span_s",
    "devices",
    "totals",
)


def variants() -> dict[str, bytes]:
    """The serialized traces the golden reports are for, by name."""
    from keras_xla_guard.trace.xplane import xplane_pb2

    pb = xplane_pb2()
    traces = {
        name: gzip.decompress((DATA / f"{name}.xplane.pb.gz").read_bytes())
        for name in ("plain", "jit", "mlp", "eager_loop")
    }

    def edited(edit: Any) -> bytes:
        space = pb.XSpace.FromString(traces["mlp"])
        plane = next(p for p in space.planes if p.name == "/host:CPU")
        edit(plane, max(plane.lines, key=lambda line: len(line.events)))
        return space.SerializeToString()

    def unsorted(plane: Any, line: Any) -> None:
        events = list(line.events)[::-1]
        copies = [pb.XEvent() for _ in events]
        for copy, event in zip(copies, events):
            copy.CopyFrom(event)
        del line.events[:]
        line.events.extend(copies)

    def on_tf_data(plane: Any, line: Any) -> None:
        line.name = "tf_data_iterator_resource/7"

    def in_outer_kernel(plane: Any, line: Any) -> None:
        mid = max(plane.event_metadata) + 1
        plane.event_metadata[mid].id = mid
        plane.event_metadata[mid].name = "outer/PartitionedCall:PartitionedCall"
        first = min(e.offset_ps for e in line.events)
        last = max(e.offset_ps + e.duration_ps for e in line.events)
        outer = pb.XEvent(metadata_id=mid, offset_ps=first, duration_ps=last - first + 1)
        events = [outer] + [pb.XEvent() for _ in line.events]
        for copy, event in zip(events[1:], line.events):
            copy.CopyFrom(event)
        del line.events[:]
        line.events.extend(events)

    traces["mlp_unsorted"] = edited(unsorted)
    traces["mlp_on_tf_data"] = edited(on_tf_data)
    traces["mlp_in_outer_kernel"] = edited(in_outer_kernel)
    return traces


# A window whose ops all ran eagerly: 9c25e2f's note said only that nothing
# was measured; the note now names the eager ops and the fix
# (tests/trace/test_golden.py pins it on `eager_loop` against the raw trace).
_NO_OP_NOTE = "the trace holds no op execution: nothing to measure"
EAGER_NOTE_START = "no TF op kernel or XLA program ran in this window: its ops ran eagerly"


def report_dict(report: Any) -> dict[str, Any]:
    """A report's `to_dict()` without the fields naming the file or newer than 9c25e2f."""
    d = report.to_dict()
    d["notes"] = [_NO_OP_NOTE if note.startswith(EAGER_NOTE_START) else note for note in d["notes"]]
    if "compile_thread_time_s" in d:
        # 9c25e2f's compile_time_s summed compile time over threads; that
        # figure is now compile_thread_time_s, the headline wall-clock.
        d["compile_time_s"] = d.pop("compile_thread_time_s")
    # With a default: 9c25e2f's own reports, which the regeneration reads, lack the newer fields.
    for key in _PATH_FIELDS + NEW_FIELDS:
        d.pop(key, None)
    for op in d["top_non_xla_ops"]:
        # Newer than 9c25e2f, and never set by the trace analysis itself.
        assert op.pop("layer", None) is None
    return d


def load_golden(corrected: bool = True) -> dict[str, Any]:
    """The golden reports, by variant name, with the corrections issues made since (`corrected`)."""
    golden = json.loads(gzip.decompress(GOLDEN.read_bytes()))
    if corrected:
        for report in golden.values():
            _no_partition_transfers(report)
    return golden


def _no_partition_transfers(report: dict[str, Any]) -> None:
    """Issue 56's correction: graph partitioning's rendezvous transfers are no plain ops.

    9c25e2f booked the `_Send`/`_Recv` kernels graph partitioning adds
    (`_send_Const_0:_Send`, async `_Recv` starts named `_recv_x_0`) as plain
    TF ops; xprof's op tables leave them out (their names start with an
    underscore, `IsTfOpName` in `xla/tsl/profiler/utils/tf_op_utils.cc`, or
    they are async starts) and so does the package now. In these traces they
    run inside `EagerLocalExecute`
    spans on the Python thread (a function call's arguments and constants),
    so their self time moves, to the picosecond, from `non_xla_op_time_s` to
    `eager_overhead_s`, the span around them; the share does not move (no
    XLA in these windows, or none of these rows).
    """
    ops = report["top_non_xla_ops"]
    moved = [op for op in ops if op["op_type"] in ("_Send", "_Recv", "_HostSend", "_HostRecv")]
    if not moved:
        return
    ps = sum(round(op["self_time_s"] * 1e12) for op in moved)
    report["top_non_xla_ops"] = [op for op in ops if op not in moved]
    report["non_xla_op_time_s"] = (round(report["non_xla_op_time_s"] * 1e12) - ps) * 1e-12
    report["eager_overhead_s"] = (round(report["eager_overhead_s"] * 1e12) + ps) * 1e-12
    xla = report["xla_time_s"]
    total = xla + report["non_xla_op_time_s"]
    report["xla_time_fraction"] = xla / total if total else 0.0


def oracle(path: Path, golden: dict[str, Any], name: str) -> dict[str, dict[str, Any]]:
    """The oracle's reading of one variant's trace, per figure: value, oracle and tolerance."""
    from _oracle import raw_xla, xprof_op_rows

    raw = raw_xla(path)
    non_xla = golden["non_xla_op_time_s"]
    share = raw.seconds / (raw.seconds + non_xla) if raw.seconds + non_xla else 0.0
    figures = {
        "xla_time_s": {"value": raw.seconds, "oracle": "raw_xla", "rel": RAW_REL},
        "xla_executions": {"value": raw.launches, "oracle": "raw_xla", "rel": 0.0},
        "xla_time_fraction": {
            "value": share,
            "oracle": "raw_xla and the golden plain op time",
            "rel": RAW_REL,
        },
        "compilations": {
            "value": sum(1 for _ in _compile_spans(path)),
            "oracle": "CpuCompiler::RunBackend spans",
            "rel": 0.0,
        },
    }
    if name in XPROF_OPS_VARIANTS:
        rows = {(r["type"], r["operation"]): r for r in xprof_op_rows(path) if r["host_or_device"] == "Host"}
        ops = golden["top_non_xla_ops"]
        figures["non_xla_op_time_s"] = {
            "value": sum(rows[(op["op_type"], op["op_name"])]["total_self_time"] * 1e-6 for op in ops),
            "oracle": "xprof framework_op_stats",
            "rel": XPROF_REL,
        }
    return figures


def _compile_spans(path: Path) -> list[Any]:
    from _oracle import _host_spans

    return _host_spans(path, "CpuCompiler::RunBackend")


def load_oracle() -> dict[str, Any]:
    """The oracle values beside the golden reports, by variant and figure."""
    return json.loads(ORACLE.read_text(encoding="utf-8"))


def main() -> None:
    from keras_xla_guard import analyze_trace

    golden = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, data in variants().items():
            path = Path(tmp) / f"{name}.xplane.pb"
            path.write_bytes(data)
            golden[name] = report_dict(analyze_trace(path, top_k=TOP_K))
    GOLDEN.write_bytes(gzip.compress(json.dumps(golden, sort_keys=True).encode(), mtime=0))
    print(f"wrote {GOLDEN} with {sys.modules['keras_xla_guard'].__file__}")


def oracle_main() -> None:
    golden = load_golden()
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, data in variants().items():
            path = Path(tmp) / f"{name}.xplane.pb"
            path.write_bytes(data)
            out[name] = oracle(path, golden[name], name)
    ORACLE.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {ORACLE}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    oracle_main() if "--oracle" in sys.argv[1:] else main()
