"""One worker of benchmarks/stress_multiworker.py (see there).

Usage: python _stress_worker.py TASK_INDEX PORT0,PORT1 LOG_DIR MODE SCENARIO [PROF0,PROF1]

SCENARIO is `loop` (the Keras 3 custom loop of
examples/multiworker_custom_loop.py) or `fit` (tf_keras `fit` of the model
in tests/_multiworker_fit_model.py). Both train `EPOCHS` epochs of `STEPS`
steps and profile every epoch in `PROFILED` from its first step, so each
run stops the profiler `len(PROFILED)` times per profiling worker; the raw
modes include the run's first step (the collectives' group set-up), the
guard leaves it out under MultiWorkerMirroredStrategy. MODE is:

- `none`: no profiler, no guard;
- `guard`: the guard as shipped (under MultiWorkerMirroredStrategy only
  the chief profiles, `profile_workers="chief"`);
- `guard-all`: the guard with `profile_workers="all"` (every worker);
- `raw-all`: `tf.profiler.experimental.start/stop` on every worker, into
  `LOG_DIR/worker_<k>`;
- `raw-chief`: the same on worker 0 only;
- `raw-level1`: `raw-all` with `ProfilerOptions(host_tracer_level=1,
  python_tracer_level=0, device_tracer_level=0)`;
- `raw-quiesce`: `raw-all`, and before each stop: pending eager ops
  finished (`context.async_wait()`), a cross-worker barrier (one
  all-reduce), then stop, at the same step on every worker;
- `raw-server`: TensorFlow's own multi-worker path: every worker runs a
  profiler server (ports PROF0,PROF1) and the chief captures both workers
  in one `tf.profiler.experimental.client.trace` per profiled epoch, from
  a thread, while the epoch trains.

Prints one JSON line.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "tests"))
from _multiworker import tf_config  # noqa: E402 - from tests/, put on the path above

task, ports, log_dir, mode, scenario = (int(sys.argv[1]), *sys.argv[2:6])
profiler_ports = sys.argv[6].split(",") if len(sys.argv) > 6 else []
os.environ["TF_CONFIG"] = tf_config(task, ports)
if scenario == "fit":
    os.environ["TF_USE_LEGACY_KERAS"] = "1"

import tensorflow as tf  # noqa: E402 - after TF_CONFIG is set

from keras_xla_guard import XlaGuard, XlaGuardCallback  # noqa: E402 - after TF_CONFIG is set

EPOCHS, STEPS, PROFILED = 3, 6, (0, 1, 2)
GUARDED = {"guard": "chief", "guard-all": "all"}
RAW = ("raw-all", "raw-chief", "raw-level1", "raw-quiesce")

strategy = tf.distribute.MultiWorkerMirroredStrategy()
own_dir = os.path.join(log_dir, f"worker_{task}")
if mode == "raw-server":
    tf.profiler.experimental.server.start(int(profiler_ports[task]))


def _barrier() -> None:
    from tensorflow.python.eager import context

    context.async_wait()
    strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)


class RawProfile:
    """Starts and stops TensorFlow's profiler around an epoch, per MODE."""

    def __init__(self) -> None:
        self.capture: threading.Thread | None = None
        self.started_at = 0.0

    def begin(self, epoch: int) -> None:
        if epoch not in PROFILED:
            return
        if mode in RAW and (mode != "raw-chief" or task == 0):
            options = None
            if mode == "raw-level1":
                options = tf.profiler.experimental.ProfilerOptions(
                    host_tracer_level=1, python_tracer_level=0, device_tracer_level=0
                )
            tf.profiler.experimental.start(os.path.join(own_dir, f"epoch{epoch}"), options=options)
        elif mode == "raw-server" and task == 0:
            service = ",".join(f"grpc://127.0.0.1:{p}" for p in profiler_ports)
            self.capture = threading.Thread(
                target=tf.profiler.experimental.client.trace,
                args=(service, os.path.join(log_dir, f"epoch{epoch}"), 1500),
            )
            self.capture.start()

    def end(self, epoch: int) -> None:
        if epoch not in PROFILED:
            return
        if mode in RAW and (mode != "raw-chief" or task == 0):
            if mode == "raw-quiesce":
                _barrier()
            tf.profiler.experimental.stop()
        elif self.capture is not None:
            # The capture must end before the run does: a barrier keeps
            # worker 1 (whose server is being traced) alive until then.
            self.capture.join()
            self.capture = None
        if mode == "raw-server":
            _barrier()


raw = RawProfile()
guard = None
if scenario == "loop":
    from multiworker_custom_loop import build

    if mode in GUARDED:
        guard = XlaGuard(
            log_dir=log_dir,
            profile_epochs=PROFILED,
            skip_steps=0,
            verbose=0,
            strategy=strategy,
            profile_workers=GUARDED[mode],
        )
    dist_dataset, train_step = build(strategy, guard)
    for epoch in range(EPOCHS):
        if guard is not None:
            scope = guard.epoch(epoch)
        else:
            scope = contextlib.nullcontext()
            raw.begin(epoch)
        with scope:
            for x, y in itertools.islice(dist_dataset, STEPS):
                train_step(x, y)
        if guard is None:
            raw.end(epoch)
    if guard is not None:
        guard.close()
elif scenario == "fit":
    import numpy as np

    sys.argv = sys.argv[:1]
    from _multiworker_fit_model import build_model

    with strategy.scope():
        model = build_model()

    class RawCallback(tf.keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            raw.begin(epoch)

        def on_epoch_end(self, epoch, logs=None):
            raw.end(epoch)

    rng = np.random.default_rng(0)
    x = rng.standard_normal((1024, 32)).astype("float32")
    y = (x[:, :1] * 0.3).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat()
    if mode in GUARDED:
        guard = XlaGuardCallback(
            log_dir=log_dir, profile_epochs=PROFILED, skip_steps=0, verbose=0, profile_workers=GUARDED[mode]
        )
        callbacks = [guard]
    else:
        callbacks = [RawCallback()]
    model.fit(dataset, epochs=EPOCHS, steps_per_epoch=STEPS, callbacks=callbacks, verbose=0)
else:
    raise SystemExit(f"SCENARIO must be loop or fit. Received: scenario={scenario!r}")
statuses = {str(e): r.status for e, r in guard.reports.items()} if guard is not None else {}
# What the profiler wrote, so that a mode that "never crashes" is seen to
# have profiled: the trace files under this worker's directory (for
# `raw-server`, the chief's captures of both workers).
# Only this worker's own directories are listed: the other worker may be
# moving its staged trace meanwhile.
listed = [Path(own_dir)]
if mode == "raw-server" and task == 0:
    listed = sorted(Path(log_dir).glob("epoch*"))
traces = sorted(str(p.relative_to(log_dir)) for d in listed if d.is_dir() for p in d.rglob("*.xplane.pb"))
print(
    json.dumps({"task": task, "mode": mode, "scenario": scenario, "statuses": statuses, "traces": traces}),
    flush=True,
)
