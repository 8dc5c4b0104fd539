"""What in a train step XLA cannot compile, read from TensorFlow's traced graph or a profiled window.

The ops without an XLA kernel on this machine's XLA device (the kernel
registry, nested functions included), the ops whose compile-time argument
the data decides, the input dimensions the model leaves dynamic, and the
blockers of `jit_compile=True` a profiled window ran (`trace_blockers`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from keras_xla_guard.diagnose.scopes import owner_layer as _owner_layer
from keras_xla_guard.diagnose.scopes import scopes_are_suffixed as _scopes_are_suffixed

__all__ = [
    "PY_FUNC_TYPES",
    "ConstantInputOp",
    "DynamicDim",
    "UnsupportedOp",
    "blocker_names",
    "constant_inputs",
    "dynamic_dims",
    "is_string_op",
    "jit_device",
    "model_layer_names",
    "trace_blockers",
    "unsupported_ops",
]

_UNSUPPORTED_RE = re.compile(
    r"No registered '(?P<type>[^']+)' OpKernel for (?P<device>\S+) devices compatible with "
    r"node \{\{node (?P<name>[^}]+)\}\}"
)
# TensorFlow's message when a shape argument depends on the computation's parameters.
_CONSTANT_RE = re.compile(
    r"Input (?P<input>\d+) to node `(?P<name>[^`]+)` with op (?P<type>\w+) must be a compile-time constant"
)
# Graph plumbing the XLA bridge handles itself rather than through kernels.
_PLUMBING = frozenset({"Placeholder", "NoOp", "_Arg", "_Retval", "_DeviceArg", "_DeviceRetval"})
PY_FUNC_TYPES = frozenset({"EagerPyFunc", "PyFunc", "PyFuncStateless"})
_STRING_TYPES = frozenset({"AsString", "RegexReplace", "RegexFullMatch", "Substr", "DecodeBase64"})


@dataclass(frozen=True)
class UnsupportedOp:
    """An op XLA cannot compile on the target device.

    Attributes:
        op_type: The TF op type, e.g. `"EagerPyFunc"`.
        op_name: The op's name in the traced step, e.g.
            `"functional_1/my_layer_1/EagerPyFunc"`.
        layer: Name of the Keras layer whose name scope holds the op;
            `None` when no layer matches (e.g. the loss).
        function: The traced function holding the op (a nested `while`
            body, for example).
    """

    op_type: str
    op_name: str
    layer: str | None
    function: str

    def to_dict(self) -> dict[str, Any]:
        """Returns the op as a JSON-serializable dict."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ConstantInputOp:
    """An op with an argument XLA must know at compile time that the data decides.

    TensorFlow lowers such a step only with the argument's value folded in,
    so under `jit_compile=True` it compiles the step again for every new
    value: with a value computed from each batch, at nearly every step.

    Attributes:
        op_type: The TF op type, e.g. `"Fill"` (`tf.zeros` of a computed size).
        op_name: The op's name in the traced step, e.g.
            `"functional_1/my_layer_1/zeros"`.
        layer: Name of the Keras layer whose name scope holds the op;
            `None` when no layer matches.
        input_index: Which of the op's inputs must be a constant.
    """

    op_type: str
    op_name: str
    layer: str | None
    input_index: int

    def to_dict(self) -> dict[str, Any]:
        """Returns the op as a JSON-serializable dict."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class DynamicDim:
    """An input dimension whose size is not fixed in the model's input spec.

    Attributes:
        input_name: The model input's name.
        axis: The dimension's index (0 is the batch dimension).
        sample_size: The size it has in the sample batch, if known.
    """

    input_name: str
    axis: int
    sample_size: int | None

    def to_dict(self) -> dict[str, Any]:
        """Returns the dimension as a JSON-serializable dict."""
        return dataclasses.asdict(self)


def model_layer_names(model: Any) -> frozenset[str]:
    """The names of the model's layers, nested ones included (Keras' own traversal when present)."""
    from keras_xla_guard.seam import all_layers

    return frozenset(layer.name for layer in all_layers(model))


def is_string_op(op_type: str) -> bool:
    """Whether an op of `op_type` works on strings, a type XLA does not have."""
    return "String" in op_type or op_type in _STRING_TYPES


def jit_device() -> str:
    """The device XLA compiles for on this machine: `"XLA_GPU_JIT"` with a GPU, else `"XLA_CPU_JIT"`."""
    import tensorflow as tf

    return "XLA_GPU_JIT" if tf.config.list_logical_devices("GPU") else "XLA_CPU_JIT"


def _has_xla_kernel(op_type: str, device: str, cache: dict[str, bool]) -> bool:
    if op_type not in cache:
        from keras_xla_guard.seam.tf_internals import registered_kernel_devices

        cache[op_type] = device in registered_kernel_devices(op_type)
    return cache[op_type]


def _graph_nodes(concrete: Any) -> Iterable[tuple[str, str, str]]:
    """(op type, op name, function name) of every op, nested functions included.

    Nested functions (`while` bodies, branches, gradients) are traced under
    the caller's name scope, so their op names keep the Keras layer scope.
    """
    graph = concrete.graph
    for op in graph.get_operations():
        yield op.type, op.name, graph.name
    from keras_xla_guard.seam.tf_internals import function_library_nodes

    yield from function_library_nodes(graph)


def unsupported_ops(
    concrete: Any, error: str, device: str, layer_names: frozenset[str]
) -> tuple[UnsupportedOp, ...]:
    """The ops of the traced step without an XLA kernel on `device`, and the one TensorFlow's `error` names."""
    found: dict[tuple[str, str], UnsupportedOp] = {}
    cache: dict[str, bool] = {}
    nodes = list(_graph_nodes(concrete))
    suffixed = _scopes_are_suffixed((name for _, name, _ in nodes), layer_names)
    for op_type, op_name, function in nodes:
        if op_type in _PLUMBING or (op_type, op_name) in found:
            continue
        if not _has_xla_kernel(op_type, device, cache):
            found[(op_type, op_name)] = UnsupportedOp(
                op_type, op_name, _owner_layer(op_name, layer_names, suffixed), function
            )
    # TensorFlow names the first op it rejects; keep it should the kernel
    # registry not cover it (an op supported only in some configurations).
    for m in _UNSUPPORTED_RE.finditer(error):
        op_type, name = m.group("type"), m.group("name")
        if (op_type, name) not in found:
            found[(op_type, name)] = UnsupportedOp(
                op_type, name, _owner_layer(name, layer_names, suffixed), concrete.graph.name
            )
    return tuple(found.values())


