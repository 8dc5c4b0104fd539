"""`warm_up`: compile a model's steps for every known input signature before `fit`.

XLA compiles a `jit_compile=True` step once per concrete input shape, the
first time the step *runs* with that shape; tracing or lowering the function
fills no cache. So a warm-up runs Keras' own train function (the same
`tf.function` instance `fit` will call, on an iterator with the same
`element_spec`) once per signature, and then puts back every variable the
step changed: weights, BatchNormalization statistics, optimizer slots and
step counter, metric state and random-seed state.

Two things make it safe to add to a run. A dataset is read through a
detached copy (`seam.tf_data.detached_copy`), so the seeds `shuffle` draws
for each new iterator, and a `cache()`, are the same for `fit` as without the
warm-up; a pipeline that cannot be copied is not read. And SIGINT/SIGTERM go
through an `_interrupts.InterruptGate`: a Ctrl-C stops the warm-up between
two batches or steps, and one during the restore is raised once every
variable is back.
"""

from __future__ import annotations

import random
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from keras_xla_guard._checks import check_int
from keras_xla_guard.errors import XlaGuardWarning
from keras_xla_guard.signatures.signature import Signature

__all__ = ["WarmUpReport", "warm_up"]

_STEPS = ("train", "test", "predict")
DEFAULT_MAX_BATCHES = 1000


