"""Repeats 2-worker training and counts crashes, per profiling mode and scenario.

Each run starts two worker processes on 127.0.0.1 (MultiWorkerMirroredStrategy)
that train the Keras 3 custom loop of examples/multiworker_custom_loop.py
(scenario `loop`) or tf_keras `fit` (scenario `fit`) for 3 epochs of 6
steps, every epoch profiled from its first step (3 profiler stops per
profiling worker and run; modes and scenarios in
benchmarks/_stress_worker.py). Mode x scenario pairs are alternated run by
run, so machine load falls on all of them alike. A run is `ok`, `crash`
(a worker killed by a signal: the C library's "double free or corruption"
aborts with SIGABRT; the last stderr line and the Python stacks that
faulthandler printed are kept), `port` (a port was taken before a worker
bound it; not counted as a run) or `error`. Prints one JSON object.

Usage: python benchmarks/stress_multiworker.py [--runs 10] [--modes none,guard,...]
    [--scenarios loop,fit]
Run through benchmarks/save_result.py to keep the result (`make stress-multiworker`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import _multiworker  # noqa: E402 - from tests/, put on the path above

WORKER = Path(__file__).with_name("_stress_worker.py")
MODES = ("none", "guard", "guard-all", "raw-all", "raw-chief", "raw-level1", "raw-quiesce", "raw-server")
SCENARIOS = ("loop", "fit")


def _crash_detail(message: str) -> dict[str, object]:
    """The abort message and, per thread faulthandler dumped, its innermost Python frame."""
    lines = message.splitlines()
    abort = [ln for ln in lines if re.search(r"free\(\)|corruption|Fatal Python error", ln)]
    threads: list[str] = []
    for i, line in enumerate(lines):
        if re.match(r"\s*(Current thread|Thread) 0x", line):
            frame = lines[i + 1].strip() if i + 1 < len(lines) else ""
            threads.append(f"{line.strip()} {frame}")
    return {"first_line": lines[0] if lines else "", "abort": abort[:3], "threads": threads}


def run_one(mode: str, scenario: str, root: Path, index: int) -> dict[str, object]:
    log_dir = root / f"{mode}_{scenario}_{index}" / "log"
    started = time.perf_counter()
    try:
        # Ports for the profiler servers of `raw-server` (unused otherwise).
        profiler_ports = ",".join(str(p) for p in _multiworker.free_ports(2))
        run = _multiworker.run_once(WORKER, log_dir, mode, scenario, profiler_ports)
        statuses = [w["statuses"] for w in run["workers"]]
        # "skipped" is a worker the guard does not profile by design.
        failed = [s for s in statuses if any(v == "failed" for v in s.values())]
        outcome = {
            "outcome": "ok",
            "report_statuses": statuses,
            "reports_failed": len(failed),
            "traces": [len(w["traces"]) for w in run["workers"]],
        }
    except _multiworker.Retryable as e:
        text = str(e)
        kind = "port" if _multiworker.PORT_TAKEN in text else "crash"
        outcome = {"outcome": kind, **_crash_detail(text)}
    except AssertionError as e:
        outcome = {"outcome": "error", "message": str(e)[-600:]}
    outcome.update(mode=mode, scenario=scenario, wall_s=round(time.perf_counter() - started, 1))
    return outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="runs per mode. Defaults to 10.")
    parser.add_argument(
        "--modes", default="guard", help=f"comma-separated, from {','.join(MODES)}. Defaults to guard."
    )
    parser.add_argument(
        "--scenarios",
        default="loop,fit",
        help=f"comma-separated, from {','.join(SCENARIOS)}. Defaults to loop,fit.",
    )
    args = parser.parse_args(argv)
    bad = [m for m in args.modes.split(",") if m not in MODES]
    bad += [s for s in args.scenarios.split(",") if s not in SCENARIOS]
    if args.runs < 1 or bad:
        print(
            f"--runs must be >= 1, --modes from {MODES} and --scenarios from {SCENARIOS}. "
            f"Received: runs={args.runs}, modes={args.modes!r}, scenarios={args.scenarios!r}",
            file=sys.stderr,
        )
        return 2
    modes = [(m, s) for m in args.modes.split(",") for s in args.scenarios.split(",")]
    runs: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="kxg_stress_") as tmp:
        done = {m: 0 for m in modes}
        attempts = 0
        # Alternate the modes; a run lost to a taken port is repeated.
        while min(done.values()) < args.runs and attempts < 3 * args.runs * len(modes):
            for mode in modes:
                if done[mode] >= args.runs:
                    continue
                attempts += 1
                result = run_one(*mode, Path(tmp), attempts)
                runs.append(result)
                print(json.dumps(result), file=sys.stderr, flush=True)
                if result["outcome"] != "port":
                    done[mode] += 1
    summary = {}
    for mode, scenario in modes:
        counted = [
            r for r in runs if (r["mode"], r["scenario"]) == (mode, scenario) and r["outcome"] != "port"
        ]
        crashes = [r for r in counted if r["outcome"] == "crash"]
        summary[f"{mode}/{scenario}"] = {
            "runs": len(counted),
            "ok": sum(r["outcome"] == "ok" for r in counted),
            "crash": len(crashes),
            # Which worker died: "worker 1 failed (-6):" -> "worker 1".
            "crashed_workers": sorted({r["first_line"].split(" failed")[0] for r in crashes}),
            "error": sum(r["outcome"] == "error" for r in counted),
            "median_wall_s": sorted(r["wall_s"] for r in counted)[len(counted) // 2] if counted else None,
        }
    print(
        json.dumps(
            {
                "benchmark": "stress_multiworker",
                "runs_per_mode": args.runs,
                "epochs": 3,
                "steps_per_epoch": 6,
                "profiled_epochs": [0, 1, 2],
                "summary": summary,
                "runs": runs,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
