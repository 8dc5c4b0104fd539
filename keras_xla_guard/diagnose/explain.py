"""`explain(model, sample_batch)`: can this model's train step compile with XLA?

The loss-and-gradients part of the train step is traced into a
`tf.function(jit_compile=True)` and lowered to HLO with
`experimental_get_compiler_ir`. Nothing runs: no weight, optimizer slot or
metric changes. When lowering fails, every op of the traced graph (nested
functions such as `while` bodies included) is checked against the XLA kernel
registry, so all unsupported ops are named, not just the first one
TensorFlow reports, each with the Keras layer whose name scope holds it.
The step is lowered from the sample's shapes (`tf.TensorSpec`s), and again
with its values only when that fails: an op whose size or shape argument
XLA must know at compile time but which comes from the batch's values (or
a variable's) lowers only with the values, and TensorFlow then compiles the
step once per value, so it is named too.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from keras_xla_guard.diagnose.advice import JitEvidence, jit_off_verdict
from keras_xla_guard.diagnose.scopes import owner_layer as _owner_layer
from keras_xla_guard.diagnose.scopes import scopes_are_suffixed as _scopes_are_suffixed
from keras_xla_guard.diagnose.verdict import ERROR, INFO, MODEL, OK, WARNING, Verdict

__all__ = [
    "ConstantInputOp",
    "DynamicDim",
    "ExplainReport",
    "UnsupportedOp",
    "blocker_names",
    "explain",
    "model_verdicts",
    "trace_blockers",
]

_UNSUPPORTED_RE = re.compile(
    r"No registered '(?P<type>[^']+)' OpKernel for (?P<device>\S+) devices compatible with "
    r"node \{\{node (?P<name>[^}]+)\}\}"
)
# TensorFlow's message when a shape argument depends on the computation's parameters.
_CONSTANT_RE = re.compile(
    r"Input (?P<input>\d+) to node `(?P<name>[^`]+)` with op (?P<type>\w+) must be a compile-time constant"
)
_FIX_CONSTANT = (
    "# Give that argument a value XLA knows from shapes alone: a fixed maximum size with a\n"
    "# mask over the unused part, or a size read from tf.shape(...). Otherwise move the op\n"
    "# into the input pipeline (dataset.map), or keep this model off XLA:\n"
    "model.compile(optimizer, loss, jit_compile=False)"
)
# Graph plumbing the XLA bridge handles itself rather than through kernels.
_PLUMBING = frozenset({"Placeholder", "NoOp", "_Arg", "_Retval", "_DeviceArg", "_DeviceRetval"})
_PY_FUNC_TYPES = frozenset({"EagerPyFunc", "PyFunc", "PyFuncStateless"})
_STRING_TYPES = frozenset({"AsString", "RegexReplace", "RegexFullMatch", "Substr", "DecodeBase64"})
_FIX_UNSUPPORTED = (
    "Move this op out of the compiled step (e.g. into the tf.data pipeline or a "
    "preprocessing step before fit), or replace it with an XLA-supported op"
)
_FIX_DYNAMIC = (
    "Pad this dimension to a fixed length (or a few bucket lengths), e.g. "
    "dataset.padded_batch(batch_size, padded_shapes=...) with a fixed size, so XLA "
    "compiles once per shape instead of once per new length; mask the padding "
    "(Embedding(mask_zero=True), Masking) so that it does not change the outputs"
)


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


@dataclass(frozen=True)
class ExplainReport:
    """Whether a model's train step compiles with XLA, and why not.

    Attributes:
        compilable: Whether the loss-and-gradients step lowered to HLO.
        jit_device: The XLA compilation device, e.g. `"XLA_CPU_JIT"`.
        with_loss: Whether the model's compiled loss was part of the step
            (`False`: no targets in the sample, the sum of the outputs was
            differentiated instead).
        error: First line of TensorFlow's compile error; `""` when
            compilable.
        unsupported_ops: Ops without an XLA kernel for `jit_device`.
        constant_inputs: Ops of a compilable step whose compile-time
            argument the data decides (TensorFlow names the first), so the
            step compiles once per value.
        dynamic_dims: Input dimensions that are `None` in the model's spec.
        layers_without_jit: Layers declaring `supports_jit = False` (Keras
            then turns `jit_compile=True` off for the whole model).
        hlo_chars: Size of the HLO text when compilable, else 0.
        verdicts: Findings with stable codes and what to do.
    """

    compilable: bool
    jit_device: str
    with_loss: bool
    error: str = ""
    unsupported_ops: tuple[UnsupportedOp, ...] = ()
    constant_inputs: tuple[ConstantInputOp, ...] = ()
    dynamic_dims: tuple[DynamicDim, ...] = ()
    layers_without_jit: tuple[str, ...] = ()
    hlo_chars: int = 0
    verdicts: tuple[Verdict, ...] = ()

    @property
    def codes(self) -> tuple[str, ...]:
        """The verdict codes, in report order."""
        return tuple(v.code for v in self.verdicts)

    def to_dict(self) -> dict[str, Any]:
        """Returns the report as a JSON-serializable dict."""
        d = dataclasses.asdict(self)
        d["unsupported_ops"] = [op.to_dict() for op in self.unsupported_ops]
        d["constant_inputs"] = [op.to_dict() for op in self.constant_inputs]
        d["dynamic_dims"] = [dim.to_dict() for dim in self.dynamic_dims]
        d["layers_without_jit"] = list(self.layers_without_jit)
        d["verdicts"] = [v.to_dict() for v in self.verdicts]
        return d

    def __str__(self) -> str:
        head = (
            f"explain: the train step compiles with XLA on {self.jit_device}"
            if self.compilable
            else f"explain: the train step does NOT compile with XLA on {self.jit_device}"
        )
        return "\n".join([head] + [f"  {v}" for v in self.verdicts])


def model_verdicts(model: Any, evidence: JitEvidence | None = None) -> list[Verdict]:
    """Verdicts about a compiled Keras model's own XLA switch.

    With XLA off, what to do depends on the evidence
    (`keras_xla_guard.diagnose.advice`): ops without an XLA kernel are
    named as blockers and no XLA switch is advised; a saved `compare`
    result decides; otherwise the advice is to measure with `compare`
    first, with the CPU caveat's measured figures.

    Args:
        model: A Keras model (`compile()` called).
        evidence: What the run knows (blockers, auto-clustering, a
            `compare` result). Defaults to `None`: nothing.

    Returns:
        `JIT_COMPILE_ON`, or `JIT_COMPILE_BLOCKED` / `JIT_COMPILE_OFF`, plus
        `LAYER_DISABLES_JIT` when a layer declares `supports_jit = False`.

    Example:

    ```python
    import keras
    from keras_xla_guard import model_verdicts
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("adam", "mse", jit_compile=True)
    print([v.code for v in model_verdicts(model)])  # ['JIT_COMPILE_ON']
    ```
    """
    verdicts = []
    jit = getattr(model, "jit_compile", None)
    if jit:
        verdicts.append(
            Verdict(
                "JIT_COMPILE_ON",
                MODEL,
                OK,
                "model.jit_compile is True: Keras compiles the train step with XLA.",
            )
        )
    else:
        evidence = evidence or JitEvidence()
        what = (
            "model.jit_compile is False: XLA compiles only what auto-clustering "
            "(tf.config.optimizer.get_jit()) clusters."
            if evidence.autoclustering
            else "XLA is not requested for this model: model.jit_compile is False (Keras "
            "resolves jit_compile='auto' to False on CPU-only machines and under a "
            "distribution strategy)."
        )
        verdicts.append(jit_off_verdict(evidence, what))
    blockers = _layers_without_jit(model)
    if blockers:
        verdicts.append(
            Verdict(
                "LAYER_DISABLES_JIT",
                MODEL,
                WARNING,
                f"Layer(s) {', '.join(blockers)} declare supports_jit=False, so Keras turns "
                "jit_compile=True off for the whole model.",
                "# Compile only the supported part, or replace the layer(s); "
                "Keras ignores jit_compile=True while they are in the model.",
            )
        )
    return verdicts


def _all_layers(model: Any) -> list[Any]:
    """The model and all its nested layers (Keras' own traversal when present)."""
    from keras_xla_guard.seam import all_layers

    return all_layers(model)


def _layers_without_jit(model: Any) -> tuple[str, ...]:
    layers = _all_layers(model)
    return tuple(layer.name for layer in layers if getattr(layer, "supports_jit", True) is False)


def _unpack(sample_batch: Any) -> tuple[Any, Any, Any]:
    if isinstance(sample_batch, tuple):
        if not 1 <= len(sample_batch) <= 3:
            raise ValueError(
                "`sample_batch` must be x, (x,), (x, y) or (x, y, sample_weight). "
                f"Received: a tuple of length {len(sample_batch)}"
            )
        padded = tuple(sample_batch) + (None,) * (3 - len(sample_batch))
        return padded[0], padded[1], padded[2]
    return sample_batch, None, None


def _jit_device() -> str:
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


def _unsupported_ops(
    concrete: Any, error: str, device: str, layer_names: frozenset[str]
) -> tuple[UnsupportedOp, ...]:
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


def _lower(step: Any, args: Any) -> tuple[int, str]:
    """`(HLO text size, "")` when the step lowers from `args`, else `(0, TensorFlow's error)`."""
    try:
        return len(step.experimental_get_compiler_ir(*args)(stage="hlo")), ""
    except Exception as e:  # noqa: BLE001 - any compile failure is the finding
        return 0, str(e)


def _specs(tf: Any, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """The sample's shapes and dtypes as `TensorSpec`s; `None` for parts that make none."""
    try:
        return tuple(tf.nest.map_structure(lambda t: tf.TensorSpec(t.shape, t.dtype), args))
    except (TypeError, ValueError, AttributeError):
        return None


def _constant_inputs(
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


def _dynamic_dims(model: Any, x: Any) -> tuple[DynamicDim, ...]:
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


def _surrogate_loss(tf: Any, outputs: Any, extra: Iterable[Any]) -> Any:
    terms = [tf.reduce_sum(tf.cast(t, tf.float32)) for t in tf.nest.flatten(outputs) if t.dtype.is_floating]
    terms += [tf.cast(loss, tf.float32) for loss in extra]
    return tf.add_n(terms) if terms else tf.constant(0.0)


def explain(model: Any, sample_batch: Any) -> ExplainReport:
    """Checks whether the model's train step compiles with XLA on this machine.

    The forward pass (`training=True`), the compiled loss and the gradients
    are traced into a `tf.function(jit_compile=True)` and lowered to HLO
    from the sample's shapes; the optimizer update is not part of it. A step
    that lowers only with the sample's values folded in has an op whose
    compile-time size the batch's values decide (`VALUE_DEPENDENT_COMPILE`:
    TensorFlow compiles such a step once per value). Nothing executes, so weights,
    optimizer variables and metrics are left exactly as they were. When the
    sample has no targets, or the model has no compiled loss (a subclassed
    model whose `train_step` computes its own; then `LOSS_NOT_CHECKED`
    says so), the sum of the float outputs stands in for the loss. A
    model that is not built yet (a subclassed model before its first call)
    is built from the sample's shapes first, as its first `fit` step would
    build it (`seam.build_model`).

    Args:
        model: A Keras model on the TensorFlow backend.
        sample_batch: One batch as `fit` would see it: `x`, `(x,)`,
            `(x, y)` or `(x, y, sample_weight)`; arrays or tensors.

    Returns:
        An `ExplainReport`.

    Raises:
        ValueError: If `sample_batch` has the wrong structure, or the model
            is not built and cannot be built from it (the message says what
            to call first). Errors the model itself raises while tracing on
            the sample (e.g. an incompatible input shape) propagate unchanged.

    Example:

    ```python
    import numpy as np
    import keras
    from keras_xla_guard import explain
    model = keras.Sequential([keras.Input((None, 4)), keras.layers.Dense(1)])
    model.compile("adam", "mse")
    report = explain(model, (np.zeros((2, 5, 4), "float32"), np.zeros((2, 5, 1), "float32")))
    print(report)
    ```
    """
    import tensorflow as tf

    x, y, sample_weight = _unpack(sample_batch)
    if x is None:
        raise ValueError(f"`sample_batch` has no inputs. Received: sample_batch={sample_batch!r}")
    if not getattr(model, "built", False):
        from keras_xla_guard.seam import build_model

        why = build_model(model, sample_batch)
        if why is not None or not getattr(model, "built", False):
            raise ValueError(
                "`explain` could not build the model from the sample batch"
                + (f" ({why})" if why else "")
                + ": build it first with one call on a real batch, model(x), or model.build(input_shape), "
                f"then pass explain that batch's x or (x, y). Received: model={getattr(model, 'name', model)!r}, "
                "which is not built"
            )
    x = tf.nest.map_structure(tf.convert_to_tensor, x)
    y = None if y is None else tf.nest.map_structure(tf.convert_to_tensor, y)
    sample_weight = (
        None if sample_weight is None else tf.nest.map_structure(tf.convert_to_tensor, sample_weight)
    )
    # A model compiled without a loss computes its own in `train_step`,
    # which explain cannot run: its outputs' sum stands in.
    compiled_loss = bool(getattr(model, "compiled", False)) and bool(getattr(model, "loss", None))
    with_loss = y is not None and compiled_loss

    # Only the parts the sample has are arguments: lowering from TensorSpecs
    # takes no `None` beside them.
    present = (True, y is not None, sample_weight is not None)
    args = tuple(a for a, given in zip((x, y, sample_weight), present) if given)

    def loss_and_gradients(*given: Any) -> Any:
        parts = iter(given)
        x, y, sample_weight = (next(parts) if p else None for p in present)
        with tf.GradientTape() as tape:
            y_pred = model(x, training=True)
            if with_loss:
                loss = model.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True)
            else:
                loss = _surrogate_loss(tf, y_pred, model.losses)
        gradients = tape.gradient(loss, model.trainable_variables)
        return loss, [g for g in gradients if g is not None]

    step = tf.function(loss_and_gradients, jit_compile=True)
    device = _jit_device()
    error = ""
    # Tracing errors (a sample that does not fit the model) propagate as they
    # are; only the lowering to HLO is the experiment.
    concrete = step.get_concrete_function(*args)
    # From the shapes alone first, as fit compiles a new signature; only a
    # step that fails there is lowered again with the sample's values, which
    # TensorFlow folds into arguments XLA must know at compile time.
    specs = _specs(tf, args)
    hlo_chars, shapes_error = _lower(step, specs) if specs is not None else (0, "")
    if specs is None or shapes_error:
        hlo_chars, error = _lower(step, args)
    layer_names = frozenset(layer.name for layer in _all_layers(model))
    unsupported: tuple[UnsupportedOp, ...] = ()
    constants: tuple[ConstantInputOp, ...] = ()
    if error:
        unsupported = _unsupported_ops(concrete, error, device, layer_names)
    elif shapes_error:
        constants = _constant_inputs(shapes_error, concrete, layer_names)
    dynamic = _dynamic_dims(model, x)
    blockers = _layers_without_jit(model)

    verdicts = model_verdicts(model, JitEvidence(blockers=blocker_names(unsupported), device=device))
    if y is not None and not compiled_loss:
        verdicts.append(
            Verdict(
                "LOSS_NOT_CHECKED",
                MODEL,
                INFO,
                "The model has no compiled loss (its train_step computes one), so the sum of its outputs "
                "stood in for the loss: the forward pass and its gradients were checked, the train_step's "
                "own loss and update code was not.",
            )
        )
    if not error:
        verdicts.append(
            Verdict(
                "STEP_COMPILES",
                MODEL,
                OK,
                f"The train step (forward, loss, gradients) lowers to HLO on {device}.",
            )
        )
    for op in unsupported:
        where = _where(op.layer)
        verdicts.append(
            Verdict(
                "XLA_UNSUPPORTED_OP",
                MODEL,
                ERROR,
                f"{op.op_type} op {op.op_name!r} in {where} has no XLA kernel on {device}.",
                _fix_for(op.op_type),
            )
        )
    for const in constants:
        where = _where(const.layer)
        verdicts.append(
            Verdict(
                "VALUE_DEPENDENT_COMPILE",
                MODEL,
                WARNING,
                f"{const.op_type} op {const.op_name!r} in {where} takes a size or shape (input "
                f"{const.input_index}) computed from the batch's values or a variable's: XLA must know "
                "it at compile time, so with jit_compile=True TensorFlow compiles the train step again "
                "for every new value (a value computed from each batch is new at nearly every step), "
                "which neither warm_up nor the persistent compilation cache can serve.",
                _FIX_CONSTANT,
            )
        )
    if error and not unsupported:
        verdicts.append(
            Verdict(
                "STEP_DOES_NOT_COMPILE",
                MODEL,
                ERROR,
                f"The train step does not lower to HLO on {device}: {_first_line(error)}",
                "# Often a shape that must be static (pad it) or data-dependent control "
                "flow; see the error text above.",
            )
        )
    for dim in dynamic:
        seen = f" (this batch: {dim.sample_size})" if dim.sample_size is not None else ""
        if dim.axis == 0:
            verdicts.append(
                Verdict(
                    "DYNAMIC_BATCH_DIM",
                    MODEL,
                    INFO,
                    f"Input {dim.input_name!r} has a dynamic batch dimension{seen}: with XLA, a "
                    "short last batch makes it compile the train step once more.",
                    "# Only for training data whose size is not a multiple of batch_size: it leaves\n"
                    "# the short last batch's examples out of every epoch (never for evaluate or predict).\n"
                    "# In place of your .batch(batch_size) call:\n"
                    "dataset = dataset.batch(batch_size, drop_remainder=True)",
                )
            )
        else:
            verdicts.append(
                Verdict(
                    "DYNAMIC_INPUT_DIM",
                    MODEL,
                    WARNING,
                    f"Input {dim.input_name!r} has a dynamic dimension at axis {dim.axis}{seen}: "
                    "XLA compiles the step again for every new size.",
                    _FIX_DYNAMIC + ".",
                )
            )
    return ExplainReport(
        compilable=not error,
        jit_device=device,
        with_loss=with_loss,
        error=_first_line(error),
        unsupported_ops=unsupported,
        constant_inputs=constants,
        dynamic_dims=dynamic,
        layers_without_jit=blockers,
        hlo_chars=hlo_chars,
        verdicts=tuple(verdicts),
    )


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
    device = _jit_device()
    cache: dict[str, bool] = {}
    names = [op.op_name for op in report.top_non_xla_ops]
    layer_names = frozenset(layer.name for layer in _all_layers(model)) if model is not None else frozenset()
    suffixed = _scopes_are_suffixed(names, layer_names)
    found: dict[str, UnsupportedOp] = {}
    for op in report.top_non_xla_ops:
        # `_MklMatMul`, `_FusedConv2D`, ...: kernels TensorFlow's runtime
        # rewrote the user's op into, after XLA's chance to compile it.
        if op.op_type in found or op.op_type.startswith("_") or _has_xla_kernel(op.op_type, device, cache):
            continue
        layer = _owner_layer(op.op_name, layer_names, suffixed) if layer_names else None
        known = op.op_type in _PY_FUNC_TYPES or "String" in op.op_type or op.op_type in _STRING_TYPES
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


def _where(layer: str | None) -> str:
    """Where an op of the step sits, as a verdict says it: its Keras layer, or none."""
    return f"layer {layer!r}" if layer else "no Keras layer (loss or step code)"


def _fix_for(op_type: str) -> str:
    if op_type in _PY_FUNC_TYPES:
        return (
            "Rewrite the Python function with TensorFlow ops, or run it in the input "
            "pipeline (dataset.map) instead of inside the model. " + _FIX_UNSUPPORTED + "."
        )
    if "String" in op_type or op_type in _STRING_TYPES:
        return (
            "XLA has no string type: turn strings into numbers in the input pipeline "
            "(e.g. keras.layers.StringLookup inside dataset.map). " + _FIX_UNSUPPORTED + "."
        )
    return _FIX_UNSUPPORTED + "."


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""
