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
import warnings
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# Runs that profile every worker (`--all-workers`, the opt-in mode) meet
# TensorFlow's profiler-stop abort on worker 1: in 11 of 30 runs of the loop
# and 2 of 30 of fit in the newest stress result (distributed.py's
# ALL_WORKERS_CRASHES, docs/multiworker.md). Eight attempts all abort at the
# loop's rate in about 1 run of 3,000 (0.37 ** 8). Only that mode may ask for
# them; the default mode (`profile_workers="chief"`), which the product says
# never crashes, runs once.
ALL_WORKERS_ATTEMPTS = 8
# A port another process took before a worker bound it fails the run before
# any training: retried in every mode, and reported.
PORT_ATTEMPTS = 3
WORKER_TIMEOUT_S = 240
# What a worker prints when its port was taken before it bound it.
PORT_TAKEN = "Could not start gRPC server"


class Retryable(AssertionError):
    """A worker died by a signal or could not bind its port.

    Args:
        message: Both workers' exit codes and output.
        cause: One line: which worker, and the signal it died by or that its
            port was taken.
    """

    def __init__(self, message: str, cause: str) -> None:
        super().__init__(message)
        self.cause = cause
        self.port_taken = cause.endswith("port taken")


class FailedAttempt(UserWarning):
    """An attempt of a multi-worker run that failed and was retried (shown in pytest's summary)."""


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


def _report(attempt: int, failure: Retryable) -> str:
    """Says on stderr and as a `FailedAttempt` warning that an attempt failed, and why."""
    line = f"multi-worker attempt {attempt} failed: {failure.cause}"
    print(line, file=sys.stderr, flush=True)
    warnings.warn(line, FailedAttempt, stacklevel=3)
    return line


def run_workers(script: Path, log_dir: Path, *extra: str, crash_attempts: int = 1) -> dict[str, Any]:
    """Runs the two workers; a worker dead by a signal fails the run unless
    the opt-in all-workers mode allows more attempts.

    Under MultiWorkerMirroredStrategy TensorFlow's own profiler stop aborts
    a worker natively now and then when every worker profiles ("free():
    invalid pointer", SIGABRT, or SIGSEGV; measured in docs/multiworker.md).
    Only a run with `--all-workers` among `extra` may be given more attempts
    for that; every other failure ends the run at once. A taken port is
    retried (fresh log dir, fresh ports) in any mode. Every failed attempt
    is printed to stderr and warned as a `FailedAttempt` naming its signal.

    Args:
        script: The worker script.
        log_dir: Where the run logs; attempt `k` uses `<log_dir>_<k>`.
        *extra: The worker script's options.
        crash_attempts: Attempts allowed for workers dying by a signal.
            Defaults to `1`: no retry.

    Returns:
        `{"log_dir", "workers" (each worker's JSON), "pids", "attempts"
        (runs that trained, the successful one included), "failed_attempts"
        (one line each, with the signal), "port_retries"}`.

    Raises:
        ValueError: If `crash_attempts` > 1 without `--all-workers`.
        AssertionError: If the run failed; its message lists every attempt.
    """
    if crash_attempts != 1 and "--all-workers" not in extra:
        raise ValueError(
            "only the opt-in --all-workers mode may retry a crashed run. "
            f"Received: crash_attempts={crash_attempts!r}, extra={extra!r}"
        )
    failed: list[str] = []
    crashes = ports_taken = 0
    while True:
        attempt = crashes + ports_taken + 1
        try:
            run = run_once(script, log_dir.with_name(f"{log_dir.name}_{attempt - 1}"), *extra)
        except Retryable as failure:
            failed.append(_report(attempt, failure))
            if failure.port_taken:
                ports_taken += 1
            else:
                crashes += 1
            if crashes >= crash_attempts or ports_taken >= PORT_ATTEMPTS:
                raise AssertionError(
                    "multi-worker run failed; attempts:\n" + "\n".join(failed) + f"\nlast:\n{failure}"
                ) from None
            continue
        run.update(attempts=crashes + 1, failed_attempts=failed, port_retries=ports_taken)
        return run


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
    outputs = [
        log_dir.parent / f"{log_dir.name}_worker{task}.{kind}" for task in range(2) for kind in ("out", "err")
    ]
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
    return {
        "log_dir": log_dir,
        "returncodes": [p.returncode for p in procs],
        "workers": workers,
        "stderr": [err for _, err in texts],
    }


def run_once(script: Path, log_dir: Path, *extra: str) -> dict[str, Any]:
    """Starts two worker processes on 127.0.0.1, waits (bounded), kills leftovers.

    A worker that fails ends the run at once: its peer would otherwise wait
    for it until the timeout.

    Raises:
        Retryable: See `run_workers`.
        AssertionError: If a worker failed otherwise or printed no JSON.
    """
    procs, texts = _start_and_wait(script, log_dir, extra, end_on_failure=True)
    messages = [
        f"worker {t} failed ({p.returncode}):\n{out[-2000:]}\n{err[-8000:]}"
        for t, (p, (out, err)) in enumerate(zip(procs, texts))
    ]
    # Looked at for both workers first: the peer of the one that failed was
    # killed here, which is no reason of its own.
    for task, (proc, (_, err), message) in enumerate(zip(procs, texts, messages)):
        if PORT_TAKEN in err:
            raise Retryable(message, f"worker {task}: port taken")
        if proc.returncode < 0 and proc.returncode != -signal.SIGKILL:
            number = -proc.returncode
            name = signal.Signals(number).name if number in signal.valid_signals() else f"signal {number}"
            raise Retryable(message, f"worker {task} died by {name} (exit {proc.returncode})")
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
