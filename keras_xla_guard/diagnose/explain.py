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

This module lowers the step and turns what it found into verdicts (with
`model_verdicts`, the model's own XLA switch); what the traced graph holds
is read in `_step_ops`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from keras_xla_guard.diagnose._step_ops import (
    PY_FUNC_TYPES,
    ConstantInputOp,
    DynamicDim,
    UnsupportedOp,
    blocker_names,
    constant_inputs,
    dynamic_dims,
    is_string_op,
    jit_device,
    model_layer_names,
    trace_blockers,
    unsupported_ops,
)
from keras_xla_guard.diagnose.advice import JitEvidence, jit_off_verdict
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


_FIX_CONSTANT = (
    "# Give that argument a value XLA knows from shapes alone: a fixed maximum size with a\n"
    "# mask over the unused part, or a size read from tf.shape(...). Otherwise move the op\n"
    "# into the input pipeline (dataset.map), or keep this model off XLA:\n"
    "model.compile(optimizer, loss, jit_compile=False)"
)
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


def _layers_without_jit(model: Any) -> tuple[str, ...]:
    """The names of the model's layers that declare `supports_jit = False`."""
    from keras_xla_guard.seam import all_layers

    layers = all_layers(model)
    return tuple(layer.name for layer in layers if getattr(layer, "supports_jit", True) is False)


def _step_verdicts(
    model: Any,
    device: str,
    error: str,
    unsupported: tuple[UnsupportedOp, ...],
    constants: tuple[ConstantInputOp, ...],
    dynamic: tuple[DynamicDim, ...],
    *,
    loss_checked: bool,
) -> list[Verdict]:
    """The verdicts on one traced train step, after the model's own (`model_verdicts`).

    Args:
        model: The Keras model `explain` traced.
        device: The XLA device it lowered for, e.g. `"XLA_CPU_JIT"`.
        error: TensorFlow's error when the step did not lower; `""` when it did.
        unsupported: Ops without an XLA kernel on `device`.
        constants: Ops whose compile-time argument the data decides.
        dynamic: Input dimensions that are `None` in the model's spec.
        loss_checked: `False` when the sample had targets but the model no
            compiled loss, so its outputs' sum stood in for the loss.

    Returns:
        The verdicts, in report order.
    """
    verdicts = model_verdicts(model, JitEvidence(blockers=blocker_names(unsupported), device=device))
    if not loss_checked:
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
    return verdicts


def _where(layer: str | None) -> str:
    """Where an op of the step sits, as a verdict says it: its Keras layer, or none."""
    return f"layer {layer!r}" if layer else "no Keras layer (loss or step code)"


def _fix_for(op_type: str) -> str:
    """What to do about an op of `op_type` that has no XLA kernel."""
    if op_type in PY_FUNC_TYPES:
        return (
            "Rewrite the Python function with TensorFlow ops, or run it in the input "
            "pipeline (dataset.map) instead of inside the model. " + _FIX_UNSUPPORTED + "."
        )
    if is_string_op(op_type):
        return (
            "XLA has no string type: turn strings into numbers in the input pipeline "
            "(e.g. keras.layers.StringLookup inside dataset.map). " + _FIX_UNSUPPORTED + "."
        )
    return _FIX_UNSUPPORTED + "."


def _first_line(text: str) -> str:
    """The first line of `text`, stripped; `""` for blank text."""
    return text.strip().splitlines()[0] if text.strip() else ""


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
    device = jit_device()
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
    layer_names = model_layer_names(model)
    unsupported: tuple[UnsupportedOp, ...] = ()
    constants: tuple[ConstantInputOp, ...] = ()
    if error:
        unsupported = unsupported_ops(concrete, error, device, layer_names)
    elif shapes_error:
        constants = constant_inputs(shapes_error, concrete, layer_names)
    dynamic = dynamic_dims(model, x)
    blockers = _layers_without_jit(model)

    verdicts = _step_verdicts(
        model, device, error, unsupported, constants, dynamic, loss_checked=y is None or compiled_loss
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
