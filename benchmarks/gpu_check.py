"""GPU check on JAX: the guard's figures on a real accelerator trace, beside xprof's and jax.monitoring's.

The one prepared script for the lent GPU machine, which has JAX (CUDA),
TensorBoard and protobuf but no TensorFlow: the package runs from source
(`PYTHONPATH=.`), xprof's wheels come along (`make gpu-wheels`). It fits a
small Keras MLP on `KERAS_BACKEND=jax` under `XlaGuardCallback`, with two
batch shapes (two train-step compilations), profiling epoch 0 from its first
step (the compilations inside the window) and epoch 1 (steady state), and
checks, per window:

* steps, program launches and compilations of the guard's report against
  xprof's conversion of the same trace (its trace viewer's `train N` step
  markers, PjRt launch events and `*Compiler::RunBackend` events);
* the window's compilations against what `jax.monitoring` counted in it,
  and the run's train-step compilations against this script's own
  `jax.monitoring` listener;
* on a GPU: the report's time base is the device's, its launches equal the
  "XLA Modules" runs xprof derives for the `/device:GPU:N` planes, and its
  XLA time is within 10% of theirs.

Prints one JSON document; `--save` also writes it under benchmarks/results/
and the steady window's trace, gzipped, to `--golden` (the GPU-plane tests'
golden). Exits 0 when every check holds, 1 when one fails. Without a GPU it
prints JSON saying so and exits 0, having trained nothing; `--dry-run` runs
everything on CPU instead (tests/on_jax/test_gpu_check.py does, so the script
cannot rot), the device checks then `null`.

Usage: PYTHONPATH=. python benchmarks/gpu_check.py [--steps 12] [--save] [--dry-run]   (or `make gpu-check`)
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import gzip
import json
import os
import platform
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
GOLDEN = Path(__file__).resolve().parents[1] / "tests" / "trace" / "data" / "jax_gpu.xplane.pb.gz"
# xprof's per-module times and the guard's come from the same kernel spans;
# 10% allows for xprof's rounding to microseconds and kernels cut by the window.
TIME_REL = 0.10
XLA_MODULES_LINE = "XLA Modules"
# One program run, as PjRt names its host-side launch (JAX 0.6: PjRtCpuExecutable::ExecuteHelper,
# 0.10: CommonPjRtLoadedExecutable::ExecuteHelperOnSingleDevice; PjRtStreamExecutor... on GPU).
LAUNCH = re.compile(r"^\w*PjRt\w*Executable::ExecuteHelper\w*$")
RUN_BACKEND = re.compile(r"^\w*Compiler::RunBackend$")
STEP = re.compile(r"^train \d+$")


class _Compiles:
    """This script's own jax.monitoring listener: backend compilations by JAX's name."""

    def __init__(self) -> None:
        self.names: collections.Counter[str] = collections.Counter()

    def __call__(self, event: str, duration: float, **kwargs: Any) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            self.names[str(kwargs.get("fun_name"))] += 1


def machine(jax: Any, keras: Any) -> dict[str, Any]:
    """Where this ran."""
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "keras": keras.__version__,
        "devices": [str(d) for d in jax.devices()],
        "tensorflow_importable": _importable("tensorflow"),
        "load_avg_1min": round(os.getloadavg()[0], 2),
    }


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def xprof_figures(trace: str) -> dict[str, Any]:
    """Steps, launches and compilations in xprof's trace viewer, and its derived device module runs."""
    from xprof.convert import raw_to_tool_data

    data, _ = raw_to_tool_data.xspace_to_tool_data([trace], "trace_viewer", {})
    events = json.loads(data)["traceEvents"]
    names = collections.Counter(e["name"] for e in events if e.get("ph") == "X")
    devices = {
        e["pid"]
        for e in events
        if e.get("ph") == "M"
        and e.get("name") == "process_name"
        and e["args"]["name"].startswith("/device:GPU:")
    }
    module_lines = {
        (e["pid"], e["tid"])
        for e in events
        if e.get("ph") == "M"
        and e.get("name") == "thread_name"
        and e["pid"] in devices
        and e["args"]["name"].startswith(XLA_MODULES_LINE)
    }
    durations = [
        e["dur"] for e in events if e.get("ph") == "X" and (e.get("pid"), e.get("tid")) in module_lines
    ]
    return {
        "steps": sum(n for name, n in names.items() if STEP.match(name)),
        "launches": sum(n for name, n in names.items() if LAUNCH.match(name)),
        "compilations": sum(n for name, n in names.items() if RUN_BACKEND.match(name)),
        "gpu_planes": len(devices),
        "device_module_runs": len(durations),
        "device_module_s": sum(durations) * 1e-6,
    }


def fit(steps: int, log_dir: str) -> tuple[Any, _Compiles]:
    """Fits the MLP for 2 epochs under the guard; returns the guard and the run's own compile count."""
    import jax
    import keras
    import numpy as np

    from keras_xla_guard import XlaGuardCallback

    oracle = _Compiles()
    jax.monitoring.register_event_duration_secs_listener(oracle)
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((64,)),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    model.compile("adam", "mse")
    # `steps` batches of 64 and a last one of 32: two train-step programs.
    x = np.random.default_rng(0).standard_normal((steps * 64 + 32, 64)).astype("float32")
    guard = XlaGuardCallback(log_dir=log_dir, profile_epochs=(0, 1), skip_steps=0, max_steps=None, verbose=0)
    model.fit(x, x[:, :1], batch_size=64, epochs=2, shuffle=False, callbacks=[guard], verbose=0)
    return guard, oracle