@dataclass(frozen=True)
class WarmUpReport:
    """What `warm_up` compiled.

    Attributes:
        signatures: The input signatures warmed up, in the order they ran.
        steps: The steps run for each (`"train"`, `"test"`, `"predict"`).
        seconds: Wall time of the warm-up (mostly compilation).
        batches_read: Batches read from a dataset to find its signatures
            (0 when shapes were given).
        restored: Number of variables put back to their value before the
            warm-up.
        notes: Anything that could not be done (also warned).
        unrestored: Names of the variables whose value could not be put
            back (also warned); empty when every one was.
    """

    signatures: tuple[Signature, ...]
    steps: tuple[str, ...]
    seconds: float
    batches_read: int
    restored: int
    notes: tuple[str, ...] = ()
    unrestored: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Returns the report as a JSON-serializable dict."""
        return {
            "signatures": [str(s) for s in self.signatures],
            "steps": list(self.steps),
            "seconds": self.seconds,
            "batches_read": self.batches_read,
            "restored": self.restored,
            "notes": list(self.notes),
            "unrestored": list(self.unrestored),
        }


def _is_shape(value: Any) -> bool:
    return (
        isinstance(value, (tuple, list))
        and all(d is None or isinstance(d, int) for d in value)
        and not any(isinstance(d, bool) for d in value)
    )


def _leaves(structure: Any) -> list[Any]:
    """Shape leaves (tuples of ints, `TensorSpec`s, arrays) of one signature, in `tf.nest` order."""
    import tensorflow as tf

    if isinstance(structure, tf.TensorSpec) or _is_shape(structure) or hasattr(structure, "shape"):
        return [structure]
    if isinstance(structure, dict):
        return [leaf for key in sorted(structure) for leaf in _leaves(structure[key])]
    if isinstance(structure, (tuple, list)):
        return [leaf for item in structure for leaf in _leaves(item)]
    raise ValueError(
        "Each signature must be a nested structure (tuples, lists, dicts) of shapes "
        f"(tuples of ints), tf.TensorSpec or arrays. Received: {structure!r}"
    )


def _rebuild(structure: Any, leaves: list[Any]) -> Any:
    """`structure` with its shape leaves replaced, in `_leaves` order."""
    import tensorflow as tf

    if isinstance(structure, tf.TensorSpec) or _is_shape(structure) or hasattr(structure, "shape"):
        return leaves.pop(0)
    if isinstance(structure, dict):
        return {key: _rebuild(structure[key], leaves) for key in sorted(structure)}
    out = [_rebuild(item, leaves) for item in structure]
    return tuple(out) if isinstance(structure, tuple) else out


def _batches_from_shapes(shapes: Sequence[Any], element_spec: Any) -> tuple[list[Any], Any]:
    """Zero batches of the given shapes, and the `element_spec` they are fed with."""
    import numpy as np
    import tensorflow as tf

    if not shapes:
        raise ValueError(f"`shapes_or_dataset` must hold at least one signature. Received: {shapes!r}")
    per_item = [_leaves(item) for item in shapes]
    if len({len(leaves) for leaves in per_item}) != 1:
        raise ValueError(f"All signatures must have the same structure. Received: {shapes!r}")
    spec_leaves = tf.nest.flatten(element_spec) if element_spec is not None else None
    if spec_leaves is not None and len(spec_leaves) != len(per_item[0]):
        raise ValueError(
            f"`element_spec` has {len(spec_leaves)} tensors but each signature has "
            f"{len(per_item[0])}. Received: element_spec={element_spec!r}"
        )
    batches = []
    dims_seen: list[list[set[Any]]] = []
    dtypes: list[Any] = []
    for leaves in per_item:
        arrays = []
        for i, leaf in enumerate(leaves):
            shape = tuple(leaf.shape) if not _is_shape(leaf) else tuple(leaf)
            if any(d is None for d in shape):
                raise ValueError(f"Signatures need fully known shapes. Received: {leaf!r}")
            if spec_leaves is not None:
                dtype = spec_leaves[i].dtype
            elif isinstance(leaf, tf.TensorSpec) or hasattr(leaf, "dtype"):
                dtype = tf.as_dtype(leaf.dtype)
            else:
                dtype = tf.float32
            arrays.append(np.zeros(shape, dtype.as_numpy_dtype))
            if len(dims_seen) <= i:
                dims_seen.append([set() for _ in shape])
                dtypes.append(dtype)
            for axis, d in enumerate(shape[: len(dims_seen[i])]):
                dims_seen[i][axis].add(d)
        batches.append(_rebuild(shapes[0], arrays))
    if element_spec is None:
        # Like Keras' own adapters: the batch dimension and every dimension
        # that varies are unknown, so one traced function serves them all.
        specs = [
            tf.TensorSpec(
                [None if axis == 0 or len(seen) > 1 else next(iter(seen)) for axis, seen in enumerate(dims)],
                dtype,
            )
            for dims, dtype in zip(dims_seen, dtypes)
        ]
        element_spec = _rebuild(shapes[0], specs)
    return batches, element_spec


class _PythonRandomState:
    """Python's and NumPy's global random state, to put back after a pipeline ran Python code."""

    def __init__(self) -> None:
        import numpy as np

        self._python = random.getstate()
        self._numpy = np.random.get_state()
        self.used = False

    def restore(self) -> None:
        import numpy as np

        random.setstate(self._python)
        np.random.set_state(self._numpy)


def _batches_from_dataset(
    dataset: Any, max_batches: int, python_state: _PythonRandomState, check: Callable[[], None]
) -> tuple[list[Any], int, str | None]:
    """One batch per distinct signature of `dataset` (first `max_batches` batches), read from a copy.

    `check()` runs after each batch (it passes on a Ctrl-C kept meanwhile).

    Returns:
        `(batches, batches read, note)`. When no copy can be read without
        changing what `fit` will read, the dataset is not read: the batches
        are the one signature its `element_spec` fixes (none when a
        dimension is unknown) and the note says why.
    """
    import tensorflow as tf

    from keras_xla_guard.seam.tf_data import detached_copy

    copy = detached_copy(dataset)
    if copy.dataset is None:
        batches = _batches_from_spec(dataset.element_spec)
        instead = (
            "warmed the one signature its element_spec fixes"
            if batches
            else "its element_spec leaves dimensions unknown, so nothing was warmed; pass the "
            "signatures: warm_up(model, [...], element_spec=dataset.element_spec)"
        )
        return batches, 0, f"did not read the dataset, because {copy.reason}: {instead}"
    python_state.used = copy.runs_python
    seen: dict[Signature, Any] = {}
    read = 0
    iterator = iter(copy.dataset.take(max_batches))
    try:
        for element in iterator:
            read += 1
            signature = Signature.of(element)
            if signature not in seen:
                seen[signature] = tf.nest.map_structure(lambda t: t.numpy(), element)
            check()
    except BaseException as e:
        # The iterator's own frames in the traceback would keep it, and the
        # pipeline's threads calling Python code, alive past this point.
        traceback.clear_frames(e.__traceback__)
        raise
    finally:
        del iterator
    if not seen:
        raise ValueError(f"`shapes_or_dataset` is an empty dataset. Received: {dataset!r}")
    return list(seen.values()), read, None


def _batches_from_spec(element_spec: Any) -> list[Any]:
    """Zeros of the one signature `element_spec` fixes; none when a dimension is unknown."""
    import numpy as np
    import tensorflow as tf

    specs = tf.nest.flatten(element_spec)
    if not all(type(s) is tf.TensorSpec and s.shape.is_fully_defined() for s in specs):
        return []
    return [tf.nest.map_structure(lambda s: np.zeros(s.shape, s.dtype.as_numpy_dtype), element_spec)]


def _snapshot(model: Any) -> tuple[list[Any], list[Any], str | None]:
    """(variables a step can change, their values now, what is missing)."""
    from keras_xla_guard import seam

    variables, missing = seam.training_state(model)
    return variables, [v.numpy().copy() for v in variables], missing


def _name(variable: Any) -> str:
    return str(getattr(variable, "path", None) or variable.name)


def _restore(variables: list[Any], saved: list[Any]) -> list[str]:
    """Writes the saved values back; the names of the variables that could not be written."""
    failed = []
    for variable, value in zip(variables, saved):
        try:
            variable.assign(value)
        except Exception:  # noqa: BLE001 - the others are still put back; the caller warns
            failed.append(_name(variable))
    return failed


def _iterator(model: Any, batches: list[Any], element_spec: Any) -> Any:
    """An iterator over `batches` whose type spec is the one `fit` iterates with."""
    import tensorflow as tf

    dataset = tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=element_spec)
    strategy = getattr(model, "distribute_strategy", None)
    if strategy is not None:
        dataset = strategy.experimental_distribute_dataset(dataset)
    return iter(dataset)


def _run(
    model: Any,
    step: str,
    batches: list[Any],
    element_spec: Any,
    train_function: Any,
    check: Callable[[], None],
) -> None:
    """Runs `step` once on each batch, through the function `fit`/`evaluate`/`predict` call.

    `check()` runs after each call (it passes on a Ctrl-C kept meanwhile).
    """
    import tensorflow as tf

    from keras_xla_guard import seam

    if step == "predict":
        xs = [b[0] if isinstance(b, tuple) else b for b in batches]
        spec = element_spec[0] if isinstance(element_spec, tuple) else element_spec
        dataset = tf.data.Dataset.from_generator(lambda: iter(xs), output_signature=spec)
        # A known length: Keras 3 warns "Your input ran out of data" when a
        # dataset of unknown length ends under `predict`.
        model.predict(dataset.apply(tf.data.experimental.assert_cardinality(len(xs))), verbose=0)
        return
    make = model.make_train_function if step == "train" else model.make_test_function
    make()
    if step == "train":
        function = train_function or model.train_function
    else:
        function = model.test_function
    iterator = _iterator(model, batches, element_spec)
    # One call runs `steps_per_execution` batches.
    spe = seam.steps_per_execution(model)
    for _ in range(-(-len(batches) // spe)):
        function(iterator)
        check()


def warm_up(
    model: Any,
    shapes_or_dataset: Any,
    *,
    element_spec: Any = None,
    steps: Sequence[str] = ("train",),
    max_batches: int = DEFAULT_MAX_BATCHES,
) -> WarmUpReport:
    """Compiles a model's steps for every known input signature, before `fit`.

    With `jit_compile=True`, XLA compiles the train step once per input
    shape, the first time a batch of that shape arrives: mid-epoch, while
    the clock runs. `warm_up` runs the step once per signature now, on the
    same Keras train function and an input of the same `element_spec` as
    `fit`, so that `fit` finds every program compiled. Afterwards every
    variable the step touched is put back bit for bit: weights,
    BatchNormalization moving statistics, optimizer slots and `iterations`,
    metric state, `SeedGenerator` state (and tf_keras' step counters).

    A deterministic `fit` afterwards is bit-identical to one without the
    warm-up: a dataset is read through a detached copy (its `shuffle`
    seeds and caches are the copy's own; Python's and NumPy's global
    random state are put back after a generator ran), and a pipeline that
    cannot be copied is not read. A Ctrl-C stops the warm-up between two
    batches or steps (a second one at once); the variables are then put
    back in full before the `KeyboardInterrupt` is raised.

    Pays when the signatures are few and known (bucketed sequences, a fixed
    set of image sizes) and compilation is a large share of a short run;
    see docs/compile-cost.md.

    Under Keras' JAX backend the step is stateless: each signature runs on
    a copy of the model's state, so nothing needs putting back; give the
    signatures as shapes or arrays (no `tf.data` there). See docs/jax.md.

    Args:
        model: A compiled Keras model (Keras 3 or tf_keras). Compile it
            first; `model.compile()` afterwards discards the warm-up.
        shapes_or_dataset: The signatures to compile. Either the
            `tf.data.Dataset` you will fit on (e.g. from
            `pad_to_buckets`): a detached copy of it is read once, up to
            `max_batches` batches, and one batch of each distinct
            signature is run; a pipeline that cannot be copied (one that
            writes files, e.g. `snapshot`) is not read, and only the
            signature its `element_spec` fixes, if any, is run (warned). Or a
            list of signatures, each the structure of one batch, `(x, y)`
            or `(x, y, sample_weight)`, with shapes (tuples of ints),
            `tf.TensorSpec`s or arrays as leaves; zeros of those shapes are
            run.
        element_spec: With shapes: the `element_spec` of the dataset you
            will fit on (gives the dtypes, and the same traced function as
            `fit`). Defaults to `None`: dtypes of `TensorSpec`/array leaves
            (else float32), and unknown batch and varying dimensions, as
            Keras' adapters make them.
        steps: Which steps to compile: any of `"train"`, `"test"`
            (`evaluate`), `"predict"` (`predict` on `x` alone). Defaults
            to `("train",)`.
        max_batches: Most batches read from a dataset. Defaults to `1000`.

    Returns:
        A `WarmUpReport`.

    Raises:
        ValueError: If `steps`, `max_batches` or the signatures are
            invalid, or the model is not compiled (with an optimizer for
            `"train"`; `"predict"` alone runs an uncompiled model).
        KeyboardInterrupt: On Ctrl-C, once every variable is put back.

    Example:

    ```python
    import keras_xla_guard as kxg

    train = kxg.pad_to_buckets(sequences, boundaries=(16, 32, 64), batch_size=32)
    kxg.warm_up(model, train)        # compiles the 3 bucket shapes now
    model.fit(train, epochs=5)       # no compilation mid-epoch
    ```
    """
    return _warm_up(model, shapes_or_dataset, element_spec=element_spec, steps=steps, max_batches=max_batches)


def _warm_up(
    model: Any,
    shapes_or_dataset: Any,
    *,
    element_spec: Any = None,
    steps: Sequence[str] = ("train",),
    max_batches: int = DEFAULT_MAX_BATCHES,
    train_function_for: Any = None,
) -> WarmUpReport:
    """`warm_up`; `train_function_for(element_spec)` may name the train function to warm."""
    from keras_xla_guard import seam

    steps = tuple(steps) if not isinstance(steps, str) else (steps,)
    if not steps or any(s not in _STEPS for s in steps):
        raise ValueError(f"`steps` must be a non-empty subset of {_STEPS}. Received: steps={steps!r}")
    check_int("max_batches", max_batches, minimum=1)
    if getattr(model, "optimizer", None) is None and "train" in steps:
        raise ValueError(
            f"`model` must be compiled with an optimizer before warm_up. Received: model={model!r}"
        )
    if "test" in steps and seam.is_compiled(model) is False:
        # Else the test step fails deep inside Keras (tf_keras: a `None` loss called).
        raise ValueError(
            f"`model` must be compiled (with a loss) before warm_up of its test step. Received: model={model!r}"
        )
    if isinstance(shapes_or_dataset, (list, tuple)) and element_spec is None:
        # Bare shapes of `x` take the dtypes of the model's inputs (token ids are int32, not floats).
        shapes_or_dataset = [_typed_inputs(model, signature) for signature in shapes_or_dataset]
    if seam.keras_backend(model) == "jax":
        from keras_xla_guard._warmup_jax import warm_up_jax

        # The step is stateless under JAX: nothing is read from a dataset, nothing needs putting back.
        signatures, seconds, jax_notes = warm_up_jax(
            model, shapes_or_dataset, element_spec=element_spec, steps=steps
        )
        for jax_note in jax_notes:
            _warn_at_caller(f"keras-xla-guard: warm_up: {jax_note}")
        return WarmUpReport(
            signatures=signatures, steps=steps, seconds=seconds, batches_read=0, restored=0, notes=jax_notes
        )
    import tensorflow as tf

    from keras_xla_guard._interrupts import InterruptGate

    is_dataset = isinstance(shapes_or_dataset, tf.data.Dataset)
    if not is_dataset and not isinstance(shapes_or_dataset, (list, tuple)):
        raise ValueError(
            "`shapes_or_dataset` must be a tf.data.Dataset or a list of signatures. "
            f"Received: shapes_or_dataset={shapes_or_dataset!r}"
        )
    started = time.perf_counter()
    notes: list[str] = []
    batches: list[Any] = []
    read = 0
    snapshot: tuple[list[Any], list[Any], str | None] = ([], [], None)
    unrestored: list[str] = []
    python_state = _PythonRandomState()
    # A Ctrl-C waits for the next `gate.check()` (between batches and steps,
    # not inside TensorFlow's tracing); a second one passes at once. From
    # `hold()` to the end of the block every signal waits, so the restore
    # below runs to its end.
    with InterruptGate(shield=[_warm_up.__code__]) as gate:
        try:
            if is_dataset:
                batches, read, note = _batches_from_dataset(
                    shapes_or_dataset, max_batches, python_state, gate.check
                )
                spec = shapes_or_dataset.element_spec
                notes.extend([note] if note else [])
            else:
                batches, spec = _batches_from_shapes(shapes_or_dataset, element_spec)
            gate.check()
            if batches:
                # Only train and test steps create variables of their own (the
                # optimizer's, the metrics'): a predict step changes none, so a
                # predict-only warm-up has nothing to build ahead.
                trains = any(step != "predict" for step in steps)
                reason = seam.build_for_training(model, batches[0]) if trains else None
                if reason is not None:
                    notes.append(
                        f"{seam.keras_version(model)}: could not build the model ahead ({reason}); "
                        "variables the first step creates cannot be put back"
                    )
                gate.check()
                snapshot = _snapshot(model)
                if snapshot[2] is not None:
                    notes.append(f"not restored: {snapshot[2]}")
                train_function = train_function_for(spec) if train_function_for is not None else None
                for step in steps:
                    _run(model, step, batches, spec, train_function, gate.check)
        finally:
            gate.hold()
            variables, saved, _ = snapshot
            unrestored = _restore(variables, saved)
            if python_state.used:
                python_state.restore()
            if variables:
                notes.extend(_created_by_warm_up(model, {id(v) for v in variables}))
            if unrestored:
                notes.append(
                    f"{len(unrestored)} variable(s) could not be put back and keep their "
                    f"post-warm-up values: {', '.join(unrestored)}"
                )
            for note in notes:
                _warn_at_caller(f"keras-xla-guard: warm_up: {note}")
    return WarmUpReport(
        signatures=tuple(Signature.of(b, root_names=("x", "y", "sample_weight")) for b in batches),
        steps=steps,
        seconds=time.perf_counter() - started,
        batches_read=read,
        restored=len(snapshot[0]) - len(unrestored),
        notes=tuple(notes),
        unrestored=tuple(unrestored),
    )


def _typed_inputs(model: Any, signature: Any) -> Any:
    """`signature` with each bare shape of its `x` as zeros of the model's input dtype.

    `x` is the signature itself, or its first item when it is a tuple or
    list `(x, y[, sample_weight])` of more than one. Keras 3 and tf_keras
    models built from `Input`s name their dtypes in `model.inputs`: a dict
    `x` is matched by input name, any other by position. Leaves the model
    does not type, and `y`, keep the float default.
    """
    import numpy as np

    inputs = list(getattr(model, "inputs", None) or ())
    if not inputs:
        return signature
    has_targets = isinstance(signature, (tuple, list)) and len(signature) > 1 and not _is_shape(signature)
    x = signature[0] if has_targets else signature

    def dtype_of(tensor: Any) -> str:
        return str(getattr(tensor.dtype, "name", tensor.dtype))

    def zeros(shape: Any, tensor: Any) -> Any:
        return np.zeros(tuple(shape), dtype_of(tensor)) if _is_shape(shape) and None not in shape else shape

    if isinstance(x, dict):
        by_name = {str(getattr(t, "name", "")).split(":")[0]: t for t in inputs}
        typed: Any = {k: zeros(v, by_name[k]) if k in by_name else v for k, v in x.items()}
    elif len(inputs) == 1:
        typed = zeros(x, inputs[0])
    elif isinstance(x, (tuple, list)) and not _is_shape(x) and len(x) == len(inputs):
        typed = type(x)(zeros(v, t) for v, t in zip(x, inputs))
    else:
        return signature
    return (typed, *signature[1:]) if has_targets else typed


def _warn_at_caller(message: str) -> None:
    """Warns from the first frame outside this package: the user's call, however deep inside it warns."""
    frame, level = sys._getframe(1), 2
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith("keras_xla_guard"):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, XlaGuardWarning, stacklevel=level)


def _created_by_warm_up(model: Any, known: set[int]) -> list[str]:
    """Resets metrics the warm-up created; a note naming any other variable it created."""
    from keras_xla_guard import seam

    created = [v for v in seam.training_state(model)[0] if id(v) not in known]
    if not created:
        return []
    # tf_keras builds its compiled metrics in the first step; a reset puts
    # them where `fit` would start them anyway.
    model.reset_metrics()
    metric_ids = {id(v) for m in getattr(model, "metrics", ()) for v in getattr(m, "variables", ())}
    kept = [v for v in created if id(v) not in metric_ids]
    if not kept:
        return []
    names = sorted(_name(v) for v in kept)
    note = (
        f"{len(kept)} variable(s) were created by the warm-up itself "
        f"({', '.join(names[:5])}) and keep their post-warm-up values"
    )
    return [note]
