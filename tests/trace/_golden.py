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
TOP_K = 1000
_PATH_FIELDS = ("trace_paths", "hosts", "trace_path")
# Report fields added after 9c25e2f (the compile table; device transfers,
# None on these host traces): no golden value; tests/trace/test_golden.py
# pins the compile table streamed against parsed instead.
NEW_FIELDS = ("compile_table", "cache_hits", "persistent_cache", "transfer_time_s")


def variants() -> dict[str, bytes]:
    """The serialized traces the golden reports are for, by name."""
    from keras_xla_guard.trace.xplane import xplane_pb2

    pb = xplane_pb2()
    traces = {name: gzip.decompress((DATA / f"{name}.xplane.pb.gz").read_bytes())
              for name in ("plain", "jit", "mlp", "eager_loop")}

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


def report_dict(report: Any) -> dict[str, Any]:
    """A report's `to_dict()` without the fields naming the file or newer than 9c25e2f."""
    d = report.to_dict()
    if "compile_thread_time_s" in d:
        # 9c25e2f's compile_time_s summed compile time over threads; that
        # figure is now compile_thread_time_s, the headline wall-clock.
        d["compile_time_s"] = d.pop("compile_thread_time_s")
    for key in _PATH_FIELDS + NEW_FIELDS:
        d.pop(key)
    for op in d["top_non_xla_ops"]:
        # Newer than 9c25e2f, and never set by the trace analysis itself.
        assert op.pop("layer") is None
    return d


def load_golden() -> dict[str, Any]:
    """The golden reports, by variant name."""
    return json.loads(gzip.decompress(GOLDEN.read_bytes()))


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


if __name__ == "__main__":
    main()
