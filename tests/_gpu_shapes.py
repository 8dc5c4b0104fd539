"""The GPU trace shapes the differential test against xprof runs on, each built as its writer builds it.

`tests/_gpu_trace.py` builds the events; each shape here names the writer
source it follows and what its figures are by construction (`Shape.expect`).

- `tf_function_run`: TensorFlow 2.21's host layout of a `jit_compile=True`
  Keras step (`tensorflow/core/common_runtime/function.cc`: `FunctionRun`
  with `_r=1` and no `step_num` around each call;
  `tensorflow/core/common_runtime/executor.cc`: `ExecutorState::Process`;
  `xla/service/gpu/gpu_executable.cc`: `<module>:XLA GPU module`), 9 steps
  marked by the guard's `train` (`_r=1`, `step_num`).
- `tf_no_markers`: the same without any marker (a user's own
  `tf.profiler.experimental.start` around `fit`).
- `command_buffers`: the program as one CUDA graph per run
  (`xla/backends/gpu/runtime/command_buffer_thunk.cc`,
  `xla/backends/profiler/gpu/cupti_buffer_events.cc`: `cuda_graph_id`).
- `collectives`: an asynchronous all-reduce on its own stream beside the
  compute, and TF's own all-reduce outside XLA (NCCL kernels,
  `xla/backends/profiler/gpu/cupti_collector.cc`).
- `dropped_events`: the collector's cap reached: the warning in the XSpace
  and the last step's device events missing
  (`CuptiTraceCollectorImpl::ReportNumEventsIfDropped`, `cupti_collector.cc`).
- `jax_se`, `jax_tfrt`: Keras on JAX, one `jit_train_step` per step under
  `jax.profiler.StepTraceAnnotation`, launched by the StreamExecutor client
  from the Python thread (`xla/pjrt/pjrt_stream_executor_client.cc`) or by
  the TFRT GPU client's `execute_fn` worker
  (`xla/pjrt/gpu/tfrt/tfrt_gpu_executable.cc`).
- `jax_no_markers`: a user's `jax.profiler.trace` around a loop without
  step annotations, plain kernels (an unannotated device copy kernel, as
  ROCm writes `__amd_rocclr_copyBuffer`) between the programs, and a gap
  inside each run.
- `two_gpus`: a data-parallel JAX step on 2 GPUs, each device's program
  run by its own thread (`py_xla_execute/<id>`, as PjRt's per-device
  execute threads are named in real traces), one plane per device
  (`cupti_collector.cc`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from _gpu_trace import (
    MODULE,
    NCCL_TF,
    NCCL_XLA,
    PROGRAM,
    STEP_US,
    GpuTrace,
    _Plane,
    collective_fit,
    command_buffer_fit,
    jit_fit,
)

JAX_MODULE = "jit_train_step"
JAX_PROGRAM = 21


@dataclass(frozen=True)
class Expect:
    """A shape's figures by construction (times in microseconds).

    Attributes:
        xla_us: Device-busy time of its XLA kernels, summed over devices.
        span_us: Its XLA runs' spans, summed.
        launches: Its program executions.
        steps: Its step markers; `None` when it has none.
        devices: Device planes with activity.
    """

    xla_us: float
    span_us: float
    launches: int
    steps: int | None
    devices: int = 1


@dataclass(frozen=True)
class Shape:
    """One shape: how to build it, the writer it follows, and its figures."""

    build: Callable[[], GpuTrace]
    writer: str
    expect: Expect
    notes: dict[str, str] = field(default_factory=dict)


def _jax_fit(
    layout: str, steps: int = 6, *, with_steps: bool = True, plain_between: bool = False
) -> GpuTrace:
    """One `jit_train_step` run per step: 3 kernels of 40 us, 5 us apart (busy 120 us, span 130 us).

    With `plain_between`, an unannotated copy kernel of 20 us runs after each program on the same
    stream (a plain kernel between runs: xprof's derived grouping merges the runs without groups).
    """
    trace = GpuTrace(layout=layout, with_steps=with_steps)
    for step in range(steps):
        base = step * STEP_US
        trace.step(step, base, 900)
        trace.execution(JAX_MODULE, base + 9.5, 3.5)
        for k in range(3):
            trace.xla_kernel(
                7,
                f"loop_fusion_{k}",
                base + 10 + k,
                base + 60 + 45 * k,
                40,
                module=JAX_MODULE,
                program=JAX_PROGRAM,
                hlo_op=f"fusion.{k}",
                tf_op="XlaModule:",
                name=f"layer_{k}",
            )
        if plain_between:
            trace.tf_kernel(7, "__amd_rocclr_copyBuffer.kd", base + 14, base + 300, 20, tf_op=None)
    return trace


def _two_gpus(steps: int = 6) -> GpuTrace:
    """`_jax_fit("jax_se")`'s step on GPU:0 and GPU:1, each device's run by its own execute thread."""
    trace = GpuTrace(layout="jax_se")
    first, second = trace.gpu, _Plane(trace.space, "/device:GPU:1", 2)
    for step in range(steps):
        base = step * STEP_US
        trace.step(step, base, 900)
        for device, plane in enumerate((first, second)):
            trace.gpu = plane
            trace.launcher = trace.host.line(5000 + device, f"py_xla_execute/{5000 + device}")
            trace.execution(JAX_MODULE, base + 9.5 + 10 * device, 3.5)
            for k in range(3):
                trace.xla_kernel(
                    7 + device,
                    f"loop_fusion_{k}",
                    base + 10 + 10 * device + k,
                    base + 60 + 45 * k,
                    40,
                    module=JAX_MODULE,
                    program=JAX_PROGRAM,
                    hlo_op=f"fusion.{k}",
                    tf_op="XlaModule:",
                )
    trace.gpu = first
    return trace


def _dropped() -> GpuTrace:
    trace = jit_fit(6)
    trace.space.warnings.append(
        "Detected GPU events dropped on gpu-host: Profiler has collected 2097152 driver events and "
        "2097152 device events. 12 events dropped because total device(activity) events reaches max."
    )
    trace.drop_device_events_after(5 * STEP_US + 100)
    return trace


def _jax_gap() -> GpuTrace:
    return _jax_fit("jax_se", with_steps=False, plain_between=True)


SHAPES: dict[str, Shape] = {
    "tf_function_run": Shape(
        lambda: jit_fit(9),
        "tensorflow/core/common_runtime/function.cc (FunctionRun), xla/service/gpu/gpu_executable.cc",
        Expect(9 * 120, 9 * 130, 9, 9),
    ),
    "tf_no_markers": Shape(
        lambda: jit_fit(6, with_steps=False),
        "tensorflow/core/common_runtime/function.cc (FunctionRun, no step marker)",
        Expect(6 * 120, 6 * 130, 6, None),
    ),
    "command_buffers": Shape(
        command_buffer_fit,
        "xla/backends/gpu/runtime/command_buffer_thunk.cc, xla/backends/profiler/gpu/cupti_buffer_events.cc",
        Expect(6 * 120, 6 * 130, 6, 6),
    ),
    "collectives": Shape(
        collective_fit,
        "xla/backends/profiler/gpu/cupti_collector.cc (NCCL kernels on their own stream)",
        # Compute 60-100, 105-145, 150-190 us and the all-reduce 100-180 us: busy 130 us a step.
        Expect(6 * 130, 6 * 130, 6, 6),
    ),
    "dropped_events": Shape(
        _dropped,
        "xla/backends/profiler/gpu/cupti_collector.cc (ReportNumEventsIfDropped)",
        # The last step keeps its first kernel (40 us) only.
        Expect(5 * 120 + 40, 5 * 130 + 40, 6, 6),
    ),
    "jax_se": Shape(
        lambda: _jax_fit("jax_se"),
        "xla/pjrt/pjrt_stream_executor_client.cc, jaxlib pjit.cc (PjitFunction)",
        Expect(6 * 120, 6 * 130, 6, 6),
    ),
    "jax_tfrt": Shape(
        lambda: _jax_fit("jax_tfrt"),
        "xla/pjrt/gpu/tfrt/tfrt_gpu_executable.cc (ExecuteHelper, execute_fn)",
        Expect(6 * 120, 6 * 130, 6, 6),
    ),
    "jax_no_markers": Shape(
        _jax_gap,
        "jax.profiler.trace without StepTraceAnnotation; xla/service/gpu/gpu_executable.cc",
        Expect(6 * 120, 6 * 130, 6, None),
    ),
    "two_gpus": Shape(
        _two_gpus,
        "xla/backends/profiler/gpu/cupti_collector.cc (one plane per device)",
        Expect(2 * 6 * 120, 2 * 6 * 130, 12, 6, devices=2),
    ),
}

__all__ = [
    "JAX_MODULE",
    "JAX_PROGRAM",
    "MODULE",
    "NCCL_TF",
    "NCCL_XLA",
    "PROGRAM",
    "SHAPES",
    "Expect",
    "Shape",
]


def build(name: str) -> Any:
    """The trace of shape `name`."""
    return SHAPES[name].build()
