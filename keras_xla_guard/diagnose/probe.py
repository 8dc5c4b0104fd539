"""The effectiveness probe of `doctor`: both sides of its child process.

The parent side (`start_probe`, `finish_probe`) starts a fresh Python
process with this process' environment and XLA switches, and turns what it
prints into a `ProbeResult`. The child side (`python -m
keras_xla_guard.diagnose.probe --jit ...`) runs a small auto-clusterable
function three times under the profiler, analyzes its trace like a training
trace and prints one JSON line with the measurement; TensorFlow's own XLA
log lines go to its stderr, which the parent keeps.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

__all__ = ["PROBE_MODULE", "ProbeResult", "ProbeRun", "finish_probe", "start_probe"]

PROBE_MODULE = "keras_xla_guard.diagnose.probe"
_LOG_PATTERN = re.compile(r"xla|cluster", re.IGNORECASE)
_MAX_LOG_LINES = 20


class ProbeRun(NamedTuple):
    """A started probe.

    Attributes:
        proc: The child process.
        started: When it started (`time.perf_counter()`).
        log_level: `TF_CPP_MIN_LOG_LEVEL` in the environment it was given.
    """

    proc: subprocess.Popen[str]
    started: float
    log_level: str | None


@dataclass(frozen=True)
class ProbeResult:
    """The measured effectiveness probe (an auto-clusterable function).

    Attributes:
        ran: Whether the child process ran and reported a measurement.
        ran_under_xla: Whether any of the probe's op time ran inside XLA.
        xla_time_fraction: Fraction of op time inside XLA executables.
        xla_executions: XLA executable launches in the trace (`_XlaRun`).
        compilations: XLA compilations in the trace.
        plain_ops: Op types that ran as plain TF kernels, by self time.
        log_lines: TensorFlow's own log lines about XLA from the child,
            each once.
        hidden_by_log_level: The `TF_CPP_MIN_LOG_LEVEL` (1 or more) the
            child started with, which hid its INFO lines; else `None`.
        seconds: Wall time of the child process.
        error: Why the probe failed; `""` when it ran.
        timed_out: Whether it failed by running out of time (the child
            was killed).
    """

    ran: bool
    ran_under_xla: bool = False
    xla_time_fraction: float = 0.0
    xla_executions: int = 0
    compilations: int = 0
    plain_ops: tuple[str, ...] = ()
    log_lines: tuple[str, ...] = ()
    hidden_by_log_level: str | None = None
    seconds: float = 0.0
    error: str = ""
    timed_out: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Returns the probe result as a JSON-serializable dict."""
        d = dataclasses.asdict(self)
        d["plain_ops"] = list(self.plain_ops)
        d["log_lines"] = list(self.log_lines)
        return d


def _filter_log(stderr: str) -> tuple[str, ...]:
    # Each line once: the probe calls its step three times, and a line
    # repeated word for word says nothing new.
    lines = dict.fromkeys(line.strip() for line in stderr.splitlines() if _LOG_PATTERN.search(line))
    return tuple(lines)[:_MAX_LOG_LINES]


def _hidden_by(run: ProbeRun) -> str | None:
    """The log level that hid the child's INFO lines: the one it started with, not this process' now.

    TensorFlow's C++ log reads `TF_CPP_MIN_LOG_LEVEL` as it starts. Importing
    JAX sets the variable to 1 when it is unset, and TensorFlow's import can
    import JAX, so this process' variable may say 1 while TensorFlow here
    still prints INFO lines (measured in tests/diagnose/test_doctor.py).
    """
    return None if run.log_level in (None, "", "0") else run.log_level


def start_probe(get_jit: str, cpu_global_jit: bool | None) -> ProbeRun:
    """Starts the probe in a child process with this process' settings.

    The child inherits the environment. It also gets this process'
    `get_jit()` and the `tf_xla_cpu_global_jit` value TensorFlow holds here
    (`None`: let the child read `TF_XLA_FLAGS` itself), because a flag set in
    `os.environ` after TensorFlow read it has no effect here but would take
    effect in a fresh child.

    Args:
        get_jit: `tf.config.optimizer.get_jit()` here (`""` when off).
        cpu_global_jit: The `tf_xla_cpu_global_jit` value TensorFlow holds
            here, or `None` to leave it to the child's `TF_XLA_FLAGS`.

    Returns:
        The running child, its start time and its log level, for `finish_probe`.
    """
    cmd = [sys.executable, "-m", PROBE_MODULE, "--jit", get_jit or "off"]
    if cpu_global_jit is not None:
        cmd += ["--cpu-global-jit", "1" if cpu_global_jit else "0"]
    env = dict(os.environ)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    return ProbeRun(proc, time.perf_counter(), env.get("TF_CPP_MIN_LOG_LEVEL"))


