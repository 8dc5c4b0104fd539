"""Minimal reproducer: `tf.profiler.experimental.stop()` aborts a MultiWorkerMirroredStrategy worker.

TensorFlow and NumPy only (no Keras, no keras-xla-guard), for a TensorFlow
bug report. It starts two worker processes on 127.0.0.1; each builds a
`MultiWorkerMirroredStrategy`, then, `--windows` times: starts the
profiler, runs `--steps` steps of a plain eager loop over a distributed
dataset (`strategy.run` of an all-reduce and a variable update), and stops
the profiler. That is repeated `--attempts` times with fresh processes.
It prints one JSON object: per attempt whether a worker was killed by a
signal, which one, and the last lines of its stderr.

Usage: python benchmarks/tf_profiler_mwms_crash.py [--attempts 10] [--windows 10] [--steps 10]

Seen with TensorFlow 2.21.0 (tensorflow-cpu wheel, Python 3.11, Linux
x86_64, 2 cores): a worker, nearly always the non-chief one (task 1),
dies inside `tf.profiler.experimental.stop()` with `double free or
corruption (out)`, `free(): invalid pointer` (SIGABRT) or a segmentation
fault (the saved runs are in benchmarks/results/, see docs/multiworker.md).
The stack of a crashing worker, Python side (faulthandler, this script):

    Fatal Python error: Aborted            (or: Segmentation fault)
    Current thread (most recent call first):
      File ".../tensorflow/python/profiler/profiler_v2.py", line 149 in stop
      File "benchmarks/tf_profiler_mwms_crash.py", line ... in worker

and native side (`gdb -batch -ex bt python core` on the core file of a
task 1 that this script crashed with SIGSEGV, 2026-12-04):

    #3  <signal handler called>
    #4  tsl::profiler::(anonymous namespace)::SplitEventTracker::FindStartAndMerge(
            tsl::profiler::TraceMeRecorder::Event*)      libtensorflow_framework.so.2
    #5  tsl::profiler::TraceMeRecorder::Consume()        libtensorflow_framework.so.2
    #6  tsl::profiler::TraceMeRecorder::Stop()           libtensorflow_framework.so.2
    #7  xla::profiler::(anonymous namespace)::HostTracer::Stop()   libtensorflow_cc.so.2
    #8  tsl::profiler::ProfilerCollection::Stop()        libtensorflow_framework.so.2
    #9  tsl::profiler::ProfilerController::Stop()        libtensorflow_framework.so.2
    #10 tsl::profiler::ProfilerCollection::Stop()        libtensorflow_framework.so.2
    #11 tsl::ProfilerSession::CollectDataInternal(tensorflow::profiler::XSpace*)
    #12 tsl::ProfilerSession::CollectData(tensorflow::profiler::XSpace*)
    #13 tensorflow::profiler::pywrap::ProfilerSessionWrapper::ExportToTensorBoard()
    #14 pybind11 ... _pywrap_profiler.so  (Python: profiler_v2.py, `stop`)

With SIGABRT the same frames end in glibc's `free()` ("double free or
corruption (out)", "free(): invalid pointer").

Where the bad free comes from (xla/tsl/profiler/backends/cpu/traceme_recorder.cc):
`TraceMeRecorder::Consume()` loops over the per-thread recorders; each
recorder's `Consume(split_event_tracker)` fills a local
`std::deque<Event> events` and, for an `ActivityEnd` event whose
`ActivityStart` was recorded on a thread not consumed yet, keeps a raw
pointer `&events.back()` in `SplitEventTracker::end_events_`. The deque is
then moved into `result.push_back({info, std::move(events)})`, where
`result` is a `std::vector<ThreadEvents>`. When that vector grows it
relocates its elements with `std::move_if_noexcept`; libstdc++'s
`std::deque` move constructor is not `noexcept` (it allocates), so the
deques are *copied* and the originals freed, and the pointers in
`end_events_` dangle. `HandleCrossThreadEvents()` then calls
`FindStartAndMerge` on them, which move-assigns the start event's name
into freed memory: heap corruption, the abort above.

Cross-thread `ActivityStart`/`ActivityEnd` pairs are what the multi-worker
runtime adds: `BaseCollectiveExecutor::CompleteParamsAsync` opens
`TraceMe::ActivityStart("CollectiveExecutor::CompleteParams")` (level 1) on
the thread that launches a collective and ends it in the completion
callback, which on a non-leader worker runs on a gRPC thread once the
leader answered. An eager loop over a distributed dataset resolves new
collective instances every step (the iterator's all-reduce of "has data"),
so every profiled step makes such pairs on task 1; the leader (task 0)
resolves them locally, on the calling thread. A single-process run has
(almost) none, which is why single-process profiling does not crash.
Possible fixes: keep `std::vector<ThreadEvents>` from relocating (reserve
`recorders.size()`), store the deques by `std::unique_ptr`, or have
`end_events_` hold indices instead of pointers.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version


def worker(task: int, ports: str, log_dir: str, windows: int, steps: int) -> None:
    os.environ["TF_CONFIG"] = json.dumps(
        {
            "cluster": {"worker": [f"127.0.0.1:{p}" for p in ports.split(",")]},
            "task": {"type": "worker", "index": task},
        }
    )
    import numpy as np
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        w = tf.Variable(tf.zeros((32, 1)))
    x = np.random.default_rng(0).standard_normal((1024, 32)).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices(x).batch(64).repeat()
    dist = iter(strategy.experimental_distribute_dataset(dataset))

    @tf.function
    def step(batch):
        def replica(b):
            grad = tf.reduce_mean(b, axis=0, keepdims=True)
            total = tf.distribute.get_replica_context().all_reduce("SUM", grad)
            w.assign_sub(0.01 * tf.transpose(total))
            return tf.reduce_sum(w)

        return strategy.reduce("SUM", strategy.run(replica, args=(batch,)), axis=None)

    for window in range(windows):
        tf.profiler.experimental.start(os.path.join(log_dir, f"worker_{task}", f"w{window}"))
        for _ in range(steps):
            step(next(dist))
        tf.profiler.experimental.stop()
    print(json.dumps({"task": task, "windows": windows}), flush=True)


def _free_ports() -> str:
    socks = [socket.socket() for _ in range(2)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ",".join(map(str, ports))


def attempt(windows: int, steps: int, timeout: float) -> dict[str, object]:
    ports = _free_ports()
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONFAULTHANDLER="1")
    with tempfile.TemporaryDirectory(prefix="tf_profiler_mwms_") as log_dir:
        errs = [open(os.path.join(log_dir, f"worker{task}.err"), "w+") for task in range(2)]
        procs = [
            subprocess.Popen(
                [sys.executable, __file__, "--worker", str(task), ports, log_dir, str(windows), str(steps)],
                stdout=subprocess.DEVNULL,
                stderr=errs[task],
                text=True,
                env=env,
            )
            for task in range(2)
        ]
        # A worker that dies leaves its peer waiting in a collective: end
        # the attempt as soon as one fails.
        deadline = time.monotonic() + timeout
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            if any(p.poll() not in (None, 0) for p in procs):
                break
            time.sleep(0.2)
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        stderr = []
        for err in errs:
            err.seek(0)
            stderr.append(err.read())
            err.close()
    codes = [p.returncode for p in procs]
    crashed = [t for t, c in enumerate(codes) if c < 0 and c != -signal.SIGKILL]
    result: dict[str, object] = {"returncodes": codes, "crashed_tasks": crashed}
    if crashed:
        lines = stderr[crashed[0]].splitlines()
        result["stderr_tail"] = [ln for ln in lines if "free" in ln or "Fatal" in ln or "line" in ln][:6]
    if any("Could not start gRPC server" in e for e in stderr):
        result["port_taken"] = True
    return result


def _installed(dist: str) -> bool:
    try:
        version(dist)
    except Exception:  # noqa: BLE001 - importlib.metadata.PackageNotFoundError
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        task, ports, log_dir, windows, steps = argv[1:6]
        worker(int(task), ports, log_dir, int(windows), int(steps))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=10)
    parser.add_argument("--windows", type=int, default=10, help="profiler start/stop per worker")
    parser.add_argument("--steps", type=int, default=10, help="steps per profiling window")
    parser.add_argument("--timeout", type=float, default=240.0)
    args = parser.parse_args(argv)
    if min(args.attempts, args.windows, args.steps) < 1:
        parser.error(f"--attempts, --windows and --steps must be >= 1. Received: {vars(args)}")
    attempts = [attempt(args.windows, args.steps, args.timeout) for _ in range(args.attempts)]
    print(
        json.dumps(
            {
                "benchmark": "tf_profiler_mwms_crash",
                "tensorflow": version("tensorflow-cpu")
                if _installed("tensorflow-cpu")
                else version("tensorflow"),
                "windows": args.windows,
                "steps": args.steps,
                "attempts": len(attempts),
                "crashed": sum(bool(a["crashed_tasks"]) for a in attempts),
                "crashed_tasks": sorted({t for a in attempts for t in a["crashed_tasks"]}),
                "runs": attempts,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
