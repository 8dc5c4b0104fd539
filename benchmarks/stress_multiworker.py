"""Repeats the 2-worker Keras 3 custom loop and counts crashes, per profiling mode.

Each run starts two worker processes on 127.0.0.1 (MultiWorkerMirroredStrategy,
the loop of examples/multiworker_custom_loop.py, 3 epochs, epochs 0 and 2
profiled; modes in benchmarks/_stress_worker.py). Modes are alternated run
by run, so machine load falls on all of them alike. A run is `ok`, `crash`
(a worker killed by a signal: the C library's "double free or corruption"
aborts with SIGABRT; the last stderr line and the Python stacks that
faulthandler printed are kept), `port` (a port was taken before a worker
bound it; not counted as a run) or `error`. Prints one JSON object.

Usage: python benchmarks/stress_multiworker.py [--runs 10] [--modes none,guard,...]
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
import _multiworker  # noqa: E402

WORKER = Path(__file__).with_name("_stress_worker.py")
MODES = ("none", "guard", "guard-sync", "raw-own", "raw-shared")


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


def run_one(mode: str, root: Path, index: int) -> dict[str, object]:
    log_dir = root / f"{mode}_{index}" / "log"
    started = time.perf_counter()
    try:
        run = _multiworker.run_once(WORKER, log_dir, mode)
        statuses = [w["statuses"] for w in run["workers"]]
        failed = [s for s in statuses if any(v != "ok" for v in s.values())]
        outcome = {"outcome": "ok", "report_statuses": statuses, "reports_not_ok": len(failed)}
    except _multiworker.Retryable as e:
        text = str(e)
        kind = "port" if _multiworker.PORT_TAKEN in text else "crash"
        outcome = {"outcome": kind, **_crash_detail(text)}
    except AssertionError as e:
        outcome = {"outcome": "error", "message": str(e)[-600:]}
    outcome.update(mode=mode, wall_s=round(time.perf_counter() - started, 1))
    return outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="runs per mode. Defaults to 10.")
    parser.add_argument("--modes", default="none,guard,raw-shared",
                        help=f"comma-separated, from {','.join(MODES)}.")
    args = parser.parse_args(argv)
    modes = args.modes.split(",")
    bad = [m for m in modes if m not in MODES]
    if args.runs < 1 or bad:
        print(f"--runs must be >= 1 and --modes from {MODES}. Received: runs={args.runs}, "
              f"modes={args.modes!r}", file=sys.stderr)
        return 2
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
                result = run_one(mode, Path(tmp), attempts)
                runs.append(result)
                print(json.dumps(result), file=sys.stderr, flush=True)
                if result["outcome"] != "port":
                    done[mode] += 1
    summary = {}
    for mode in modes:
        counted = [r for r in runs if r["mode"] == mode and r["outcome"] != "port"]
        summary[mode] = {
            "runs": len(counted),
            "ok": sum(r["outcome"] == "ok" for r in counted),
            "crash": sum(r["outcome"] == "crash" for r in counted),
            "error": sum(r["outcome"] == "error" for r in counted),
            "median_wall_s": sorted(r["wall_s"] for r in counted)[len(counted) // 2] if counted else None,
        }
    print(json.dumps({"benchmark": "stress_multiworker", "runs_per_mode": args.runs,
                      "summary": summary, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