def constant_inputs(
    shapes_error: str, concrete: Any, layer_names: frozenset[str]
) -> tuple[ConstantInputOp, ...]:
    """The ops TensorFlow named as needing a compile-time constant when the step lowered from shapes alone."""
    found = list(_CONSTANT_RE.finditer(shapes_error))
    if not found:
        return ()
    suffixed = _scopes_are_suffixed((name for _, name, _ in _graph_nodes(concrete)), layer_names)
    return tuple(
        ConstantInputOp(
            m.group("type"),
            m.group("name"),
            _owner_layer(m.group("name"), layer_names, suffixed),
            int(m.group("input")),
        )
        for m in found
    )


def dynamic_dims(model: Any, x: Any) -> tuple[DynamicDim, ...]:
    """The model's input dimensions that are `None` in its spec, with their sizes in the sample `x`."""
    import tensorflow as tf

    inputs = getattr(model, "inputs", None) or []
    samples = tf.nest.flatten(x)
    dims = []
    for i, spec in enumerate(inputs):
        shape = tuple(spec.shape)
        sample_shape = tuple(samples[i].shape) if len(inputs) == len(samples) else ()
        name = str(getattr(spec, "name", None) or f"input_{i}")
        for axis, size in enumerate(shape):
            if size is None:
                got = sample_shape[axis] if axis < len(sample_shape) else None
                dims.append(DynamicDim(name, axis, None if got is None else int(got)))
    return tuple(dims)


def trace_blockers(report: Any, model: Any = None) -> tuple[UnsupportedOp, ...]:
    """The ops a profiled window ran outside XLA that XLA cannot compile: blockers of `jit_compile=True`.

    An op of the report's op table counts when its type has no XLA kernel
    on this machine's XLA device and it is the step's own: it sits in one
    of `model`'s layers (with a model), or it is a Python-function or
    string op. The iterator and `Optional` plumbing around a step, which
    has no XLA kernel either, never counts, nor do the kernels TensorFlow's
    runtime rewrites ops into (`_MklMatMul`, `_FusedConv2D`).

    Args:
        report: A measured `CoverageReport`.
        model: The Keras model the window trained, to name each op's
            layer. Defaults to `None`.

    Returns:
        The blockers, each once, biggest self time first.
    """
    device = jit_device()
    cache: dict[str, bool] = {}
    names = [op.op_name for op in report.top_non_xla_ops]
    layer_names = model_layer_names(model) if model is not None else frozenset()
    suffixed = _scopes_are_suffixed(names, layer_names)
    found: dict[str, UnsupportedOp] = {}
    for op in report.top_non_xla_ops:
        # `_MklMatMul`, `_FusedConv2D`, ...: kernels TensorFlow's runtime
        # rewrote the user's op into, after XLA's chance to compile it.
        if op.op_type in found or op.op_type.startswith("_") or _has_xla_kernel(op.op_type, device, cache):
            continue
        layer = _owner_layer(op.op_name, layer_names, suffixed) if layer_names else None
        known = op.op_type in PY_FUNC_TYPES or is_string_op(op.op_type)
        if layer is not None or known:
            found[op.op_type] = UnsupportedOp(op.op_type, op.op_name, layer, "")
    return tuple(found.values())


def blocker_names(ops: Iterable[UnsupportedOp]) -> tuple[str, ...]:
    """Each op without an XLA kernel as advice names it: its type and its layer (or its name).

    Args:
        ops: The ops, e.g. `ExplainReport.unsupported_ops`.

    Returns:
        E.g. `("EagerPyFunc in layer 'py_layer'",)`, each once, in order.
    """
    names = (
        f"{op.op_type} in layer {op.layer!r}" if op.layer else f"{op.op_type} ({op.op_name!r})" for op in ops
    )
    return tuple(dict.fromkeys(names))
