"""The guarded-fit scenario of stress_warmup_interrupt.py: real SIGINTs at random times in guarded fits.

Run in the harness's child process, on the backend `KERAS_BACKEND` names
(TensorFlow, or Keras on JAX without TensorFlow). One small jit-compiled
model is fitted again and again, each time with a fresh `XlaGuardCallback`
that profiles every epoch from its first step (so the profiler starts and
stops three times a fit, and a random signal often lands in a stop or its
export) and a validation set (so the test function is tapped too). Each
trial sends one real SIGINT (`os.kill`), or two 0-20 ms apart, after a
random delay drawn uniformly from 0 to the median duration of one such fit.

After each trial it checks, as a user could:

- `leaked_profiler`: the backend's profiler cannot be started (someone holds it);
- `guard_session`: the guards' own session bookkeeping still holds a session;
- `wrappers`: what of the guard is left: Keras' train, test or predict
  function not Keras' own, a stand-in over `_symbolic_build`, a call scope
  left on `_model_hooks`' stack, the harness's SIGINT handler replaced,
  or a method of `keras.Model` wrapped beyond `fit`/`evaluate`/`predict`
  (which stay wrapped while `XlaGuardCallback` is imported);
- `run_file`: the run file, if one was written, read by `report`'s reader,
  and the status of each window in it;
- `model_broken`: the model cannot predict any more. Keras' own state may
  not survive a Ctrl-C, guard or no guard (on JAX a step donates the
  state's buffers, and `evaluate` empties the variables while it runs,
  with no `finally` to put them back): the next trial then starts from a
  fresh model, so each trial counts only its own leaks. `--no-guard` runs
  the same fits without a guard, to count how often Keras alone breaks.
"""

from __future__ import annotations

import gc
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

TRIAL_PREFIX = "TRIAL "
EXAMPLES, FEATURES, BATCH, EPOCHS = 320, 16, 32, 3


class _Box:
    """Whether a SIGINT may raise now (only inside a trial's fit), and how many came outside one."""

    inside = False
    late = 0


def _on_sigint(signum: int, frame: Any) -> None:
    if _Box.inside:
        raise KeyboardInterrupt
    _Box.late += 1


def _where(error: BaseException) -> str:
    """`held` when a guard held the signal through its own work and passed it on after, else `run`.

    The harness's handler raises; the frame that called it says who: Python
    itself (at once), a guard's gate passing it on at once (`_on_signal`),
    or a gate delivering it once its work was done (`_deliver`).
    """
    frames = traceback.extract_tb(error.__traceback__)
    caller = frames[-2] if len(frames) > 1 and frames[-1].name == "_on_sigint" else None
    if caller is not None and caller.filename.endswith("_interrupts.py") and caller.name == "_deliver":
        return "held"
    return "run"


