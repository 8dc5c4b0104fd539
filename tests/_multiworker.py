"""Runs a 2-process MultiWorkerMirroredStrategy job on 127.0.0.1 for tests.

Shared by tests/test_distributed.py (tf_keras `fit`), the Keras 3 loop tests in tests/test_distributed.py
(the Keras 3 custom loop) and benchmarks/stress_multiworker.py. Every worker
script takes `TASK_INDEX PORT0,PORT1 LOG_DIR [options]`, builds its own
`TF_CONFIG` from them and prints one JSON line last.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# Runs that profile every worker (`--all-workers`, the opt-in mode) meet
# TensorFlow's profiler-stop abort on worker 1: 1 run in 10 measured on a
# quiet machine (docs/multiworker.md), all 3 attempts of one CI run on a
# loaded one. Six fresh attempts keep such a test from failing on it.
ATTEMPTS = 6
WORKER_TIMEOUT_S = 240
# What a worker prints when its port was taken before it bound it.
PORT_TAKEN = "Could not start gRPC server"


class Retryable(AssertionError):
    """A worker died by a signal or could not bind its port."""


def free_ports(n: int) -> list[int]:
    """Ports the OS had free a moment ago.

    TensorFlow's gRPC server turns SO_REUSEPORT off, so a socket kept bound
    here would block the worker itself: another process can still take a
    port before the worker binds it, and `run_workers` retries then.
    """
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def run_workers(script: Path, log_dir: Path, *extra: str, attempts: int = ATTEMPTS) -> dict[str, Any]:
    """Runs the two workers; again in a fresh log dir (fresh ports) if one
    lost its port to another process or died by a signal.

    Under MultiWorkerMirroredStrategy TensorFlow's own profiler stop aborts
    a worker natively now and then ("free(): invalid pointer", SIGABRT, or
    SIGSEGV; measured in docs/multiworker.md); a worker that exits with any
    other error is not retried.

    Returns:
        `{"log_dir", "workers" (each worker's JSON), "pids", "attempts"}`.
    """
    failures = []
    for attempt in range(attempts):
        try:
            run = run_once(script, log_dir.with_name(f"{log_dir.name}_{attempt}"), *extra)
            run["attempts"] = attempt + 1
            run["retried_for"] = failures
            return run
        except Retryable as e:
            failures.append(str(e).splitlines()[0])
            failure = e
    raise AssertionError(f"workers failed {attempts} times; last:\n{failure}")


def _start_and_wait(
    script: Path, log_dir: Path, extra: tuple[str, ...], end_on_failure: bool
) -> tuple[list[subprocess.Popen[str]], list[tuple[str, str]]]:
    """Starts two worker processes on 127.0.0.1, waits (bounded), kills leftovers.

    Returns:
        The processes and each one's `(stdout, stderr)` text.
    """
    ports = ",".join(str(p) for p in free_ports(2))
    env = dict(os.environ)
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    # A worker that aborts natively prints every thread's Python stack.
    env["PYTHONFAULTHANDLER"] = "1"
    # The package of this checkout, also for scripts outside the repo root.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    outputs = [log_dir.parent / f"{log_dir.name}_worker{task}.{kind}" for task in range(2)
               for kind in ("out", "err")]
    log_dir.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        files = [stack.enter_context(open(f, "w")) for f in outputs]
        procs = [
            subprocess.Popen(
                [sys.executable, str(script), str(task), ports, str(log_dir), *extra],
                stdout=files[2 * task],
                stderr=files[2 * task + 1],
                text=True,
                env=env,
                cwd=str(REPO),
            )
            for task in range(2)
        ]
        try:
            deadline = time.monotonic() + WORKER_TIMEOUT_S
            while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
                if end_on_failure and any(p.poll() not in (None, 0) for p in procs):
                    break
                time.sleep(0.5)
        finally:
            # SIGKILL: a worker blocked in a collective does not always honour SIGTERM.
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    return procs, [(outputs[2 * t].read_text(), outputs[2 * t + 1].read_text()) for t in range(2)]


def run_until_exit(script: Path, log_dir: Path, *extra: str) -> dict[str, Any]:
    """Runs the two workers until both have exited (bounded), whatever their exit.

    For runs in which a worker is meant to die: its peer is left to notice
    and end by itself.

    Returns:
        `{"log_dir", "returncodes", "workers"}`: each worker's last JSON
        line (with its `stderr`), or `None` when it printed none.
    """
    procs, texts = _start_and_wait(script, log_dir, extra, end_on_failure=False)
    workers = []
    for out, err in texts:
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        workers.append({**json.loads(lines[-1]), "stderr": err} if lines else None)
    return {"log_dir": log_dir, "returncodes": [p.returncode for p in procs], "workers": workers,
            "stderr": [err for _, err in texts]}


def run_once(script: Path, log_dir: Path, *extra: str) -> dict[str, Any]:
    """Starts two worker processes on 127.0.0.1, waits (bounded), kills leftovers.

    A worker that fails ends the run at once: its peer would otherwise wait
    for it until the timeout.

    Raises:
        Retryable: See `run_workers`.
        AssertionError: If a worker failed otherwise or printed no JSON.
    """
    procs, texts = _start_and_wait(script, log_dir, extra, end_on_failure=True)
    messages = [f"worker {t} failed ({p.returncode}):\n{out[-2000:]}\n{err[-8000:]}"
                for t, (p, (out, err)) in enumerate(zip(procs, texts))]
    # Looked at for both workers first: the peer of the one that failed was
    # killed here, which is no reason of its own.
    for proc, (_, err), message in zip(procs, texts, messages):
        if PORT_TAKEN in err or (proc.returncode < 0 and proc.returncode != -signal.SIGKILL):
            raise Retryable(message)
    results = []
    for proc, (out, err), message in zip(procs, texts, messages):
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        assert proc.returncode == 0 and lines, message
        results.append({**json.loads(lines[-1]), "stderr": err})
    return {"log_dir": log_dir, "workers": results, "pids": [p.pid for p in procs]}


def tf_config(task: int, ports: str) -> str:
    """The `TF_CONFIG` of worker `task` in a cluster of workers on `ports`."""
    return json.dumps(
        {
            "cluster": {"worker": [f"127.0.0.1:{p}" for p in ports.split(",")]},
            "task": {"type": "worker", "index": task},
        }
    )
