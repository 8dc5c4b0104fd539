"""On which threads each worker's collective-parameter events end, under MultiWorkerMirroredStrategy.

Evidence for the crash analysis in docs/multiworker.md: runs the 2-worker
Keras 3 loop of tests/_multiworker_loop_worker.py with every worker
profiled (`--all-workers`; retried if TensorFlow's profiler stop aborts a
worker), then counts, in each worker's traces, the
`CollectiveExecutor::CompleteParams` events (opened with
`TraceMe::ActivityStart` on the thread that launches a collective, closed
in its completion callback) by the name of the thread they ended on. A
thread other than the launching one (gRPC's `tf_GrpcWorkerEnvQueues`) is a
cross-thread event, what `SplitEventTracker::FindStartAndMerge` pairs up.
Prints one JSON object.

Usage: python benchmarks/complete_params_threads.py
"""

from __future__ import annotations

import collections
import json
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import _multiworker  # noqa: E402 - from tests/, put on the path above

EVENT = "CompleteParams"


def _thread_kind(name: str) -> str:
    """A thread's name without the instance suffix TensorFlow appends (`pool/123`)."""
    return re.sub(r"/-?\d+$", "", name) or "(unnamed)"


def main() -> int:
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    workers: dict[str, dict[str, dict[str, int]]] = {}
    with tempfile.TemporaryDirectory(prefix="kxg_params_") as tmp:
        run = _multiworker.run_workers(
            ROOT / "tests" / "_multiworker_loop_worker.py",
            Path(tmp) / "log",
            "--all-workers",
            crash_attempts=_multiworker.ALL_WORKERS_ATTEMPTS,
        )
        for trace in sorted(Path(run["log_dir"]).glob("worker_*/plugins/profile/*/*.xplane.pb")):
            space = xplane_pb2.XSpace()
            space.ParseFromString(trace.read_bytes())
            counts: collections.Counter[str] = collections.Counter()
            for plane in space.planes:
                if plane.name != "/host:CPU":
                    continue
                names = {k: v.name for k, v in plane.event_metadata.items()}
                for line in plane.lines:
                    for event in line.events:
                        if EVENT in names.get(event.metadata_id, ""):
                            counts[_thread_kind(line.name)] += 1
            worker = trace.parents[3].name
            window = trace.parent.name.rsplit("_", 1)[-1]
            workers.setdefault(worker, {})[window] = dict(sorted(counts.items()))
        attempts = run["attempts"]
    print(
        json.dumps(
            {
                "benchmark": "complete_params_threads",
                "event": EVENT,
                "attempts": attempts,
                "workers": workers,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
