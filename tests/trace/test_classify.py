"""Tests for keras_xla_guard.trace.classify: event names seen in real TF 2.21 traces."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_xla_guard.trace.classify import (
    Category,
    classify_name,
    classify_name_and_op,
    classify_op_type,
    is_guard_op,
    split_tf_op,
)


@pytest.mark.parametrize(
    ("name", "category"),
    [
        ("CpuExecutable::ExecuteAsyncOnStream", Category.XLA),
        ("ThunkExecutor::Execute", Category.XLA),
        ("GpuExecutable::ExecuteAsyncOnStreamImpl", Category.XLA),
        ("CpuCompiler::RunBackend", Category.COMPILE),
        ("JitCompiler::Compile", Category.COMPILE),
        ("HLO passes through layout assignment", Category.COMPILE),
        ("Iterator::Root::Prefetch::BatchV2", Category.INPUT),
        ("MakeIterator::RootDataset", Category.INPUT),
        ("PrefetchProduce", Category.INPUT),
        ("IteratorGetNextOp::DoCompute", Category.INPUT),
        ("tf.function-graph_building", Category.TRACING),
        ("EagerLocalExecute: __inference_multi_step_on_iterator_869", Category.EAGER),
        ("EagerLocalExecute: MatMul", Category.EAGER_OP),
        ("EagerLocalExecute: AssignAddVariableOp", Category.EAGER_OP),
        ("EagerLocalExecute: _EagerConst", Category.EAGER_OP),
        ("EagerLocalExecute: IteratorGetNext", Category.EAGER),
        ("EagerLocalExecute: AnonymousIteratorV3", Category.EAGER),
        ("EagerLocalExecute: TensorSliceDataset", Category.EAGER),
        ("EagerLocalExecute: StatefulPartitionedCall", Category.EAGER),
        ("EagerLocalExecute: EagerPyFunc", Category.EAGER),
        ("EagerLocalExecute: XlaLaunch", Category.EAGER),
        ("EagerExecute", Category.EAGER),
        ("EagerKernelExecute", Category.EAGER),
        ("TFE_Py_FastPathExecute_C", Category.EAGER),
        ("ExecutorState::ProcessAsync::Start", Category.ASYNC_KERNEL),
        ("StatefulPartitionedCall/adam/Add:AddV2", Category.KERNEL),
        # Graph partitioning's rendezvous transfers: no ops, as in xprof (issue 56).
        ("_send_range_0:_Send", Category.NONE),
        ("cond/output/_12/_30:_Recv", Category.NONE),
        ("_recv_x_0:_HostRecv", Category.NONE),
        ("range_0:_SendIt", Category.KERNEL),
        ("__inference_step_7:__inference_step_7", Category.KERNEL),
        ("EagerPyFunc:EagerPyFunc", Category.KERNEL),
        ("cluster_0_1/xla_run:_XlaRun", Category.KERNEL),
        ("end: copy.1", Category.NONE),
        ("MatMul.8", Category.NONE),
        ("ExecutorState::Process", Category.NONE),
    ],
)
def test_event_names_map_to_categories(name, category):
    """Each event name seen in real traces gets the documented category."""
    assert classify_name(name) == category


def test_tf_op_names_split_into_name_and_type():
    """`<op_name>:<OpType>` splits; names with spaces or `::` are not TF ops."""
    assert split_tf_op("StatefulPartitionedCall/sequential/dense/MatMul:MatMul") == (
        "StatefulPartitionedCall/sequential/dense/MatMul",
        "MatMul",
    )
    assert split_tf_op("Iterator::Root") is None
    assert split_tf_op("EagerLocalExecute: MatMul") is None
    assert split_tf_op("end: copy.1") is None


@pytest.mark.parametrize(
    ("op_type", "role"),
    [
        ("_XlaRun", "xla_launch"),
        ("XlaLaunch", "xla_launch"),
        ("XlaLaunchV2", "xla_launch"),
        ("_XlaCompile", "xla_compile"),
        ("IteratorGetNext", "input"),
        ("OptionalFromValue", "input"),
        ("TensorSliceDataset", "input"),
        ("ParallelMapDatasetV2", "input"),
        ("MatMul", "op"),
        ("_XlaMerge", "op"),
        ("StatefulPartitionedCall", "op"),
    ],
)
def test_op_types_have_roles(op_type, role):
    """XLA launch/compile kernels, input kernels and plain ops are told apart by type."""
    assert classify_op_type(op_type) == role


@pytest.mark.parametrize(
    ("op_name", "guard"),
    [
        ("xla_guard_tap/ResourceScatterUpdate", True),
        ("cond/then/_0/xla_guard_tap/Shape", True),
        ("xla_guard_tap_1/Shape", False),
        ("model/xla_guard_tap", False),
        ("dense/MatMul", False),
    ],
)
def test_guard_ops_are_those_under_the_guard_scope(op_name, guard):
    """Only ops inside a scope named exactly xla_guard_tap are the guard's own."""
    assert is_guard_op(op_name) is guard


