"""Benchmark: wall time of `keras-xla-guard doctor --json`, end to end.

Runs the command line in a fresh interpreter several times, alternating the
full doctor with `--no-probe`, and reports medians: the whole command's wall
time, the time `doctor()` itself reports (TensorFlow's import excluded when
the probe is skipped) and the probe child's time. The difference between the
two variants is what the measured probe costs. Machine load shows up
directly in these numbers (both TensorFlow imports are CPU-bound), so the
JSON records the 1-minute load average before and after.

Usage:

```
.venv/bin/python benchmarks/bench_doctor.py            # 3 rounds
.venv/bin/python benchmarks/bench_doctor.py --rounds 5
```
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def _run(*extra: str) -> tuple[float, dict]:
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "keras_xla_guard.cli", "doctor", "--json", *extra],
        capture_output=True,
        text=True,
        check=True,
    )
    return time.perf_counter() - started, json.loads(proc.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternated rounds (default 3)")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    full_wall, full_doctor, probe_s, bare_wall = [], [], [], []
    for _ in range(args.rounds):
        wall, data = _run()
        full_wall.append(wall)
        full_doctor.append(data["seconds"])
        probe_s.append(data["probe"]["seconds"])
        wall, _ = _run("--no-probe")
        bare_wall.append(wall)
    median = statistics.median
    print(
        json.dumps(
            {
                "rounds": args.rounds,
                "cpus": os.cpu_count(),
                "load_avg_1m_before": round(load_before, 2),
                "load_avg_1m_after": round(os.getloadavg()[0], 2),
                "doctor_wall_s_median": round(median(full_wall), 2),
                "doctor_reported_s_median": round(median(full_doctor), 2),
                "probe_child_s_median": round(median(probe_s), 2),
                "no_probe_wall_s_median": round(median(bare_wall), 2),
                "probe_cost_s_median": round(median(full_wall) - median(bare_wall), 2),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
