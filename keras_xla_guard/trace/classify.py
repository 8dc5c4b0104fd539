"""How trace events are classified: the rules, in one place.

These rules follow what TensorFlow 2.16+ and XLA write into a profile (pinned
in `tests/trace/test_classify.py` and by the real-trace tests):

* XLA execution: `CpuExecutable::ExecuteAsyncOnStream`-style executable spans,
  `ThunkExecutor::Execute`, HLO-op events carrying an `hlo_module` stat, and
  TF kernels of type `_XlaRun`, `XlaLaunch`, `XlaLaunchV2`. A TF kernel that
  directly contains an executable span (the `StatefulPartitionedCall` of a
  `jit_compile=True` function in TF 2.21) is an XLA launch as well.
* Compilation: `*Compiler::RunBackend` marks one compiled program; the
  compile-phase spans around it (HLO passes, `JitCompiler::Compile`, ...) and
  `_XlaCompile` kernels that compile are compile time.
* Plain TF op kernels: events named `<op_name>:<OpType>`, and
  `ExecutorState::ProcessAsync::Start` events carrying `name`/`kernel_type`
  (except collectives, whose start only hands the work to a collective
  thread; their `<op_name>:<OpType>` event there is the execution), but
  not the rendezvous transfers graph partitioning adds (`_Send`, `_Recv`,
  `_HostSend`, `_HostRecv`), which xprof lists as no op either.
* Input pipeline: tf.data iterator events and iterator/optional kernels.
* Tracing: `tf.function-graph_building` (Python tracing, constant folding).
* Eager/Python overhead: `Eager*`, `TFE_*` and friends on the Python thread.
  Of it, ops run eagerly: an `EagerLocalExecute: <OpType>` span of an op
  that is no function call, XLA launch, Python function or input plumbing,
  with the eager spans it holds (its kernel's run: TensorFlow 2.21 records
  no `<name>:<OpType>` event for an op run eagerly).
* The guard's own ops: the signature tap records each batch with a few TF ops
  under the `xla_guard_tap` name scope; they are the guard's cost, not the
  user's model, and are booked apart from plain TF op time.
"""

from __future__ import annotations

import re
from typing import Final, cast

__all__ = [
    "CATEGORIES",
    "COMPILE_COUNT_RE",
    "GUARD_SCOPE",
    "TRANSFER_OP_TYPES",
    "Category",
    "async_kernel_op",
    "classify_name",
    "classify_name_and_op",
    "classify_op_type",
    "eager_op_type",
    "is_dispatch_only",
    "is_guard_op",
    "split_tf_op",
]


class Category:
    """Event categories; plain ints keep the scan loop fast."""

    NONE: Final = 0  # transparent: time goes to the enclosing categorized event
    XLA: Final = 1
    XLA_WORKER: Final = 2  # XLA work on a pool thread, inside a launch elsewhere
    COMPILE: Final = 3
    KERNEL: Final = 4  # a TF op kernel, resolved when its children are known
    ASYNC_KERNEL: Final = 5  # a kernel whose name and type live in event stats
    INPUT: Final = 6
    TRACING: Final = 7
    EAGER: Final = 8
    OP: Final = 9  # a resolved plain (non-XLA) TF op kernel
    OTHER: Final = 10
    EAGER_OP: Final = 11  # an op run eagerly: a part of EAGER, booked apart


# How many categories there are: the size of the scan's sums.
CATEGORIES: Final = Category.EAGER_OP + 1


XLA_LAUNCH_TYPES: Final = frozenset({"_XlaRun", "XlaLaunch", "XlaLaunchV2"})
XLA_COMPILE_TYPES: Final = frozenset({"_XlaCompile", "XlaCompile"})
INPUT_OP_TYPES: Final = frozenset(
    {
        "IteratorGetNext",
        "IteratorGetNextSync",
        "IteratorGetNextAsOptional",
        "MakeIterator",
        "AnonymousIterator",
        "AnonymousIteratorV2",
        "AnonymousIteratorV3",
        "DeleteIterator",
        "IteratorToStringHandle",
        "IteratorFromStringHandleV2",
        "OptionalFromValue",
        "OptionalGetValue",
        "OptionalHasValue",
        "OptionalNone",
        "MultiDeviceIterator",
        "MultiDeviceIteratorFromStringHandle",
        "MultiDeviceIteratorGetNextFromShard",
        "MultiDeviceIteratorInit",
        "MultiDeviceIteratorToStringHandle",
    }
)
_DATASET_TYPE_RE: Final = re.compile(r"Dataset(V\d+)?$")

