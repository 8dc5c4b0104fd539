"""Runs one benchmark script and saves the JSON it prints under benchmarks/results/.

The saved document wraps the benchmark's own JSON (`result`) with what a
reader needs to judge it: the command, when it ran and for how long, and
the machine (CPU count, 1-minute load average before and after, Python,
TensorFlow and Keras versions) and the code (commit, and the tracked files
changed since when it ran on uncommitted code). docs/benchmarks.md and the README cite these files.

Usage: python benchmarks/save_result.py [--results-dir DIR] benchmarks/bench_fix.py [its args...]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def code_state() -> dict[str, Any] | None:
    """The commit checked out and the tracked files changed since, or `None` outside git.

    A result measured on uncommitted code says so: its figures belong to
    the commit plus those changes, not to the commit.
    """
    root = Path(__file__).resolve().parent.parent

    def git(*argv: str) -> str:
        return subprocess.run(["git", *argv], cwd=root, capture_output=True, text=True, check=True).stdout

    try:
        commit = git("rev-parse", "--short", "HEAD").strip()
        # Not stripped: each line's status starts with a space or a letter.
        changed = git("status", "--porcelain", "--untracked-files=no").splitlines()
    except (OSError, subprocess.CalledProcessError):
        return None
    return {"commit": commit, "changed_files": sorted(line[3:] for line in changed)}


def last_json_object(text: str) -> dict[str, Any]:
    """The last top-level JSON object printed in `text` (one line or indented)."""
    decoder = json.JSONDecoder()
    starts = [i for i in range(len(text)) if text[i] == "{" and (i == 0 or text[i - 1] == "\n")]
    for start in reversed(starts):
        try:
            doc, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            continue
        if isinstance(doc, dict) and not text[end:].strip():
            return doc
    raise ValueError("no JSON object at the end of the benchmark's output")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    parser.add_argument("script", type=Path)
    parser.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    started = dt.datetime.now(dt.UTC)
    # Before the run: a long benchmark may outlive the commit it measured.
    code = code_state()
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(args.script), *args.args], capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        print(f"save_result: {args.script} exited {proc.returncode}; nothing saved", file=sys.stderr)
        return proc.returncode
    result = last_json_object(proc.stdout)
    doc = {
        "script": args.script.name,
        "args": args.args,
        "started_utc": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "wall_s": round(wall, 1),
        "machine": {
            "cpus": os.cpu_count(),
            "load_avg_1min_before": round(load_before, 2),
            "load_avg_1min_after": round(os.getloadavg()[0], 2),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "tensorflow": _version("tensorflow-cpu") or _version("tensorflow"),
            # keras-nightly installs the same `keras` module under another name.
            "keras": _version("keras") or _version("keras-nightly"),
            "jax": _version("jax"),
            "keras_backend": os.environ.get("KERAS_BACKEND"),
        },
        "code": code,
        "result": result,
    }
    args.results_dir.mkdir(parents=True, exist_ok=True)
    out = args.results_dir / f"{args.script.stem}-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