def _model() -> Any:
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((FEATURES,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile("adam", "mse", jit_compile=True)
    return model


def _profiler_free(backend: Any, scratch: Path) -> bool:
    """Whether the backend's profiler starts (then it is stopped again)."""
    from keras_xla_guard.errors import ProfilerBusyError

    try:
        backend.start_trace(str(scratch / "probe"))
    except ProfilerBusyError:
        return False
    backend.stop_trace()
    shutil.rmtree(scratch / "probe", ignore_errors=True)
    return True


def _leftovers(model: Any, own: dict[str, Any]) -> list[str]:
    from keras_xla_guard import _model_hooks

    left = [
        f"model.{name}_function" for name, fn in own.items() if getattr(model, f"{name}_function") is not fn
    ]
    if "_symbolic_build" in vars(model):
        left.append("model._symbolic_build")
    if getattr(getattr(_model_hooks, "_calls", None), "stack", []):
        left.append("a call scope on _model_hooks' stack")
    if signal.getsignal(signal.SIGINT) is not _on_sigint:
        left.append(f"SIGINT handler {signal.getsignal(signal.SIGINT)!r}")
    return left


def _run_file(log_dir: Path) -> dict[str, Any] | None:
    from keras_xla_guard.output.run_schema import RUN_FILE
    from keras_xla_guard.output.runfile import read_run_file

    if not (log_dir / RUN_FILE).is_file():
        return None
    try:
        data = read_run_file(log_dir)
    except Exception as e:  # noqa: BLE001 - counted as unreadable
        return {"readable": False, "error": f"{type(e).__name__}: {e}"}
    return {"readable": True, "statuses": sorted({str(r.get("status")) for r in data.reports})}


def _usable(model: Any, x: Any) -> str | None:
    """Why the model cannot predict any more, or `None` when it can."""
    try:
        model.predict(x[:BATCH], verbose=0)
    except Exception as e:  # noqa: BLE001 - the reason is the record
        return f"{type(e).__name__}: {str(e)[:160]}"
    return None


def child(first: int, trials: int, double_every: int, seed: int, guarded: bool = True) -> None:
    """Runs trials `first`..`trials - 1`, one JSON line each (`guarded=False`: the same fits, no guard)."""
    import keras
    import numpy as np

    from keras_xla_guard import XlaGuardCallback, backend
    from keras_xla_guard.runtime import profiler

    rng = np.random.default_rng(0)
    x = rng.standard_normal((EXAMPLES, FEATURES)).astype("float32")
    y = (x[:, :1] * 0.3).astype("float32")
    validation = (x[:64], y[:64])

    def fresh() -> tuple[Any, dict[str, Any]]:
        model = _model()
        # Compiled once, unguarded: each trial then fits a warm model.
        model.fit(x, y, batch_size=BATCH, epochs=1, validation_data=validation, verbose=0)
        model.predict(x[:BATCH], verbose=0)
        return model, {name: getattr(model, f"{name}_function") for name in ("train", "test", "predict")}

    model, own = fresh()
    scratch = Path(tempfile.mkdtemp(prefix="stress_fit_"))
    the_backend = backend.select(model)

    def guarded_fit(log_dir: Path) -> None:
        guard = XlaGuardCallback(log_dir=log_dir, profile_every=1, skip_steps=0, verbose=0)
        model.fit(
            x,
            y,
            batch_size=BATCH,
            epochs=EPOCHS,
            validation_data=validation,
            callbacks=[guard] if guarded else [],
            verbose=0,
        )

    durations = []
    for i in range(4):
        started = time.perf_counter()
        guarded_fit(scratch / f"timing{i}")
        durations.append(time.perf_counter() - started)
    # The median of the last three (the first pays one-time costs), as warm_up's scenario does.
    window = sorted(durations[1:])[1]
    signal.signal(signal.SIGINT, _on_sigint)
    pid = os.getpid()
    for trial in range(first, trials):
        chooser = random.Random(seed * 100_003 + trial)
        delays = [chooser.uniform(0, window)]
        if double_every and trial % double_every == double_every - 1:
            delays.append(delays[0] + chooser.uniform(0, 0.02))
        timers = [threading.Timer(d, os.kill, (pid, signal.SIGINT)) for d in delays]
        late = _Box.late
        log_dir = scratch / f"trial{trial}"
        error = None
        try:
            for t in timers:
                t.start()
            _Box.inside = True
            try:
                guarded_fit(log_dir)
                outcome = "completed"
            except KeyboardInterrupt as e:
                outcome = _where(e)
            except Exception as e:  # noqa: BLE001 - recorded: training itself broke
                outcome, error = "error", f"{type(e).__name__}: {str(e)[:200]}"
        except KeyboardInterrupt:
            # A second signal hit the harness itself, handling the first: the trial still counts.
            outcome = "harness"
        finally:
            _Box.inside = False
        for t in timers:
            t.join()
        time.sleep(0.05)
        if outcome == "completed" and _Box.late > late:
            outcome = "late"
        leaked = not _profiler_free(the_backend, scratch)
        session = profiler._active is not None and profiler._active.running
        left = _leftovers(model, own)
        gc.collect()
        # fit/evaluate/predict stay wrapped while XlaGuardCallback is imported (a pass-through
        # outside guarded calls); nothing else of keras.Model may be.
        extra = sorted(set(vars(keras.Model)) & {"train_on_batch", "test_on_batch", "predict_on_batch"})
        left += [f"keras.Model.{name} wrapped" for name in extra]
        # Keras' own state may not survive an interrupt (on JAX: the state a step donated, or
        # variables evaluate emptied); the next trial then starts from a fresh model.
        broken = _usable(model, x)
        if broken is not None:
            model, own = fresh()
        record = {
            "trial": trial,
            "model_broken": broken,
            "signals": len(delays),
            "outcome": outcome,
            "error": error,
            "leaked_profiler": leaked,
            "guard_session": session,
            "wrappers": left,
            "run_file": _run_file(log_dir),
            "window_s": round(window, 4),
        }
        print(TRIAL_PREFIX + json.dumps(record), flush=True)
        if leaked or session:
            # Free it for the next trial, so each trial counts only its own leak.
            profiler.stop_stale_session()
            try:
                the_backend.stop_trace()
            except Exception:  # noqa: BLE001 - nothing was running
                pass
        shutil.rmtree(log_dir, ignore_errors=True)


def summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The scenario's JSON figures over every trial."""
    outcomes: dict[str, int] = {k: 0 for k in ("completed", "held", "run", "harness", "late", "error")}
    for r in records:
        outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
    files = [r["run_file"] for r in records if r["run_file"] is not None]
    statuses: dict[str, int] = {}
    for f in files:
        for status in f.get("statuses", []):
            statuses[status] = statuses.get(status, 0) + 1
    return {
        "outcomes": outcomes,
        "trials_that_broke_the_model": sum(r["model_broken"] is not None for r in records),
        "model_broken": sorted({r["model_broken"].split(":")[0] for r in records if r["model_broken"]}),
        "leaked_profilers": sum(r["leaked_profiler"] for r in records),
        "guard_sessions_left": sum(r["guard_session"] for r in records),
        "trials_with_leftover_wrappers": sum(bool(r["wrappers"]) for r in records),
        "leftovers": [{"trial": r["trial"], "left": r["wrappers"]} for r in records if r["wrappers"]],
        "run_files_written": len(files),
        "run_files_unreadable": sum(not f["readable"] for f in files),
        "runs_with_window_status": statuses,
        "errors": [{"trial": r["trial"], "error": r["error"]} for r in records if r["error"]],
    }


if __name__ == "__main__":
    sys.exit("run benchmarks/stress_warmup_interrupt.py --scenario fit")
