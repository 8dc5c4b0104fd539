"""What the analysis still sees at each host tracer level of TensorFlow's profiler.

Trains the loop of examples/multiworker_custom_loop.py in one process
(default strategy), compiles outside the windows, then profiles the same
6 steps once per `ProfilerOptions(host_tracer_level=N, python_tracer_level=0,
device_tracer_level=0)`, N = 1, 2, 3 (TensorFlow's default is 2), and
analyzes each trace with `analyze_trace`. Prints one JSON object: per level
the XLA executions, XLA and plain-op time, and the plain op types the
report lists. Cited in docs/multiworker.md (candidate `raw-level1`).

Usage: python benchmarks/profiler_levels.py
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

STEPS = 6
LEVELS = (1, 2, 3)


def main() -> int:
    import tensorflow as tf
    from multiworker_custom_loop import build

    from keras_xla_guard import analyze_trace

    dataset, step = build(tf.distribute.get_strategy())
    batches = list(dataset)[:STEPS]
    for x, y in batches[:2]:
        step(x, y)  # compile before the windows
    levels = {}
    with tempfile.TemporaryDirectory(prefix="kxg_levels_") as tmp:
        for level in LEVELS:
            log_dir = os.path.join(tmp, f"level{level}")
            options = tf.profiler.experimental.ProfilerOptions(
                host_tracer_level=level, python_tracer_level=0, device_tracer_level=0
            )
            tf.profiler.experimental.start(log_dir, options=options)
            for x, y in batches:
                step(x, y)
            tf.profiler.experimental.stop()
            (trace,) = Path(log_dir).rglob("*.xplane.pb")
            report = analyze_trace(str(trace))
            levels[str(level)] = {
                "xla_executions": report.xla_executions,
                "xla_time_s": report.xla_time_s,
                "non_xla_op_time_s": report.non_xla_op_time_s,
                "xla_time_fraction": report.xla_time_fraction,
                "non_xla_op_types": sorted({op.op_type for op in report.top_non_xla_ops}),
            }
    print(json.dumps({"benchmark": "profiler_levels", "steps": STEPS, "levels": levels}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