def check_window(epoch: int, guard: Any, gpu: bool) -> dict[str, Any]:
    """One profiled window's figures beside xprof's and jax.monitoring's, and the checks."""
    report = guard.reports[epoch]
    counted = guard.compilations[epoch]
    # Validation runs after the window closed; everything else of the epoch is inside it.
    in_window = sum(1 for row in counted.rows if row.function != "test")
    xprof = xprof_figures(report.trace_path) if report.ok else {}
    out: dict[str, Any] = {
        "status": report.status,
        "time_base": report.time_base,
        "steps_profiled": report.steps_profiled,
        "xla_executions": report.xla_executions,
        "xla_time_s": report.xla_time_s,
        "compilations": report.compilations,
        "compile_time_s": report.compile_time_s,
        "window_wall_s": report.window_wall_s,
        "monitoring_compilations": in_window,
        "xprof": xprof,
        "text": str(report).splitlines(),
    }
    checks: dict[str, bool | None] = {
        "report_ok": report.ok,
        "steps_match_xprof": report.ok and report.steps_profiled == xprof["steps"],
        "launches_match_xprof": report.ok and report.xla_executions == xprof["launches"] > 0,
        "compilations_match_xprof": report.ok and report.compilations == xprof["compilations"],
        "compilations_match_monitoring": report.ok and report.compilations == in_window,
        "device_time_base": None,
        "executions_match_device_modules": None,
        "xla_time_matches_device_modules": None,
    }
    if gpu and report.ok:
        module_s = xprof["device_module_s"]
        checks["device_time_base"] = report.time_base == "device"
        checks["executions_match_device_modules"] = report.xla_executions == xprof["device_module_runs"]
        checks["xla_time_matches_device_modules"] = abs(report.xla_time_s - module_s) <= TIME_REL * module_s
    out["checks"] = checks
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=12, help="full batches per epoch (a short one follows)")
    parser.add_argument("--dry-run", action="store_true", help="run the checks on CPU when there is no GPU")
    parser.add_argument(
        "--save",
        action="store_true",
        help="write the JSON under --results and the steady window's trace to --golden",
    )
    parser.add_argument("--results", type=Path, default=RESULTS, help="where --save writes the JSON")
    parser.add_argument("--golden", type=Path, default=GOLDEN, help="where --save writes the gzipped trace")
    args = parser.parse_args(argv)
    if os.environ.setdefault("KERAS_BACKEND", "jax") != "jax":
        print(
            f"gpu_check runs Keras on JAX; unset KERAS_BACKEND. Received: KERAS_BACKEND="
            f"{os.environ['KERAS_BACKEND']!r}",
            file=sys.stderr,
        )
        return 2

    import jax
    import keras

    gpus = [str(d) for d in jax.devices() if d.platform == "gpu"]
    doc: dict[str, Any] = {"benchmark": "gpu_check", "machine": machine(jax, keras), "gpus": gpus}
    if not gpus and not args.dry_run:
        doc.update(
            gpu=False,
            ran=False,
            ok=True,
            reason="JAX sees no GPU here: nothing trained, no device plane checked (--dry-run runs on CPU)",
        )
        print(json.dumps(doc, indent=2))
        return 0
    if not _importable("xprof"):
        doc.update(
            gpu=bool(gpus),
            ran=False,
            ok=False,
            reason="xprof is not installed: carry its wheels (make gpu-wheels) and install them first",
        )
        print(json.dumps(doc, indent=2))
        return 1
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as root:
        guard, oracle = fit(args.steps, root)
        windows = {str(epoch): check_window(epoch, guard, bool(gpus)) for epoch in (0, 1)}
        train = [r for c in guard.compilations.values() for r in c.rows if r.function == "train"]
        run_checks = {
            "train_compilations_match_monitoring": len(train) == oracle.names["jit(train_step)"],
            "two_new_signatures_compiled": sorted(r.step for r in train if r.signature is not None)
            == [0, args.steps],
        }
        doc.update(
            gpu=bool(gpus),
            ran=True,
            dry_run=not gpus,
            windows=windows,
            train_compilations={"guard": len(train), "jax_monitoring": oracle.names["jit(train_step)"]},
            checks=run_checks,
        )
        doc["ok"] = all(run_checks.values()) and all(
            value is not False for w in windows.values() for value in w["checks"].values()
        )
        if args.save:
            stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
            args.results.mkdir(parents=True, exist_ok=True)
            doc["saved_trace"] = str(args.golden)
            (args.results / f"gpu_check-{stamp}.json").write_text(json.dumps(doc, indent=2) + "\n")
            args.golden.parent.mkdir(parents=True, exist_ok=True)
            with open(guard.reports[1].trace_path, "rb") as raw, gzip.open(args.golden, "wb") as packed:
                shutil.copyfileobj(raw, packed)
    print(json.dumps(doc, indent=2))
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
