"""`doctor()`: why XLA does or does not run in this process, layer by layer.

Three layers, each reported as facts plus verdicts with stable codes (see
docs/diagnosis.md, "Verdict codes"):

- runtime: TensorFlow/Keras versions, physical devices, and whether XLA
  compiles and runs a tiny `jit_compile=True` function on each device;
- switches: `tf.config.optimizer.get_jit()`, `TF_XLA_FLAGS` as set now and
  as TensorFlow parsed it, Keras' resolution of `jit_compile="auto"`, and
  `TF_ENABLE_ONEDNN_OPTS` (unrelated to XLA);
- effectiveness, measured: a small auto-clusterable function runs in a child
  process under this process' settings, under the profiler, and its trace is
  analyzed like a training trace (`probe.py`). TensorFlow's own XLA log
  lines from that run are kept.

With a trace, the compile-cost verdicts (`compile_cost.py`) are added.
"""

from __future__ import annotations

import dataclasses
import math
import os
import platform
import sys
import time
from dataclasses import dataclass
from typing import Any

from keras_xla_guard._checks import check_bool
from keras_xla_guard.backend.xla_cache import persistent_cache
from keras_xla_guard.diagnose import tf_rules
from keras_xla_guard.diagnose.advice import JitEvidence, blocked_verdict
from keras_xla_guard.diagnose.compile_cost import compile_cost_verdicts
from keras_xla_guard.diagnose.keras_env import backend_unavailable_verdict, keras_facts
from keras_xla_guard.diagnose.probe import ProbeResult, ProbeRun, finish_probe, start_probe
from keras_xla_guard.diagnose.verdict import ERROR, WARNING, Verdict

__all__ = [
    "DeviceCheck",
    "DoctorReport",
    "doctor",
    "format_doctor_report",
    "parse_tf_xla_flags",
]

DEFAULT_PROBE_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class DeviceCheck:
    """Whether XLA compiled and ran a tiny function on one device.

    Attributes:
        device: Logical device name, e.g. `"/device:CPU:0"`.
        device_type: `"CPU"`, `"GPU"`, `"TPU"`, ...
        xla_ok: Whether a `jit_compile=True` function compiled, ran and
            returned the right value there.
        error: The error text when it did not; `""` otherwise.
    """

    device: str
    device_type: str
    xla_ok: bool
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Returns the check as a JSON-serializable dict."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class DoctorReport:
    """Facts and verdicts about XLA in this process.

    Attributes:
        python_version: `platform.python_version()`.
        tf_version: `tf.__version__`.
        keras_version: `keras.__version__`, or `None` if Keras is missing.
        keras_backend: Keras' backend name, or `None`.
        physical_devices: Physical device types and names, e.g.
            `("CPU:/physical_device:CPU:0",)`.
        device_checks: One XLA compile-and-run check per logical device
            (empty when `check_devices=False`).
        get_jit: `tf.config.optimizer.get_jit()` (`""` when off).
        tf_xla_flags: `TF_XLA_FLAGS` in `os.environ` now (`None` if unset).
        env_auto_jit: `--tf_xla_auto_jit` parsed from that value, or `None`.
        env_cpu_global_jit: Whether that value contains
            `--tf_xla_cpu_global_jit`.
        tf_cpu_global_jit: The `tf_xla_cpu_global_jit` value TensorFlow
            itself holds (it reads `TF_XLA_FLAGS` once, on first use);
            `None` if TensorFlow does not expose it.
        keras_auto_jit_compile: What Keras resolves `jit_compile="auto"`
            to on this machine for a plain model; `None` without Keras.
        in_distribution_strategy: Whether a `tf.distribute` strategy is
            active (Keras then resolves `"auto"` to False too).
        onednn_opts: `TF_ENABLE_ONEDNN_OPTS` (`None` if unset).
        probe: The measured effectiveness probe, or `None` if skipped.
        verdicts: All verdicts, runtime first.
        seconds: Time `doctor()` took.
    """

    python_version: str
    tf_version: str
    keras_version: str | None
    keras_backend: str | None
    physical_devices: tuple[str, ...]
    device_checks: tuple[DeviceCheck, ...]
    get_jit: str
    tf_xla_flags: str | None
    env_auto_jit: str | None
    env_cpu_global_jit: bool
    tf_cpu_global_jit: bool | None
    keras_auto_jit_compile: bool | None
    in_distribution_strategy: bool
    onednn_opts: str | None
    probe: ProbeResult | None
    verdicts: tuple[Verdict, ...]
    seconds: float = 0.0

    @property
    def problems(self) -> tuple[Verdict, ...]:
        """The verdicts with status `"warning"` or `"error"`."""
        return tuple(v for v in self.verdicts if v.status in (WARNING, ERROR))

    def verdict(self, code: str) -> Verdict | None:
        """Returns the verdict with this code, or `None`.

        Args:
            code: A verdict code, e.g. `"XLA_BACKEND_OK"`.

        Returns:
            The first verdict with that code, or `None`.
        """
        return next((v for v in self.verdicts if v.code == code), None)

    @property
    def codes(self) -> tuple[str, ...]:
        """The verdict codes, in report order."""
        return tuple(v.code for v in self.verdicts)

    def to_dict(self) -> dict[str, Any]:
        """Returns the report as a JSON-serializable dict."""
        d = dataclasses.asdict(self)
        d["physical_devices"] = list(self.physical_devices)
        d["device_checks"] = [c.to_dict() for c in self.device_checks]
        d["probe"] = self.probe.to_dict() if self.probe is not None else None
        d["verdicts"] = [v.to_dict() for v in self.verdicts]
        return d

    def __str__(self) -> str:
        return format_doctor_report(self)


