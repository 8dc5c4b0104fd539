"""TensorFlow internals keras-xla-guard relies on, each behind one function.

Each function says what it touches and what happens when a TensorFlow
release no longer has it (a `None` figure or a public fallback, never a
fake value). The versions each was verified on are listed in
`docs/compatibility.md`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = [
    "cpu_global_jit",
    "function_library_nodes",
    "local_variable",
    "registered_kernel_devices",
    "set_cpu_global_jit",
    "tf_function_jit_compile",
]


def local_variable(initial_value: Any) -> Any:
    """A plain resource variable, even inside a `tf.distribute` strategy scope.

    tf_keras calls callbacks inside `strategy.scope()`, where `tf.Variable`
    becomes a `MirroredVariable`, whose handle is no plain resource handle;
    the signature tap's ring lives on the host input pipeline and must stay
    one local variable. Constructing `ResourceVariable` directly
    (`tensorflow.python.ops.resource_variable_ops`) skips the strategy's
    variable creator; without it, the public `tf.Variable` is used.
    """
    try:
        from tensorflow.python.ops import resource_variable_ops
    except ImportError:
        import tensorflow as tf

        return tf.Variable(initial_value, trainable=False)
    return resource_variable_ops.ResourceVariable(initial_value, trainable=False)


def _jit_setter() -> Any:
    try:
        from tensorflow.python.client import pywrap_tf_session
    except ImportError:
        return None
    return getattr(pywrap_tf_session, "TF_SetTfXlaCpuGlobalJit", None)


def cpu_global_jit() -> bool | None:
    """The `tf_xla_cpu_global_jit` value TensorFlow holds right now; `None` if unreadable.

    TensorFlow exposes only a C-API setter that returns the previous value
    (`pywrap_tf_session.TF_SetTfXlaCpuGlobalJit`), so the value is read by
    setting it and restoring it at once.
    """
    setter = _jit_setter()
    if setter is None:
        return None
    old = setter(False)
    setter(old)
    return bool(old)


def set_cpu_global_jit(on: bool) -> bool:
    """Sets `tf_xla_cpu_global_jit` through the C API; returns whether it could."""
    setter = _jit_setter()
    if setter is None:
        return False
    setter(bool(on))
    return True


def registered_kernel_devices(op_type: str) -> tuple[str, ...]:
    """Device types with a kernel registered for `op_type` (TF's kernel registry)."""
    from tensorflow.python.framework import kernels

    return tuple(k.device_type for k in kernels.get_registered_kernels_for_op(op_type).kernel)


def function_library_nodes(graph: Any) -> Iterable[tuple[str, str, str]]:
    """(op type, op name, function name) of the functions a traced graph holds.

    `FuncGraph._functions` is the graph's function library (while bodies,
    branches, gradients); without it only the graph's own ops are seen.
    """
    for name, function in getattr(graph, "_functions", {}).items():
        definition = getattr(function, "definition", None)
        for node in getattr(definition, "node_def", ()):
            yield node.op, node.name, name


def tf_function_jit_compile(fn: Any) -> bool:
    """Whether `fn` is a `tf.function(jit_compile=True)` (kept only in `_jit_compile`)."""
    return bool(getattr(fn, "_jit_compile", None))
