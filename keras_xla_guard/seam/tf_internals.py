"""TensorFlow internals keras-xla-guard relies on, each behind one function.

Each function says what it touches and what happens when a TensorFlow
release no longer has it (a `None` figure or a public fallback, never a
fake value). The versions each was verified on are listed in
`docs/compatibility.md`.

The `xplane_pb2` bindings ship as
`tensorflow/tsl/profiler/protobuf/xplane_pb2.py`, but importing them the usual
way runs `tensorflow/__init__.py` first (several seconds, and all of TF). The
bindings themselves only need `google.protobuf`, so when TensorFlow is not yet
imported the one generated module is loaded straight from TensorFlow's install
directory. The descriptors it registers are identical to the ones TensorFlow
registers later, which protobuf accepts.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = [
    "cpu_global_jit",
    "function_library_nodes",
    "local_variable",
    "registered_kernel_devices",
    "set_cpu_global_jit",
    "tf_function_jit_compile",
    "xplane_pb2",
]

_XPLANE_MODULE = "tensorflow.tsl.profiler.protobuf.xplane_pb2"
_xplane_pb2: ModuleType | None = None


def xplane_pb2() -> ModuleType:
    """Returns TensorFlow's generated `xplane_pb2` module.

    Returns:
        The module that defines `XSpace`, `XPlane`, `XLine` and `XEvent`.

    Raises:
        ImportError: If TensorFlow is not installed.
    """
    global _xplane_pb2
    if _xplane_pb2 is not None:
        return _xplane_pb2
    if "tensorflow" in sys.modules or _XPLANE_MODULE in sys.modules:
        _xplane_pb2 = importlib.import_module(_XPLANE_MODULE)
        return _xplane_pb2
    spec = importlib.util.find_spec("tensorflow")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "keras-xla-guard reads traces with TensorFlow's xplane_pb2 "
            "bindings, but TensorFlow is not installed. Install it with "
            "`pip install 'keras-xla-guard[cpu]'` (or `[gpu]`)."
        )
    root = Path(next(iter(spec.submodule_search_locations)))
    path = root / "tsl" / "profiler" / "protobuf" / "xplane_pb2.py"
    if not path.is_file():
        _xplane_pb2 = importlib.import_module(_XPLANE_MODULE)
        return _xplane_pb2
    module_spec = importlib.util.spec_from_file_location(
        "keras_xla_guard._xplane_pb2", path
    )
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    _xplane_pb2 = module
    return module


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