def parse_tf_xla_flags(value: str | None) -> tuple[str | None, bool]:
    """Reads the two auto-clustering switches out of a `TF_XLA_FLAGS` value.

    Args:
        value: The environment variable's value, or `None` when unset.

    Returns:
        `(auto_jit, cpu_global_jit)`: the `--tf_xla_auto_jit` value as
        written (`None` when absent) and whether `--tf_xla_cpu_global_jit`
        is on.

    Example:

    ```python
    from keras_xla_guard.diagnose.doctor import parse_tf_xla_flags
    parse_tf_xla_flags("--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit")
    # ('2', True)
    ```
    """
    auto_jit: str | None = None
    cpu_global_jit = False
    for token in (value or "").split():
        name, _, arg = token.partition("=")
        if name == "--tf_xla_auto_jit":
            auto_jit = arg
        elif name == tf_rules.CPU_FLAG:
            cpu_global_jit = arg.lower() not in ("0", "false")
    return auto_jit, cpu_global_jit


def _tf_cpu_global_jit() -> bool | None:
    """The `tf_xla_cpu_global_jit` value TensorFlow holds right now."""
    from keras_xla_guard.seam.tf_internals import cpu_global_jit

    return cpu_global_jit()


def _device_checks() -> tuple[DeviceCheck, ...]:
    import numpy as np
    import tensorflow as tf

    checks = []
    for device in tf.config.list_logical_devices():
        try:
            with tf.device(device.name):
                double_plus_one = tf.function(lambda x: x * 2.0 + 1.0, jit_compile=True)
                got = double_plus_one(tf.constant([1.0, 2.0])).numpy()
            ok = bool(np.allclose(got, [3.0, 5.0]))
            error = "" if ok else f"wrong result {got!r}"
        except Exception as e:  # noqa: BLE001 - the failure is the finding
            ok, error = False, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        checks.append(DeviceCheck(device.name, device.device_type, ok, error))
    return tuple(checks)


