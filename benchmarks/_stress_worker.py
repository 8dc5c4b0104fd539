"""One worker of benchmarks/stress_multiworker.py (see there).

Usage: python _stress_worker.py TASK_INDEX PORT0,PORT1 LOG_DIR MODE

Trains the Keras 3 loop of examples/multiworker_custom_loop.py for 3 epochs
and profiles epochs 0 and 2 according to MODE:

- `none`: no profiler, no guard;
- `guard`: `XlaGuard` (per-worker trace directories, analysis on a thread);
- `guard-sync`: the same with `async_analysis=False`;
- `raw-own`: `tf.profiler.experimental.start/stop` into `LOG_DIR/worker_<k>`;
- `raw-shared`: the same into `LOG_DIR` itself, both workers one directory
  (what the guard did before it had per-worker directories).

Prints one JSON line.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "tests"))
from _multiworker import tf_config  # noqa: E402

task, ports, log_dir, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
os.environ["TF_CONFIG"] = tf_config(task, ports)

import tensorflow as tf  # noqa: E402
from multiworker_custom_loop import build  # noqa: E402

from keras_xla_guard import XlaGuard  # noqa: E402

EPOCHS, PROFILED = 3, (0, 2)

strategy = tf.distribute.MultiWorkerMirroredStrategy()
guard = None
if mode in ("guard", "guard-sync"):
    guard = XlaGuard(log_dir=log_dir, profile_epochs=PROFILED, skip_steps=0, verbose=0,
                     strategy=strategy, async_analysis=mode == "guard")
dist_dataset, train_step = build(strategy, guard)


@contextlib.contextmanager
def raw_profile(epoch: int):
    if mode.startswith("raw-") and epoch in PROFILED:
        target = log_dir if mode == "raw-shared" else os.path.join(log_dir, f"worker_{task}")
        tf.profiler.experimental.start(target)
        try:
            yield
        finally:
            tf.profiler.experimental.stop()
    else:
        yield


for epoch in range(EPOCHS):
    scope = guard.epoch(epoch) if guard is not None else raw_profile(epoch)
    with scope:
        for x, y in dist_dataset:
            train_step(x, y)
if guard is not None:
    guard.close()
statuses = {str(e): r.status for e, r in guard.reports.items()} if guard is not None else {}
print(json.dumps({"task": task, "mode": mode, "statuses": statuses}), flush=True)
