"""Trace quality: the conditions of a trace that limit what its figures can say.

Each condition becomes one `TraceQuality` entry of the report: what the
trace showed, what it costs the figures, and the setting that restores
attribution for a diagnostic run. The facts come from the writers' source:

- Command buffers: XLA's `CommandBufferThunk`
  (`xla/backends/gpu/runtime/command_buffer_thunk.cc`) runs its commands as
  a CUDA graph, or, while a profiler session is active and
  `--xla_enable_command_buffers_during_profiling` is false (its default),
  op by op under the host event `WARNING: CommandBuffer disabled when
  profiling`. XLA's CUPTI collector gives a graph's kernels the
  `cuda_graph_id` stat and the annotation of the graph's launch
  (`xla/backends/profiler/gpu/cupti_collector.cc`), so no kernel inside
  names its own op. `--xla_gpu_enable_command_buffer=` (an empty list)
  turns command buffers off.
- Event caps: the collector keeps at most `max_callback_api_events` and
  `max_activity_api_events` events (2,097,152 each by default,
  `cupti_collector.h`) and writes "... N events dropped because total
  device(activity) events reaches max ..." into the XSpace's `warnings`;
  CUPTI's own failures go to its `errors`.
- Collectives: NCCL kernels and XLA's collective ops, asynchronous on
  their own stream unless `--xla_gpu_disable_async_collectives` lists them.
- Steps: a step marker is a TraceMe with `_r` and `step_num` (the guard's
  `train`, JAX's `StepTraceAnnotation`); TensorFlow's `FunctionRun` has
  `_r` alone (`tensorflow/core/common_runtime/function.cc`).
- Launches: XLA's GPU executable runs each program execution inside a
  `<module>:XLA GPU module` TraceMe (`xla/service/gpu/gpu_executable.cc`),
  whose driver calls carry the correlation ids of their device events.

Pure: no Keras, no TensorFlow.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from keras_xla_guard.trace._device import DeviceTotals
from keras_xla_guard.trace._host_launches import HostLaunches
from keras_xla_guard.trace._text import format_ms
from keras_xla_guard.trace.report import TraceQuality

__all__ = ["COMMAND_BUFFERS_OFF_EVENT", "device_quality", "no_step_markers", "space_quality"]

_PS = 1e-12
# The host TraceMe XLA writes when it runs a command buffer op by op because
# a profiler session is active.
COMMAND_BUFFERS_OFF_EVENT = "WARNING: CommandBuffer disabled when profiling"
_DROPPED = re.compile(r"(\d+) events dropped because ([^;.]+)")
_MAX_LISTED = 3

_COMMAND_BUFFER_COST = (
    "their time counts as XLA time of their program, but not per op: the top ops inside XLA show one "
    "'(command buffer)' row per program instead of the ops the graph ran"
)
_COMMAND_BUFFER_REMEDY = (
    "for a diagnostic run with per-op attribution, turn command buffers off: "
    "XLA_FLAGS=--xla_gpu_enable_command_buffer= (or leave --xla_enable_command_buffers_during_profiling "
    "at its default, false, so XLA runs them op by op while profiling)"
)
_COMMAND_BUFFERS_OFF_COST = (
    "per-op attribution is complete, but the window ran op by op: unprofiled steps replay CUDA graphs "
    "with fewer launches, so they can be faster than the device times measured here"
)
_COMMAND_BUFFERS_OFF_REMEDY = (
    "to measure the CUDA graphs as they run (without per-op attribution): "
    "XLA_FLAGS=--xla_enable_command_buffers_during_profiling=true; to run unprofiled steps as profiled "
    "ones: XLA_FLAGS=--xla_gpu_enable_command_buffer="
)
_NO_STEPS_DETAIL = (
    "the trace holds no step marker (a host event with both the _r and step_num stats); events with _r "
    "alone, such as TensorFlow's FunctionRun around every function call, group one function's execution "
    "and open no step"
)
_NO_STEPS_COST = (
    "steps are unknown: the report has no per-step figures (steps is null) and invents none; the "
    "window's totals do not depend on them"
)
_NO_STEPS_REMEDY = (
    "Keras fit under XlaGuardCallback marks every step, and so does a custom loop's step wrapped by "
    "XlaGuard.watch; or mark each step yourself: tf.profiler.experimental.Trace('train', step_num=step, "
    "_r=1), on JAX jax.profiler.StepTraceAnnotation('train', step_num=step)"
)
_UNATTRIBUTED_COST = (
    "their runs are told apart as xprof derives its 'XLA Modules' lines: consecutive kernels of one "
    "program in one step make one run, so launches can read below the program executions (a program's "
    "runs with only other kernels between them merge); XLA time does not depend on it"
)
_UNATTRIBUTED_REMEDY = (
    "keep host tracing on (tf.profiler's ProfilerOptions(host_tracer_level=2), jax.profiler's default) "
    "so that the trace holds the driver calls (cuLaunchKernel, hipModuleLaunchKernel) with their "
    "correlation ids inside XLA's '<module>:XLA GPU module' host events; the ROCm profiler of older JAX "
    "releases wrote no driver calls at all"
)
_COLLECTIVES_COST = (
    "collective time is its own figure (collective_time_s): inside an XLA program it is part of the "
    "program's XLA time, waiting for peers included; outside any program it is in neither side of the "
    "XLA share; a program's runs on several streams that overlap count once"
)
_COLLECTIVES_REMEDY = (
    "to see communication and compute apart in a diagnostic run: XLA_FLAGS="
    "--xla_gpu_disable_async_collectives=allreduce,allgather,reducescatter,collectivebroadcast,alltoall,"
    "collectivepermute"
)
_DROPPED_COST = (
    "every device figure of the window reads low: the dropped events' time and launches are missing"
)
_DROPPED_REMEDY = (
    "profile fewer steps per window; on JAX, raise the collector's caps (2,097,152 events each by "
    "default): jax.profiler.ProfileOptions().advanced_configuration = {'gpu_max_activity_api_events': N, "
    "'gpu_max_callback_api_events': N}"
)
_MISSING_COST = (
    "their device time is in no figure: XLA time, launches and transfers read low for the steps they "
    "belong to"
)
_MISSING_REMEDY = (
    "let the device finish before the profiler stops (fetch a result of the last profiled step, e.g. "
    "float(loss)) and profile fewer steps, so that no event is dropped"
)
_ERRORS_COST = (
    "device planes may be missing or partial: with CUPTI unavailable the figures are host times only"
)
_ERRORS_REMEDY = (
    "fix what the profiler names; for CUPTI_ERROR_INSUFFICIENT_PRIVILEGES allow profiling by non-admin "
    "users (NVIDIA driver option NVreg_RestrictProfilingToAdminUsers=0) or profile as root"
)


def _listed(names: Sequence[str]) -> str:
    shown = ", ".join(sorted(names)[:_MAX_LISTED])
    return shown + (f" and {len(names) - _MAX_LISTED} more" if len(names) > _MAX_LISTED else "")


def no_step_markers() -> TraceQuality:
    """The entry of a trace without step markers: its steps are unknown, and how to mark them."""
    return TraceQuality("no_step_markers", _NO_STEPS_DETAIL, _NO_STEPS_COST, _NO_STEPS_REMEDY)


def device_quality(
    device: DeviceTotals, host: HostLaunches | None, commands_off_while_profiling: bool, steps_known: bool
) -> list[TraceQuality]:
    """The conditions the device planes and their launches show.

    Args:
        device: What the device planes held.
        host: The host's launches, when the device planes have events with
            correlation ids to match them against; else `None`.
        commands_off_while_profiling: Whether the host planes hold XLA's
            `COMMAND_BUFFERS_OFF_EVENT`.
        steps_known: Whether the host planes hold a step marker; a
            `no_step_markers` entry when not.

    Returns:
        Entries in a fixed order of codes.
    """
    found: list[TraceQuality] = []
    if device.graph_kernels:
        found.append(
            TraceQuality(
                "command_buffers",
                f"{device.graph_kernels} kernel(s), {format_ms(device.graph_ps * _PS, 3)} of device time, ran "
                f"inside CUDA graphs (XLA command buffers) in {_listed(sorted(device.graph_programs))}",
                _COMMAND_BUFFER_COST,
                _COMMAND_BUFFER_REMEDY,
            )
        )
    if commands_off_while_profiling:
        found.append(
            TraceQuality(
                "command_buffers_off_while_profiling",
                f"XLA ran its command buffers op by op because the profiler was on (host event "
                f"'{COMMAND_BUFFERS_OFF_EVENT}')",
                _COMMAND_BUFFERS_OFF_COST,
                _COMMAND_BUFFERS_OFF_REMEDY,
            )
        )
    if not steps_known:
        found.append(no_step_markers())
    if device.unattributed_kernels:
        found.append(
            TraceQuality(
                "launches_unattributed",
                f"{device.unattributed_kernels} of {device.xla_kernels} XLA kernel(s) were launched by no driver "
                "call the host planes place inside an XLA program execution (a '<module>:XLA GPU module' event)",
                _UNATTRIBUTED_COST,
                _UNATTRIBUTED_REMEDY,
            )
        )
    if device.collective_kernels:
        found.append(
            TraceQuality(
                "collectives",
                f"{device.collective_kernels} collective kernel(s) ran {format_ms(device.collective_ps * _PS, 3)} "
                f"on the device, {format_ms(device.collective_overlap_ps * _PS, 3)} of it while other streams ran "
                "other kernels",
                _COLLECTIVES_COST,
                _COLLECTIVES_REMEDY,
            )
        )
    if host is not None and host.launches:
        found.extend(_missing(device, host))
    return found


def _missing(device: DeviceTotals, host: HostLaunches) -> list[TraceQuality]:
    """The `device_events_missing` entry when some host launches have no device event."""
    missing = [at for corr, at in host.launches if corr not in device.correlations]
    if not missing:
        return []
    last_seen = max((at for corr, at in host.launches if corr in device.correlations), default=-1)
    late = sum(1 for at in missing if at > last_seen)
    tail = (
        f"; the window's last {late} launch(es) are among them: the device plane ends early" if late else ""
    )
    return [
        TraceQuality(
            "device_events_missing",
            f"{len(missing)} of the host's {len(host.launches)} kernel, copy and graph launches have no "
            f"device event{tail}",
            _MISSING_COST,
            _MISSING_REMEDY,
        )
    ]


def space_quality(space: Any) -> list[TraceQuality]:
    """The conditions the profiler itself recorded in the XSpace's errors and warnings.

    Args:
        space: The trace (parsed, or of `open_xspace`).

    Returns:
        An `events_dropped` entry when a warning reports dropped events, a
        `profiler_errors` entry when the profiler recorded errors.
    """
    found: list[TraceQuality] = []
    # One collector can write the same warning twice (when it collects and
    # when it exports); a count is read once per distinct reason.
    dropped: dict[str, int] = {}
    for warning in dict.fromkeys(getattr(space, "warnings", ())):
        for count, reason in _DROPPED.findall(warning):
            dropped[reason.strip()] = max(dropped.get(reason.strip(), 0), int(count))
    if dropped:
        reasons = "; ".join(f"{n} because {why}" for why, n in sorted(dropped.items()))
        found.append(
            TraceQuality(
                "events_dropped",
                f"the profiler dropped {sum(dropped.values())} event(s): {reasons}",
                _DROPPED_COST,
                _DROPPED_REMEDY,
            )
        )
    errors = [e.strip() for e in dict.fromkeys(getattr(space, "errors", ())) if e.strip()]
    if errors:
        text = "; ".join(errors)
        found.append(
            TraceQuality(
                "profiler_errors",
                f"the profiler reported: {text[:300]}{'...' if len(text) > 300 else ''}",
                _ERRORS_COST,
                _ERRORS_REMEDY,
            )
        )
    return found