def doctor(
    probe: bool = True,
    check_devices: bool = True,
    probe_timeout: float = DEFAULT_PROBE_TIMEOUT_S,
    resolve_keras: bool = True,
    trace: Any = None,
    compare: Any = None,
) -> DoctorReport:
    """Diagnoses whether and why XLA runs in this process.

    Imports TensorFlow (and Keras, when installed). The probe starts one
    child Python process (a few seconds) and passes it this process'
    environment, `get_jit()` state and the `--tf_xla_cpu_global_jit` value
    TensorFlow holds here. Reading that value makes TensorFlow read
    `TF_XLA_FLAGS` now if it has not yet.

    Args:
        probe: Measure auto-clustering in a child process. Defaults to
            `True`.
        check_devices: Compile and run a tiny `jit_compile=True` function on
            every logical device. Defaults to `True`.
        probe_timeout: Seconds the probe may take. Defaults to `120`.
        resolve_keras: Compile a throwaway one-layer Keras model to read
            what `jit_compile="auto"` resolves to (it advances Keras'
            automatic layer names by one). Defaults to `True`.
        trace: A trace of a run (file, run or log dir, as `analyze_trace`
            takes) or its `CoverageReport`: adds `COMPILE_COST_HIGH` when
            compilation is a large share of it, with the persistent-cache
            line, and `JIT_COMPILE_BLOCKED` first when the run's step ran
            ops XLA cannot compile (no XLA switch is advised then).
            Defaults to `None`.
        compare: A `compare` result (`CompareReport` or its `to_dict()`)
            for this model: the advice on XLA's switches follows its
            measured verdict instead of asking to measure first (the CLI
            passes the one saved in `--trace`'s log dir). Defaults to
            `None`.

    Returns:
        A `DoctorReport`.

    Raises:
        ValueError: If `probe_timeout` is not a positive number, or a flag
            is not `True` or `False`.

    Example:

    ```python
    from keras_xla_guard import doctor
    report = doctor()
    print(report)
    for verdict in report.problems:
        print(verdict.code, verdict.fix)
    ```
    """
    if (
        isinstance(probe_timeout, bool)
        or not isinstance(probe_timeout, (int, float))
        or not 0 < probe_timeout < math.inf
    ):
        raise ValueError(
            f"`probe_timeout` must be a positive number of seconds. Received: probe_timeout={probe_timeout!r}"
        )
    for name, flag in (("probe", probe), ("check_devices", check_devices), ("resolve_keras", resolve_keras)):
        check_bool(name, flag)
    compile_verdicts: list[Verdict] = []
    blockers: tuple[str, ...] = ()
    if trace is not None:
        from keras_xla_guard.diagnose.explain import blocker_names, trace_blockers
        from keras_xla_guard.trace.analysis import analyze_trace
        from keras_xla_guard.trace.report import CoverageReport

        analyzed = trace if isinstance(trace, CoverageReport) else analyze_trace(trace)
        compile_verdicts = compile_cost_verdicts(analyzed)
        if analyzed.ok:
            blockers = blocker_names(trace_blockers(analyzed))
    evidence = JitEvidence(
        blockers=blockers, compare=compare.to_dict() if hasattr(compare, "to_dict") else compare
    )
    started = time.perf_counter()
    early_probe = None
    if probe and "tensorflow" not in sys.modules:
        # TensorFlow holds no state here yet (auto-clustering off, flags as in
        # the environment), so a child started now sees the same settings;
        # starting it first lets both TensorFlow imports overlap.
        early_probe = start_probe("", None)
    try:
        report = _doctor(
            started, early_probe, probe, check_devices, float(probe_timeout), resolve_keras, evidence
        )
        return dataclasses.replace(report, verdicts=report.verdicts + tuple(compile_verdicts))
    finally:
        if early_probe is not None and early_probe.proc.poll() is None:
            early_probe.proc.kill()
            early_probe.proc.communicate()


def _doctor(
    started: float,
    early_probe: ProbeRun | None,
    probe: bool,
    check_devices: bool,
    probe_timeout: float,
    resolve_keras: bool,
    evidence: JitEvidence,
) -> DoctorReport:
    import tensorflow as tf

    physical = tf.config.list_physical_devices()
    # --tf_xla_enable_xla_devices adds XLA_CPU (and XLA_GPU beside a GPU): no accelerator.
    has_accelerator = any(d.device_type != "CPU" and not d.device_type.startswith("XLA_") for d in physical)
    checks = _device_checks() if check_devices else ()
    get_jit = str(tf.config.optimizer.get_jit() or "")
    tf_xla_flags = os.environ.get("TF_XLA_FLAGS")
    env_auto_jit, env_cpu_global_jit = parse_tf_xla_flags(tf_xla_flags)
    tf_cpu_global_jit = _tf_cpu_global_jit()
    keras = keras_facts(resolve_keras)
    in_strategy = bool(tf.distribute.has_strategy())
    onednn = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
    requested = bool(get_jit) or tf_rules.auto_jit_requested(env_auto_jit)
    evidence = dataclasses.replace(
        evidence,
        autoclustering=requested,
        accelerator=has_accelerator,
        device="XLA_GPU_JIT" if has_accelerator else "XLA_CPU_JIT",
    )
    jit_fix = tf_rules.fix_jit_compile(evidence)

    verdicts = tf_rules.switch_verdicts(
        get_jit=get_jit,
        env_auto_jit=env_auto_jit,
        env_cpu_global_jit=env_cpu_global_jit,
        tf_cpu_global_jit=tf_cpu_global_jit,
        # A Keras that cannot start runs on no backend: KERAS_BACKEND_UNAVAILABLE says so.
        keras_backend=None if keras.error else keras.backend,
        keras_auto_jit_compile=keras.auto_jit_compile,
        in_strategy=in_strategy,
        has_accelerator=has_accelerator,
        tf_xla_flags=tf_xla_flags,
        onednn_opts=onednn,
        jit_fix=jit_fix,
    )
    blocked = blocked_verdict(evidence)
    if blocked is not None:
        # Named before any advice to switch XLA on, which would fail.
        verdicts.insert(0, blocked)
    probe_result = None
    if probe:
        run = early_probe or start_probe(get_jit, tf_cpu_global_jit)
        probe_result = finish_probe(run, probe_timeout)
    cache_verdict, explained = tf_rules.cache_verdict(persistent_cache(), checks, probe_result, tf_xla_flags)
    unavailable = backend_unavailable_verdict(keras, "tensorflow")
    runtime = tf_rules.runtime_verdicts(checks, cache_verdict, explained)
    verdicts = runtime + ([unavailable] if unavailable else []) + verdicts
    if probe_result is not None:
        verdicts += tf_rules.effectiveness_verdicts(
            probe_result,
            requested=requested,
            has_accelerator=has_accelerator,
            tf_cpu_global_jit=tf_cpu_global_jit,
            cache_verdict=cache_verdict,
            jit_fix=jit_fix,
        )
    elif requested and not has_accelerator and tf_cpu_global_jit is False:
        verdicts.append(tf_rules.cpu_flag_missing("predicted from the switches, the probe was skipped"))
    return DoctorReport(
        python_version=platform.python_version(),
        tf_version=tf.__version__,
        keras_version=keras.version,
        keras_backend=keras.backend,
        physical_devices=tuple(f"{d.device_type}:{d.name}" for d in physical),
        device_checks=checks,
        get_jit=get_jit,
        tf_xla_flags=tf_xla_flags,
        env_auto_jit=env_auto_jit,
        env_cpu_global_jit=env_cpu_global_jit,
        tf_cpu_global_jit=tf_cpu_global_jit,
        keras_auto_jit_compile=keras.auto_jit_compile,
        in_distribution_strategy=in_strategy,
        onednn_opts=onednn,
        probe=probe_result,
        verdicts=tuple(verdicts),
        seconds=time.perf_counter() - started,
    )


