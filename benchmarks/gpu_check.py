"""GPU readiness: does the guard read accelerator traces the way xprof does?

On a machine where TensorFlow sees a GPU, trains three tiny Keras models
(`jit_compile=True`, plain TF, and TF auto-clustering via
`tf.config.optimizer.set_jit(True)`), each with an `XlaGuardCallback`
profiling epoch 1, and checks the guard's device-plane figures against
figures read without the package:

* XLA executions and XLA time against the "XLA Modules" lines xprof
  derives for the `/device:GPU:N` planes (its trace viewer's);
* the plain model's device ops (occurrences, self time) against xprof's
  `framework_op_stats` device rows;
* the coverage of each mode: jit >= 0.9, plain 0, auto-clustering > 0.

Prints one JSON document; exits 0 when every check holds, 1 otherwise.
On a machine without a GPU it prints JSON saying so and exits 0, having
trained nothing (there is no device plane to check).

Usage: python benchmarks/gpu_check.py [--steps 12]   (or `make gpu-check`)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# xprof's per-op self times and the guard's come from the same kernel spans;
# 10% allows for xprof's rounding to microseconds on short kernels and for
# kernels cut by the window's edges.
SELF_TIME_REL = 0.10
XLA_MODULES_LINE = "XLA Modules"


def machine(tf: Any, keras: Any) -> dict[str, Any]:
    """Where this ran."""
    return {"cpus": os.cpu_count(), "python": platform.python_version(),
            "tensorflow": tf.__version__, "keras": keras.__version__,
            "load_avg_1min": round(os.getloadavg()[0], 2)}


def device_modules(trace: str) -> tuple[int, float]:
    """Runs and seconds of the "XLA Modules" lines xprof derives for the device planes.

    The GPU profiler writes no such line: xprof derives one per stream from
    the kernels' `hlo_module`/`program_id` stats when it loads a trace
    (`GenerateDerivedTimeLines`); its trace viewer shows them.
    """
    from xprof.convert import raw_to_tool_data

    data, _ = raw_to_tool_data.xspace_to_tool_data([trace], "trace_viewer", {})
    events = json.loads(data)["traceEvents"]
    devices = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
               and e["args"]["name"].startswith("/device:GPU:")}
    module_lines = {(e["pid"], e["tid"]) for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"
                    and e["pid"] in devices and e["args"]["name"].startswith(XLA_MODULES_LINE)}
    durations = [e["dur"] for e in events if e.get("ph") == "X" and (e.get("pid"), e.get("tid")) in module_lines]
    return len(durations), sum(durations) * 1e-6


def xprof_device_rows(trace: str) -> dict[tuple[str, str], dict[str, Any]]:
    """xprof's framework_op_stats rows that ran on the device."""
    from xprof.convert import raw_to_tool_data

    data, _ = raw_to_tool_data.xspace_to_tool_data([trace], "framework_op_stats", {})
    rows = {}
    for table in json.loads(data):
        cols = [c["id"] for c in table["cols"]]
        for row in table["rows"]:
            rec = dict(zip(cols, [c["v"] for c in row["c"]]))
            if rec.get("host_or_device") == "Device":
                rows[(rec["type"], rec["operation"])] = rec
    return rows


def train(mode: str, steps: int, log_dir: str) -> Any:
    """Fits a tiny MLP for 2 epochs with the guard profiling epoch 1."""
    import keras
    import numpy as np
    import tensorflow as tf

    from keras_xla_guard import XlaGuardCallback

    tf.config.optimizer.set_jit(mode == "auto_clustering")
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(512, activation="relu"),
                              keras.layers.Dense(512, activation="relu"), keras.layers.Dense(1)])
    model.compile("adam", "mse", jit_compile=(mode == "jit"))
    x = np.random.default_rng(0).standard_normal(((steps + 2) * 64, 64)).astype("float32")
    data = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(64)
    guard = XlaGuardCallback(log_dir=log_dir, profile_epochs=(1,), skip_steps=2, max_steps=steps,
                             write_summaries=False, verbose=0)
    model.fit(data, epochs=2, callbacks=[guard], verbose=0)
    tf.config.optimizer.set_jit(False)
    return guard.reports[1]


def check_mode(mode: str, report: Any, steps: int) -> dict[str, Any]:
    """The guard's figures of one mode beside the proto's and xprof's."""
    runs, module_s = device_modules(report.trace_path)
    rows = xprof_device_rows(report.trace_path)
    out: dict[str, Any] = {
        "status": report.status,
        "time_base": report.time_base,
        "steps_profiled": report.steps_profiled,
        "xla_time_fraction": report.xla_time_fraction,
        "xla_executions": report.xla_executions,
        "xla_time_s": report.xla_time_s,
        "non_xla_op_time_s": report.non_xla_op_time_s,
        "xprof_xla_module_runs": runs,
        "xprof_xla_module_s": module_s,
        "xprof_device_rows": len(rows),
    }
    checks = {
        "report_ok": report.status == "ok",
        "device_time_base": report.time_base == "device",
        "steps_profiled": report.steps_profiled == steps,
        "executions_match_xprof": report.xla_executions == runs,
    }
    if mode == "jit":
        checks["one_module_run_per_step"] = runs == steps
        checks["xla_time_matches_modules"] = abs(report.xla_time_s - module_s) <= SELF_TIME_REL * module_s
        checks["coverage_at_least_0.9"] = report.xla_time_fraction >= 0.9
    elif mode == "plain":
        checks["no_xla"] = (runs, report.xla_executions, report.xla_time_fraction) == (0, 0, 0.0)
        mismatched = []
        for op in report.top_non_xla_ops:
            rec = rows.get((op.op_type, op.op_name))
            if rec is None or rec["occurrences"] != op.count or abs(
                    op.self_time_s * 1e6 - rec["total_self_time"]) > SELF_TIME_REL * rec["total_self_time"]:
                mismatched.append({"op": [op.op_type, op.op_name], "guard": [op.count, op.self_time_s * 1e6],
                                   "xprof": rec and [rec["occurrences"], rec["total_self_time"]]})
        out["ops_not_matching_xprof"] = mismatched
        checks["top_ops_match_xprof"] = bool(report.top_non_xla_ops) and not mismatched
        device_us = sum(r["total_self_time"] for r in rows.values() if r["type"] != "IDLE")
        out["xprof_device_self_s"] = device_us * 1e-6
        checks["non_xla_time_matches_xprof"] = (
            abs(report.non_xla_op_time_s * 1e6 - device_us) <= SELF_TIME_REL * device_us
        )
    else:
        checks["clusters_ran"] = runs > 0
        checks["coverage_above_0"] = report.xla_time_fraction > 0
    out["checks"] = checks
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=12, help="profiled steps per model")
    args = parser.parse_args(argv)

    import keras
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    doc: dict[str, Any] = {"benchmark": "gpu_check", "machine": machine(tf, keras),
                           "gpus": [g.name for g in gpus]}
    if not gpus:
        doc.update(gpu=False, ran=False, ok=True,
                   reason="TensorFlow sees no GPU here: nothing trained, no device plane checked")
        print(json.dumps(doc, indent=2))
        return 0
    modes = {}
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as root:
        for mode in ("jit", "plain", "auto_clustering"):
            report = train(mode, args.steps, os.path.join(root, mode))
            modes[mode] = check_mode(mode, report, args.steps)
    doc.update(gpu=True, ran=True, modes=modes,
               ok=all(all(m["checks"].values()) for m in modes.values()))
    print(json.dumps(doc, indent=2))
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