# TF op names: `[A-Za-z0-9.][A-Za-z0-9_.\-/>]*` (and function-call nodes,
# `__inference_f_12`); op types are identifiers.
_TF_OP_RE: Final = re.compile(r"^([A-Za-z0-9._][A-Za-z0-9_.\-/>]*):([A-Za-z_][A-Za-z0-9_]*)$")
# The rendezvous ops graph partitioning adds where a tensor crosses devices or
# enters a function call (`_send_Const_0:_Send`, an async `_Recv` start named
# `cond/output/_12/_30`): they move data and wait for it, and compute nothing.
# They are no ops, as xprof's op tables have none of them (their names start
# with an underscore, which `IsTfOpName` in `xla/tsl/profiler/utils/
# tf_op_utils.cc` refuses, or they run as async starts, which xprof does not
# read as ops); their time goes to the event around them.
TRANSFER_OP_TYPES: Final = frozenset({"_Send", "_Recv", "_HostSend", "_HostRecv"})
_XLA_EXEC_RE: Final = re.compile(
    r"^(?:\w*Executable::Execute\w*|ThunkExecutor::Execute|PjRt\w*::Execute\w*)$"
)
COMPILE_COUNT_RE: Final = re.compile(r"^\w*Compiler::RunBackend$")
_COMPILE_RE: Final = re.compile(
    r"^(?:\w*Compiler::(?:RunBackend|RunHloPasses|Compile\w*)|JitCompiler::Compile"
    r"|HLO passes .*|XlaCompil\w*::Compile\w*|DeviceCompiler\w*::Compile\w*)$"
)
_INPUT_RE: Final = re.compile(
    r"^(?:Iterator::|MakeIterator::|IteratorGetNext\w*Op::DoCompute$"
    r"|InstantiatedCapturedFunction::Run$|\w+(?:Produce|Consume)$)"
)
_TRACING_RE: Final = re.compile(r"^tf\.function-(?:graph_building|tracing)")
_EAGER_RE: Final = re.compile(
    r"^(?:Eager|TFE_|KernelAndDeviceFunc::Run$|FunctionRun$|convert_to_tensor$"
    r"|tf\.constant$|ValidateInputTypeAndPlacement$)"
)
# The patterns above as one, tried in this order (the first that matches
# names the category): one match per name, where a name of none of them
# (most of a jit-compiled model's, its HLO ops) took six. The TF op
# pattern comes before the eager names: `EagerPyFunc:EagerPyFunc` (a
# `tf.py_function`) is an op kernel whose type merely starts with "Eager".
_CATEGORY_OF: Final = {
    "xla": Category.XLA,
    "compile": Category.COMPILE,
    "input": Category.INPUT,
    "tracing": Category.TRACING,
    "kernel": Category.KERNEL,
    "eager": Category.EAGER,
}
_CATEGORY_RE: Final = re.compile(
    "|".join(
        f"(?P<{group}>{pattern.pattern.removeprefix('^')})"
        for group, pattern in zip(
            _CATEGORY_OF, (_XLA_EXEC_RE, _COMPILE_RE, _INPUT_RE, _TRACING_RE, _TF_OP_RE, _EAGER_RE)
        )
    )
)
# An op run eagerly is this span, named for its type; a `tf.function` call
# is one too, named for its function (`__inference_<name>_<n>`).
_EAGER_EXECUTE: Final = "EagerLocalExecute: "
# Op types whose eager span runs more than one kernel, each booked as it is:
# calls of functions and Python functions (whose Python runs ops of its own).
_CALL_TYPES: Final = frozenset(
    {"PartitionedCall", "StatefulPartitionedCall", "EagerPyFunc", "PyFunc", "PyFuncStateless"}
)
ASYNC_KERNEL_EVENT: Final = "ExecutorState::ProcessAsync::Start"
# Collectives (the gradient all-reduce under tf.distribute) start on a compute
# thread and run on a collective thread, where their own `<name>:<OpType>`
# event records the execution: their start event is only the hand-off.
_DISPATCH_ONLY_TYPE_RE: Final = re.compile(r"^(?:Collective\w*|Nccl\w*)$")
# The name scope of the signature tap's ops (see `seam.tap.InputTap.record`).
GUARD_SCOPE: Final = "xla_guard_tap"


def split_tf_op(name: str) -> tuple[str, str] | None:
    """Splits a TF op event name `<op_name>:<OpType>`.

    Args:
        name: An event name such as `"dense/MatMul:MatMul"`.

    Returns:
        `(op_name, op_type)`, or `None` if `name` is not a TF op event name.
    """
    m = _TF_OP_RE.match(name)
    if m is None:
        return None
    return m.group(1), m.group(2)


