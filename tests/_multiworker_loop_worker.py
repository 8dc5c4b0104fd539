"""One worker of a 2-process Keras 3 custom loop under MultiWorkerMirroredStrategy.

Usage: python _multiworker_loop_worker.py TASK_INDEX PORT0,PORT1 LOG_DIR [--peer-stalls] [--all-workers]

Trains the loop of examples/multiworker_custom_loop.py (its `build`) for 3
epochs with `XlaGuard(profile_epochs=(0, 2))`, epochs profiled from their
first step (so epoch 0 holds the compilation). The chief then waits, guard
still open, until its summaries of both profiled epochs are on disk. With
`--peer-stalls` worker 1 stops inside the last epoch, after its last step,
until the chief has closed its guard (at most `STALL_LIMIT_S`), so its
report of that epoch comes only after the chief is done (as from a worker
that hangs or dies). With `--all-workers` every worker profiles
(`profile_workers="all"`), else the chief only (the default). Prints one
JSON line with what the tests need.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from _multiworker import tf_config

task, ports, log_dir = int(sys.argv[1]), sys.argv[2], sys.argv[3]
peer_stalls = "--peer-stalls" in sys.argv[4:]
profile_workers = "all" if "--all-workers" in sys.argv[4:] else "chief"
os.environ["TF_CONFIG"] = tf_config(task, ports)

import tensorflow as tf  # noqa: E402 - after TF_CONFIG is set
from multiworker_custom_loop import build  # noqa: E402 - after TF_CONFIG is set

import keras_xla_guard.distributed as distributed  # noqa: E402 - after TF_CONFIG is set
from keras_xla_guard import XlaGuard, XlaGuardWarning  # noqa: E402 - after TF_CONFIG is set

EPOCHS, PROFILED = 3, (0, 2)
# The chief waits this long for a peer's report: time for a loaded machine
# to analyse the peer's trace, and no more.
distributed.WORKER_TIMEOUT_S = 15.0
STALL_LIMIT_S = 120.0
chief_closed = Path(log_dir + ".chief_closed")


def chief_summary_steps(log_dir: str) -> list[int]:
    """Epochs of the `xla_guard/workers` table in the chief's event files so far."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(log_dir, size_guidance={"tensors": 0})
    acc.Reload()
    if "xla_guard/workers" not in acc.Tags()["tensors"]:
        return []
    return sorted(e.step for e in acc.Tensors("xla_guard/workers"))


strategy = tf.distribute.MultiWorkerMirroredStrategy()
guard = XlaGuard(
    log_dir=log_dir,
    profile_epochs=PROFILED,
    skip_steps=0,
    verbose=0,
    strategy=strategy,
    profile_workers=profile_workers,
)
dist_dataset, train_step = build(strategy, guard)
losses = []
summaries_before_close: list[int] = []
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for epoch in range(EPOCHS):
        with guard.epoch(epoch):
            epoch_losses = [float(train_step(x, y)) for x, y in dist_dataset]
            if peer_stalls and task == 1 and epoch == EPOCHS - 1:
                deadline = time.monotonic() + STALL_LIMIT_S
                while not chief_closed.exists() and time.monotonic() < deadline:
                    time.sleep(0.2)
        losses.append(sum(epoch_losses) / len(epoch_losses))
    if guard.worker is not None and guard.worker.is_chief and not peer_stalls:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            summaries_before_close = chief_summary_steps(log_dir)
            if summaries_before_close == list(PROFILED):
                break
            time.sleep(0.5)
    guard.close()
closed_at = time.time()
if task == 0:
    chief_closed.touch()
reports = guard.reports
print(
    json.dumps(
        {
            "task": task,
            "pid": os.getpid(),
            "worker": guard.worker.name if guard.worker else None,
            "is_chief": guard.worker.is_chief if guard.worker else None,
            "reports": {str(e): r.to_dict() for e, r in reports.items()},
            "losses": losses,
            "closed_at": closed_at,
            "summaries_before_close": summaries_before_close,
            "log_dir_after": guard.log_dir,
            "warnings": [str(w.message) for w in caught if issubclass(w.category, XlaGuardWarning)],
        }
    ),
    flush=True,
)
