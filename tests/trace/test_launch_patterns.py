"""Every XLA launch pattern of keras_xla_guard/trace/classify.py, one by one,
in a synthetic trace built so that its figures are known exactly: a launch
kernel of 100 us around the pattern, and one plain op of 50 us beside it.

Real traces hold only the patterns of the machine that wrote them (a CPU
here: `CpuExecutable::ExecuteAsyncOnStream`, or TF 2.20's
`ThunkExecutor::Execute`); these pin the others, so that dropping any
alternative of a rule fails a test.
"""

from __future__ import annotations

import pytest
from _xspace import build_space

from keras_xla_guard import analyze_xspace
from keras_xla_guard.trace.classify import Category, classify_name

_LAUNCH_US, _PLAIN_US = 100, 50
_PLAIN = ("dense/MatMul:MatMul", 200, _PLAIN_US)
_ASYNC = "ExecutorState::ProcessAsync::Start"

# One span name per family of program runs; each alternative of the
# executable-span rule is the only one matching at least one of them.
EXECUTABLE_SPANS = [
    "CpuExecutable::ExecuteAsyncOnStream",  # XLA:CPU under TensorFlow 2.21
    "GpuExecutable::ExecuteAsyncOnStreamImpl",  # XLA:GPU
    "TfrtCpuExecutable::ExecuteHelper",  # the PjRt CPU client (JAX)
    "PjRtStreamExecutorLoadedExecutable::ExecuteHelper",  # the PjRt stream-executor client
    # The `PjRt*::Execute*` alternative's own reach: every PjRt executable
    # span found in XLA's sources also ends in `Executable::Execute*`.
    "PjRtCApiClient::Execute",
]
THUNK_SPAN = "ThunkExecutor::Execute"  # TF 2.20: a run's only span, also on pool threads


def _figures(space) -> tuple[int, float, float, float]:
    r = analyze_xspace(space)
    return r.xla_executions, r.xla_time_s, r.non_xla_op_time_s, r.xla_time_fraction


_ONE_LAUNCH = (
    1,
    pytest.approx(_LAUNCH_US * 1e-6),
    pytest.approx(_PLAIN_US * 1e-6),
    pytest.approx(_LAUNCH_US / (_LAUNCH_US + _PLAIN_US)),
)


@pytest.mark.parametrize("span", [*EXECUTABLE_SPANS, THUNK_SPAN])
def test_every_program_run_span_is_xla(span):
    """Each name of a program run's span is classified as XLA."""
    assert classify_name(span) == Category.XLA


@pytest.mark.parametrize(
    "span",
    [
        "PjRtCpuClient::Compile",
        "ThunkExecutor::ExecuteSequential",
        "CpuExecutable::Run",
        "PjRtCpuClient::BufferFromHostBuffer",
    ],
)
def test_near_misses_are_not_program_runs(span):
    """Names close to a run's span but outside every pattern are not XLA."""
    assert classify_name(span) != Category.XLA


@pytest.mark.parametrize("span", [*EXECUTABLE_SPANS, THUNK_SPAN])
@pytest.mark.parametrize(
    "kernel",
    [
        (_ASYNC, {"name": "StatefulPartitionedCall", "kernel_type": "StatefulPartitionedCall"}),
        ("StatefulPartitionedCall:StatefulPartitionedCall", {}),
    ],
)
def test_kernel_around_a_program_run_is_one_launch_of_its_whole_time(span, kernel):
    """The TF kernel holding a run's span is one launch; its whole time is XLA time."""
    name, stats = kernel
    space = build_space({"tf_Compute/1": [(name, 0, _LAUNCH_US, stats), (span, 10, 80), _PLAIN]})
    assert _figures(space) == _ONE_LAUNCH


@pytest.mark.parametrize("span", [s for s in EXECUTABLE_SPANS if "Executable::" in s])
def test_executable_span_outside_any_kernel_is_a_launch_of_its_own(span):
    """An `*Executable::*` span with no kernel around it is one launch of its own duration."""
    space = build_space({"tf_Compute/1": [(span, 0, _LAUNCH_US), _PLAIN]})
    assert _figures(space) == _ONE_LAUNCH


def test_thunk_span_outside_any_kernel_is_pool_thread_work_not_a_launch():
    """A loose thunk span in no tf.function call is XLA work but no launch (a pool thread's share)."""
    space = build_space({"tf_numa_-1_Eigen/2": [(THUNK_SPAN, 0, _LAUNCH_US)], "tf_Compute/1": [_PLAIN]})
    executions, xla_s, _, _ = _figures(space)
    assert (executions, xla_s) == (0, pytest.approx(_LAUNCH_US * 1e-6))


@pytest.mark.parametrize("op_type", ["_XlaRun", "XlaLaunch", "XlaLaunchV2"])
@pytest.mark.parametrize("as_async", [False, True])
def test_launch_kernel_types_launch_without_a_span(op_type, as_async):
    """`_XlaRun`, `XlaLaunch` and `XlaLaunchV2` kernels are launches by their type alone."""
    kernel = (
        (_ASYNC, 0, _LAUNCH_US, {"name": "cluster_0/xla_run", "kernel_type": op_type})
        if as_async
        else (f"cluster_0/xla_run:{op_type}", 0, _LAUNCH_US)
    )
    assert _figures(build_space({"tf_Compute/1": [kernel, _PLAIN]})) == _ONE_LAUNCH


def test_hlo_op_events_make_their_kernel_a_launch():
    """A kernel holding HLO-op events (an `hlo_module` stat) and no run span is one launch."""
    space = build_space(
        {
            "tf_Compute/1": [
                (
                    _ASYNC,
                    0,
                    _LAUNCH_US,
                    {"name": "StatefulPartitionedCall", "kernel_type": "StatefulPartitionedCall"},
                ),
                ("fusion.1", 10, 30, {"hlo_module": "a_inference_step_1__.5", "hlo_op": "fusion.1"}),
                _PLAIN,
            ]
        }
    )
    assert _figures(space) == _ONE_LAUNCH