_NAMES_SEEN = (
    "CpuExecutable::ExecuteAsyncOnStream",
    "ThunkExecutor::Execute",
    "CpuCompiler::RunBackend",
    "HLO passes through layout assignment",
    "Iterator::Root::Prefetch::BatchV2",
    "PrefetchProduce",
    "IteratorGetNextOp::DoCompute",
    "tf.function-graph_building",
    "tf.function-graph_building:Foo",
    "tf.function-tracing/x:Shape",
    "EagerLocalExecute: __inference_multi_step_on_iterator_869",
    "TFE_Py_FastPathExecute_C",
    "ExecutorState::ProcessAsync::Start",
    "StatefulPartitionedCall/adam/Add:AddV2",
    "_send_range_0:_Send",
    "EagerPyFunc:EagerPyFunc",
    "Eager:Op",
    "cluster_0_1/xla_run:_XlaRun",
    "end: copy.1",
    "MatMul.8",
    "ExecutorState::Process",
    "a:b:C",
    "",
)


@pytest.mark.parametrize("name", _NAMES_SEEN)
def test_classify_name_and_op_is_classify_name_with_the_split_of_kernels(name):
    """The one-match shortcut gives `classify_name`'s category, and `split_tf_op`'s parts for kernels."""
    category = classify_name(name)
    assert classify_name_and_op(name) == (
        category,
        split_tf_op(name) if category == Category.KERNEL else None,
    )


def test_classify_name_and_op_sends_tracing_prefixed_op_names_to_tracing():
    """A `<op_name>:<OpType>` name that starts like a tracing event is tracing, as `classify_name` says."""
    assert classify_name_and_op("tf.function-graph_building:Foo") == (Category.TRACING, None)
    assert classify_name_and_op("dense/MatMul:MatMul") == (Category.KERNEL, ("dense/MatMul", "MatMul"))


def _category_one_pattern_at_a_time(name: str) -> int:
    """`classify_name` as a chain of the separate patterns, in the documented order."""
    from keras_xla_guard.trace import classify as c

    if name == c.ASYNC_KERNEL_EVENT:
        return Category.ASYNC_KERNEL
    for pattern, category in (
        (c._XLA_EXEC_RE, Category.XLA),
        (c._COMPILE_RE, Category.COMPILE),
        (c._INPUT_RE, Category.INPUT),
        (c._TRACING_RE, Category.TRACING),
        (c._TF_OP_RE, Category.KERNEL),
        (c._EAGER_RE, Category.EAGER),
    ):
        if pattern.match(name):
            if category == Category.KERNEL and name.rsplit(":", 1)[1] in c.TRANSFER_OP_TYPES:
                return Category.NONE
            return category
    return Category.NONE


_FRAGMENTS = (
    "Eager",
    "TFE_",
    "tf.function-tracing",
    "tf.function-graph_building",
    "Iterator::",
    "MakeIterator::",
    "Cpu",
    "Executable::Execute",
    "ThunkExecutor::Execute",
    "PjRtCpu::Execute",
    "Compiler::RunBackend",
    "Compiler::Compile",
    "HLO passes ",
    "Produce",
    "Consume",
    "FunctionRun",
    "tf.constant",
    ":",
    "/",
    "MatMul",
    "_Send",
    "x",
    " ",
    "::",
    ".1",
)


@settings(max_examples=400, deadline=None, database=None)
@given(st.lists(st.sampled_from(_FRAGMENTS), max_size=5).map("".join))
def test_the_one_pattern_classify_name_gives_the_chain_of_patterns(name):
    """Names made of pieces several patterns match (an op named like an eager or tracing event, an
    executable with a suffix): the one alternation's category is the first separate pattern's."""
    assert classify_name(name) == _category_one_pattern_at_a_time(name)
    assert classify_name_and_op(name)[0] == classify_name(name)


@pytest.mark.parametrize(
    ("op_type", "name", "op"),
    [
        ("_Recv", "_recv_Placeholder/_0_0", None),
        ("_Recv", "cond/output/_12/_30", None),
        ("_HostRecv", "_recv_iterator_0", None),
        ("_Send", "", None),
        ("CollectiveReduceV2", "Adam/CollectiveReduceV2", None),
        ("", "dense/MatMul", None),
        ("StatefulPartitionedCall", "", ("StatefulPartitionedCall", "StatefulPartitionedCall")),
        ("_MklMatMul", "dense/MatMul", ("_MklMatMul", "dense/MatMul")),
    ],
)
def test_async_rendezvous_transfers_and_collective_hand_offs_are_no_ops(op_type, name, op):
    """An async kernel start is an op unless it only hands off a collective or is one of graph
    partitioning's rendezvous transfers (`_Recv`, `_HostRecv`, `_Send`), which xprof lists as no op."""
    from keras_xla_guard.trace.classify import async_kernel_op

    assert async_kernel_op(op_type, name) == op