def finish_probe(run: ProbeRun, timeout: float) -> ProbeResult:
    """Waits for the probe, at most `timeout` seconds after its start.

    Args:
        run: What `start_probe` returned.
        timeout: Seconds the probe may take in all; a child still running
            then is killed.

    Returns:
        The measurement, or a `ProbeResult` with `ran=False` and the reason
        (the time limit, or the child's exit code and last stderr lines).
    """
    proc, started = run.proc, run.started
    remaining = max(timeout - (time.perf_counter() - started), 0.01)
    try:
        stdout, stderr = proc.communicate(timeout=remaining)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, stderr = proc.communicate()
        return ProbeResult(
            ran=False,
            log_lines=_filter_log(stderr),
            hidden_by_log_level=_hidden_by(run),
            seconds=time.perf_counter() - started,
            error=f"the probe process did not finish within {timeout:g} s",
            timed_out=True,
        )
    seconds = time.perf_counter() - started
    log_lines = _filter_log(stderr)
    hidden = _hidden_by(run)
    result_line = next((line for line in reversed(stdout.splitlines()) if line.startswith("{")), None)
    if proc.returncode != 0 or result_line is None:
        tail = " | ".join(stderr.strip().splitlines()[-3:])
        return ProbeResult(
            ran=False,
            log_lines=log_lines,
            hidden_by_log_level=hidden,
            seconds=seconds,
            error=f"the probe process exited with code {proc.returncode}: {tail}",
        )
    data = json.loads(result_line)
    return ProbeResult(
        ran=True,
        ran_under_xla=data["xla_time_fraction"] > 0 or data["xla_executions"] > 0,
        xla_time_fraction=data["xla_time_fraction"],
        xla_executions=data["xla_executions"],
        compilations=data["compilations"],
        plain_ops=tuple(data["plain_ops"]),
        log_lines=log_lines,
        hidden_by_log_level=hidden,
        seconds=seconds,
    )


def _measure(jit: str, cpu_global_jit: str | None) -> int:
    """Child side: runs the probe function under the profiler, prints one JSON line."""
    import tensorflow as tf

    from keras_xla_guard.trace.analysis import analyze_trace

    if cpu_global_jit is not None:
        from keras_xla_guard.seam.tf_internals import set_cpu_global_jit

        set_cpu_global_jit(cpu_global_jit == "1")
    tf.config.optimizer.set_jit(False if jit == "off" else jit)

    # Several fusable elementwise ops around a matmul: a cluster auto-jit takes.
    @tf.function
    def step(x: Any, w: Any) -> Any:
        y = tf.nn.relu(tf.matmul(x, w)) * 2.0 + 1.0
        return tf.reduce_sum(tf.tanh(y) * y - tf.sigmoid(y))

    x = tf.random.stateless_normal((64, 64), seed=(1, 2))
    w = tf.random.stateless_normal((64, 64), seed=(3, 4))
    with tempfile.TemporaryDirectory(prefix="probe_") as logdir:
        tf.profiler.experimental.start(logdir)
        try:
            for _ in range(3):
                step(x, w).numpy()
        finally:
            tf.profiler.experimental.stop()
        report = analyze_trace(logdir)
    print(
        json.dumps(
            {
                "xla_time_fraction": report.xla_time_fraction,
                "xla_executions": report.xla_executions,
                "compilations": report.compilations,
                # Op types, each once: the table has one row per op (two Muls, two rows).
                "plain_ops": list(dict.fromkeys(op.op_type for op in report.top_non_xla_ops)),
            }
        ),
        flush=True,
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Child side of the probe, as `python -m keras_xla_guard.diagnose.probe`.

    Args:
        argv: Command-line arguments. Defaults to `None` (`sys.argv[1:]`).

    Returns:
        The exit code: 0 after printing the measurement.
    """
    parser = argparse.ArgumentParser(prog=f"python -m {PROBE_MODULE}")
    parser.add_argument("--jit", default="off", help="value for tf.config.optimizer.set_jit")
    parser.add_argument("--cpu-global-jit", choices=("0", "1"), default=None)
    args = parser.parse_args(argv)
    return _measure(args.jit, args.cpu_global_jit)


if __name__ == "__main__":
    sys.exit(main())
