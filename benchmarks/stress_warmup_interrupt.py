"""Real SIGINTs at random times during `warm_up`, or during guarded fits: is anything left behind?

A child process builds a small jit-compiled model (Embedding,
BatchNormalization, Dropout, Dense; Adam), trains it one step so every
variable exists, takes a snapshot of every training variable (weights,
moving statistics, optimizer slots and `iterations`, seed state) and then
runs warm-ups of three signatures, one per trial. In each trial a timer
thread sends the process a real SIGINT (`os.kill`) after a random delay
drawn uniformly from 0 to the median duration of one warm-up; in every
`--double-every`-th trial a second SIGINT follows the first after 0-20 ms.
After each trial every variable is compared, bit for bit, with the
snapshot, and put back from it for the next trial.

A KeyboardInterrupt raised inside TensorFlow's own Python code can break
TensorFlow's bookkeeping for the rest of the process (an AssertionError
from autograph's context stack, then every later trace fails). A trial
that ends in another exception is recorded as `tf_broken` with its type,
after its variables are compared, and a fresh child continues with the
next trial.

Prints JSON: trials; where each KeyboardInterrupt was raised, from its
traceback (`outcomes`: `checkpoint` at a safe point of the warm-up, a
batch or step boundary; `forced` by a second signal before that point;
`held` kept during the write-back of the variables and raised after it;
`restore` in the middle of the write-back and `run` anywhere else in
`warm_up`, both outside any gate (all of them before the fix; after it,
`run` only before the gate is set up or after it is gone); `harness` in
the harness's own exception handler; `late` after `warm_up` returned;
`completed` not at all; `tf_broken` as above); how many trials left
variables changed, the most variables changed in one trial and the
`iterations` values seen (the snapshot's is 1).

`--scenario fit` runs guarded fits instead (`benchmarks/_stress_fit.py`
says what a trial is and what is checked after it): on the backend
`KERAS_BACKEND` names, so with the JAX venv's Python and
`KERAS_BACKEND=jax` it runs on Keras on JAX without TensorFlow. Its JSON
counts leaked profilers, guard sessions left, trials that left a wrapper
behind and unreadable run files, and where each KeyboardInterrupt was
raised (`held`: by a guard that held it through its own work, the
profiler's stop and export or its cleanup, and raised it after; `run`:
anywhere else, at once; `harness`: a second signal in the harness's own
handling of the first; `late`: after the fit returned), and each child
that stopped before its last trial, with its exit status.

Usage: python benchmarks/stress_warmup_interrupt.py [--scenario warmup|fit] [--trials 120]
       [--double-every 4] [--seed 0] [--label TEXT]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import traceback
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

TRIAL_PREFIX = "TRIAL "


def _model() -> Any:
    import keras

    keras.utils.set_random_seed(0)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    h = keras.layers.BatchNormalization()(keras.layers.Embedding(50, 8)(tokens))
    h = keras.layers.Dropout(0.3)(keras.layers.GlobalAveragePooling1D()(h))
    model = keras.Model({"tokens": tokens}, keras.layers.Dense(1)(h))
    model.compile(keras.optimizers.Adam(1e-2), "mse", jit_compile=True)
    return model


def _snapshot(model: Any) -> list[tuple[str, Any]]:
    import numpy as np

    from keras_xla_guard import seam

    return [
        (str(getattr(v, "path", None) or v.name), np.array(v.numpy())) for v in seam.training_state(model)[0]
    ]


def _where(error: BaseException) -> str:
    """Where the KeyboardInterrupt came from, from its traceback (see the module docstring)."""
    frames = traceback.extract_tb(error.__traceback__)
    gate = [f.name for f in frames if f.filename.endswith("_interrupts.py")]
    if gate:
        return {"__exit__": "held", "check": "checkpoint", "_on_signal": "forced"}.get(gate[0], gate[0])
    in_warmup = [f for f in frames if f.filename.endswith(os.path.join("keras_xla_guard", "warmup.py"))]
    # Before the gate the restore loop ran in `_warm_up`'s `finally`.
    if in_warmup and "assign" in (in_warmup[-1].line or ""):
        return "restore"
    return "run"


class _Box:
    """Whether a SIGINT may raise now (only while `warm_up` runs), and how many came too late."""

    inside = False
    late = 0


def _on_sigint(signum: int, frame: Any) -> None:
    # The harness around warm_up must not be hit: it would lose the trial's bookkeeping.
    if _Box.inside:
        raise KeyboardInterrupt
    _Box.late += 1


def _attempt(call: Any) -> str:
    try:
        call()
        return "completed"
    except KeyboardInterrupt as e:
        return _where(e)


def _child(first: int, trials: int, double_every: int, seed: int) -> None:
    """Runs trials `first`..`trials - 1`, one JSON line each; exits 3 after a trial that broke TensorFlow."""
    import numpy as np
    import tensorflow as tf

    from keras_xla_guard import seam, warm_up

    model = _model()
    rng = np.random.default_rng(0)
    x = {"tokens": rng.integers(1, 50, (8, 5)).astype("int32")}
    model.fit(x, rng.standard_normal((8, 1)).astype("float32"), epochs=1, verbose=0)
    spec = ({"tokens": tf.TensorSpec((None, None), tf.int32)}, tf.TensorSpec((None, 1), tf.float32))
    shapes = [({"tokens": (8, n)}, (8, 1)) for n in (5, 7, 9)]
    warm_up(model, shapes, element_spec=spec)  # compiles; the trials run warm
    before = _snapshot(model)
    durations = []
    for _ in range(3):
        started = time.perf_counter()
        warm_up(model, shapes, element_spec=spec)
        durations.append(time.perf_counter() - started)
    window = sorted(durations)[1]
    signal.signal(signal.SIGINT, _on_sigint)
    pid = os.getpid()
    for trial in range(first, trials):
        chooser = random.Random(seed * 100_003 + trial)
        delays = [chooser.uniform(0, window)]
        if double_every and trial % double_every == double_every - 1:
            delays.append(delays[0] + chooser.uniform(0, 0.02))
        timers = [threading.Timer(d, os.kill, (pid, signal.SIGINT)) for d in delays]
        late = _Box.late
        broken = None
        for t in timers:
            t.start()
        _Box.inside = True
        try:
            outcome = _attempt(lambda: warm_up(model, shapes, element_spec=spec))
        except KeyboardInterrupt:
            outcome = "harness"  # a second signal hit the first one's handler
        except Exception as e:  # noqa: BLE001 - TensorFlow's state broken by an earlier interrupt
            outcome, broken = "tf_broken", f"{type(e).__name__}: {str(e)[:200]}"
        _Box.inside = False
        for t in timers:
            t.join()
        time.sleep(0.05)
        if outcome == "completed" and _Box.late > late:
            outcome = "late"
        after = _snapshot(model)
        changed = [name for (name, a), (_, b) in zip(before, after) if not np.array_equal(a, b)]
        record = {
            "trial": trial,
            "signals": len(delays),
            "outcome": outcome,
            "changed": changed,
            "iterations": int(model.optimizer.iterations.numpy()),
            "window_s": round(window, 4),
            "broken": broken,
        }
        print(TRIAL_PREFIX + json.dumps(record), flush=True)
        if broken is not None:
            sys.exit(3)
        if changed:
            # Each trial starts from the snapshot.
            for variable, (_, value) in zip(seam.training_state(model)[0], before):
                variable.assign(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=120)
    parser.add_argument("--double-every", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--label", default="", help="what code ran (e.g. a commit), echoed in the JSON")
    parser.add_argument(
        "--scenario", choices=("warmup", "fit"), default="warmup", help="what the signals interrupt"
    )
    parser.add_argument(
        "--no-guard", action="store_true", help="with --scenario fit: the same fits without a guard (control)"
    )
    parser.add_argument("--child-from", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _stress_fit

    if args.child_from is not None:
        if args.scenario == "fit":
            _stress_fit.child(args.child_from, args.trials, args.double_every, args.seed, not args.no_guard)
        else:
            _child(args.child_from, args.trials, args.double_every, args.seed)
        return

    records: list[dict[str, Any]] = []
    exits: list[dict[str, Any]] = []
    children = 0
    while len(records) < args.trials:
        children += 1
        proc = subprocess.run(
            [
                sys.executable,
                __file__,
                "--trials",
                str(args.trials),
                "--double-every",
                str(args.double_every),
                "--seed",
                str(args.seed),
                "--scenario",
                args.scenario,
                *(["--no-guard"] if args.no_guard else []),
                "--child-from",
                str(len(records)),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        got = [
            json.loads(line[len(TRIAL_PREFIX) :])
            for line in proc.stdout.splitlines()
            if line.startswith(TRIAL_PREFIX)
        ]
        if not got:
            sys.stderr.write(proc.stderr[-4000:])
            raise SystemExit(f"a child ran no trial (exit {proc.returncode})")
        if len(records) + len(got) < args.trials:
            # A child that stopped early: why, from its exit status and last words.
            exits.append(
                {
                    "after_trial": len(records) + len(got) - 1,
                    "returncode": proc.returncode,
                    "stderr_tail": proc.stderr.strip().splitlines()[-3:],
                }
            )
        records.extend(got)
    if args.scenario == "fit":
        print(json.dumps({**_fit_result(args, records, children), "early_child_exits": exits}, indent=2))
        return
    outcomes = {
        k: 0
        for k in (
            "completed",
            "checkpoint",
            "forced",
            "held",
            "restore",
            "run",
            "harness",
            "late",
            "tf_broken",
        )
    }
    for r in records:
        outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
    changed = [r for r in records if r["changed"]]
    print(
        json.dumps(
            {
                "benchmark": "stress_warmup_interrupt",
                "label": args.label,
                "trials": len(records),
                "double_signal_trials": sum(r["signals"] == 2 for r in records),
                "child_processes": children,
                "signal_window_s": sorted({r["window_s"] for r in records}),
                "outcomes": outcomes,
                "trials_with_changed_variables": len(changed),
                "max_variables_changed": max((len(r["changed"]) for r in changed), default=0),
                "iterations_seen": sorted({r["iterations"] for r in records}),
                "changed": [
                    {
                        "trial": r["trial"],
                        "signals": r["signals"],
                        "outcome": r["outcome"],
                        "changed": len(r["changed"]),
                        "names": r["changed"][:12],
                    }
                    for r in changed
                ],
                "tf_broken": [
                    {"trial": r["trial"], "signals": r["signals"], "error": r["broken"]}
                    for r in records
                    if r["broken"]
                ],
            },
            indent=2,
        )
    )


def _fit_result(args: argparse.Namespace, records: list[dict[str, Any]], children: int) -> dict[str, Any]:
    import _stress_fit

    return {
        "benchmark": "stress_warmup_interrupt",
        "scenario": "fit",
        "guarded": not args.no_guard,
        "backend": os.environ.get("KERAS_BACKEND", "tensorflow"),
        "label": args.label,
        "trials": len(records),
        "double_signal_trials": sum(r["signals"] == 2 for r in records),
        "child_processes": children,
        "signal_window_s": sorted({r["window_s"] for r in records}),
        **_stress_fit.summary(records),
    }


if __name__ == "__main__":
    main()