def is_dispatch_only(op_type: str) -> bool:
    """Whether an async kernel's start event of this type is only a hand-off.

    Args:
        op_type: The `kernel_type` of an `ExecutorState::ProcessAsync::Start`
            event, e.g. `"CollectiveReduceV2"`.

    Returns:
        `True` for collectives, whose execution is recorded by their own op
        event on a collective thread (counting the start as well would count
        every all-reduce twice).
    """
    return _DISPATCH_ONLY_TYPE_RE.match(op_type) is not None


def async_kernel_op(op_type: str, name: str) -> tuple[str, str] | None:
    """The op an async kernel's start event (`ExecutorState::ProcessAsync::Start`) runs.

    Args:
        op_type: Its `kernel_type` stat, e.g. `"MatMul"`; `""` when absent.
        name: Its `name` stat, the op's node name; `""` when absent.

    Returns:
        `(op_type, op_name)` (the name is the type when the event has no
        name), or `None` when the event runs no op of its own: a
        collective's hand-off (`is_dispatch_only`) or a rendezvous transfer
        (`TRANSFER_OP_TYPES`).
    """
    if not op_type or is_dispatch_only(op_type) or op_type in TRANSFER_OP_TYPES:
        return None
    return op_type, name or op_type


def is_guard_op(op_name: str) -> bool:
    """Whether a TF op was added by the guard's signature tap.

    Args:
        op_name: The op's node name, e.g. `"xla_guard_tap/ResourceScatterUpdate"`.

    Returns:
        `True` when one of the name's scopes is `GUARD_SCOPE` (function
        and branch graphs may prefix scopes of their own).
    """
    return GUARD_SCOPE in op_name.split("/")[:-1]


def classify_name(name: str) -> int:
    """Returns the `Category` an event gets from its name alone.

    Args:
        name: The event's metadata name.

    Returns:
        One of the `Category` values. `Category.NONE` for names that say
        nothing by themselves (HLO op events are recognised by their
        `hlo_module` stat instead).
    """
    if name == ASYNC_KERNEL_EVENT:
        return Category.ASYNC_KERNEL
    m = _CATEGORY_RE.match(name)
    if m is None:
        return Category.NONE
    # Every alternative is a named group: a match always names one.
    cat = _CATEGORY_OF[cast(str, m.lastgroup)]
    if cat == Category.KERNEL and name.rsplit(":", 1)[1] in TRANSFER_OP_TYPES:
        return Category.NONE
    if cat == Category.EAGER and name.startswith(_EAGER_EXECUTE):
        op_type = name[len(_EAGER_EXECUTE) :]
        if not op_type.startswith("__") and op_type not in _CALL_TYPES and classify_op_type(op_type) == "op":
            return Category.EAGER_OP
    return cat


def classify_name_and_op(name: str) -> tuple[int, tuple[str, str] | None]:
    """`classify_name` and, for a TF op kernel, `split_tf_op`, with the fewest regex matches.

    A trace without XLA names thousands of op kernels; each would take every
    category's pattern before its own. No pattern tried before the TF op's
    matches a `<op_name>:<OpType>` name (all hold `::`, a space or no colon)
    except tracing's, which is a prefix: a TF op name is a kernel unless it
    also starts like a tracing event.

    Args:
        name: The event's metadata name.

    Returns:
        `(classify_name(name), split_tf_op(name))` when the category is
        `Category.KERNEL`, else `(classify_name(name), None)`.
    """
    m = _TF_OP_RE.match(name)
    if m is not None and not _TRACING_RE.match(name):
        if m.group(2) in TRANSFER_OP_TYPES:
            return Category.NONE, None
        return Category.KERNEL, (m.group(1), m.group(2))
    return classify_name(name), None


def eager_op_type(name: str) -> str:
    """The op type of an op run eagerly, from its event's name.

    Args:
        name: The name of an event of `Category.EAGER_OP`, e.g.
            `"EagerLocalExecute: MatMul"`.

    Returns:
        The op type, e.g. `"MatMul"`.
    """
    return name[len(_EAGER_EXECUTE) :]


def classify_op_type(op_type: str) -> str:
    """Names the role of a TF op type in an XLA coverage profile.

    Args:
        op_type: A TF op type such as `"MatMul"` or `"_XlaRun"`.

    Returns:
        `"xla_launch"`, `"xla_compile"`, `"input"` or `"op"`.
    """
    if op_type in XLA_LAUNCH_TYPES:
        return "xla_launch"
    if op_type in XLA_COMPILE_TYPES:
        return "xla_compile"
    if op_type in INPUT_OP_TYPES or _DATASET_TYPE_RE.search(op_type):
        return "input"
    return "op"