def format_doctor_report(report: DoctorReport) -> str:
    """Formats a doctor report as text: facts per layer, then verdicts.

    A fix that an earlier verdict already showed is named, not repeated.

    Args:
        report: The report to format.

    Returns:
        Multi-line text, no trailing newline.
    """
    fails = ": cannot start here" if report.verdict("KERAS_BACKEND_UNAVAILABLE") else ""
    keras = (
        f"{report.keras_version} (backend {report.keras_backend}{fails})"
        if report.keras_version
        else "not installed"
    )
    flags = report.tf_xla_flags if report.tf_xla_flags is not None else "(unset)"
    onednn = report.onednn_opts if report.onednn_opts is not None else "(unset)"
    lines = [
        "keras-xla-guard doctor",
        "runtime:",
        f"  python {report.python_version}, tensorflow {report.tf_version}, keras {keras}",
        f"  physical devices: {', '.join(report.physical_devices) or '(none)'}",
    ]
    for check in report.device_checks:
        state = "compiles and runs" if check.xla_ok else f"FAILS ({check.error})"
        lines.append(f"  XLA on {check.device}: {state} (a jit_compile=True function, in this process)")
    lines += [
        "switches:",
        f"  tf.config.optimizer.get_jit(): {report.get_jit or '(off)'}",
        f"  TF_XLA_FLAGS now: {flags}"
        f" (auto_jit={report.env_auto_jit}, cpu_global_jit={report.env_cpu_global_jit})",
        f"  tf_xla_cpu_global_jit as TensorFlow holds it: {report.tf_cpu_global_jit}",
        f"  Keras jit_compile='auto' resolves to: {report.keras_auto_jit_compile}"
        f"{' (distribution strategy active)' if report.in_distribution_strategy else ''}",
        f"  TF_ENABLE_ONEDNN_OPTS: {onednn}",
    ]
    probe = report.probe
    if probe is not None:
        lines.append("effectiveness (measured in a child process):")
        if probe.ran:
            lines.append(
                f"  probe: {probe.xla_time_fraction:.1%} of op time inside XLA, "
                f"{probe.xla_executions} XLA launches, {probe.compilations} compilations "
                f"({probe.seconds:.1f} s)"
            )
            if probe.plain_ops:
                lines.append(f"  plain TF ops: {', '.join(probe.plain_ops)}")
        else:
            lines.append(f"  probe failed: {probe.error}")
        # The probe's own lines: TensorFlow's lines about this process' device
        # checks go to this process' stderr, above the report.
        if probe.log_lines:
            lines.append("  TensorFlow's XLA log lines in the probe process:")
        else:
            level = probe.hidden_by_log_level
            hidden = f" (TF_CPP_MIN_LOG_LEVEL={level} hid its INFO lines)" if level else ""
            lines.append(f"  The probe process logged nothing about XLA{hidden}.")
        lines += [f"    {line}" for line in probe.log_lines]
    lines.append("verdicts:")
    # Several verdicts can share one fix (XLA_NOT_REQUESTED and
    # JIT_COMPILE_AUTO_RESOLVES_FALSE on a CPU): the text shows it once.
    first_with_fix: dict[str, str] = {}
    for verdict in report.verdicts:
        earlier = first_with_fix.setdefault(verdict.fix, verdict.code) if verdict.fix else verdict.code
        if earlier == verdict.code:
            lines.append(f"  {verdict}")
        else:
            lines.append(f"  {dataclasses.replace(verdict, fix='')}")
            lines.append(f"    fix: the same as {earlier}'s above")
    return "\n".join(lines)
