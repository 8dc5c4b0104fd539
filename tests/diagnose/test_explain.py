"""Tests for `keras_xla_guard.diagnose.explain` and `XlaGuardCallback(explain=...)`.

Real tiny Keras models, real XLA lowering, real training and event files.
"""

from __future__ import annotations

import html
import os
import re
import warnings
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras
import tensorflow as tf

from keras_xla_guard.diagnose.explain import explain, model_verdicts

pytestmark = [pytest.mark.slow, pytest.mark.compat]


class PyFunctionLayer(keras.layers.Layer):
    """Doubles its input through `tf.py_function` (no XLA kernel)."""

    def call(self, x: Any) -> Any:
        y = tf.py_function(lambda t: t * 2.0, [x], x.dtype)
        y.set_shape(x.shape)
        return y


class StringLayer(keras.layers.Layer):
    """Adds zero times the length of the input formatted as strings."""

    def call(self, x: Any) -> Any:
        lengths = tf.strings.length(tf.strings.as_string(x))
        return x + tf.cast(lengths, x.dtype) * 0.0


class LoopStringLayer(keras.layers.Layer):
    """Runs a string op inside a `tf.while_loop` body (a nested function)."""

    def call(self, x: Any) -> Any:
        def body(i: Any, v: Any) -> Any:
            return i + 1, v + tf.cast(tf.strings.length(tf.strings.as_string(v)), v.dtype) * 0.0

        return tf.while_loop(lambda i, v: i < 2, body, (tf.constant(0), x))[1]


def _batch(*shape: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.random(shape, dtype=np.float32)
    y = rng.random(shape[:-1] + (1,), dtype=np.float32)
    return x, y


def _unsupported_model(jit_compile: Any = True) -> keras.Model:
    inputs = keras.Input((6,), name="features")
    h = keras.layers.Dense(8, name="dense")(inputs)
    h = PyFunctionLayer(name="py_layer")(h)
    h = keras.layers.Dense(8, name="dense_1")(h)
    h = StringLayer(name="strings")(h)
    h = StringLayer(name="strings_1")(h)
    outputs = keras.layers.Dense(1, name="head")(h)
    model = keras.Model(inputs, outputs)
    model.compile("adam", "mse", jit_compile=jit_compile)
    return model


def _state(model: keras.Model) -> list[bytes]:
    variables = [*model.weights, *model.optimizer.variables, *model.metrics_variables]
    return [np.asarray(v.numpy()).tobytes() for v in variables]


@pytest.fixture(scope="module")
def unsupported() -> keras.Model:
    return _unsupported_model()


def test_unsupported_ops_are_named_with_their_layers(unsupported: keras.Model) -> None:
    """Under jit_compile, a py_function and string ops are named with op type, op name and layer."""
    report = explain(unsupported, _batch(4, 6))
    assert not report.compilable
    assert report.jit_device == "XLA_CPU_JIT"
    assert report.with_loss
    assert "EagerPyFunc" in report.error
    found = {(op.op_type, op.layer) for op in report.unsupported_ops}
    assert ("EagerPyFunc", "py_layer") in found
    assert ("AsString", "strings") in found
    assert ("StringLength", "strings") in found
    assert ("AsString", "strings_1") in found
    assert {op.layer for op in report.unsupported_ops} == {"py_layer", "strings", "strings_1"}
    for op in report.unsupported_ops:
        assert op.op_name.endswith("/" + op.op_type)
    assert report.codes[0] == "JIT_COMPILE_ON"
    unsupported_verdicts = [v for v in report.verdicts if v.code == "XLA_UNSUPPORTED_OP"]
    assert len(unsupported_verdicts) == len(report.unsupported_ops)
    assert all("Move this op out of the compiled step" in v.fix for v in unsupported_verdicts)
    fixes = {v.message.split()[0]: v.fix for v in unsupported_verdicts}
    assert "dataset.map" in fixes["EagerPyFunc"] and "Python function" in fixes["EagerPyFunc"]
    assert "no string type" in fixes["AsString"] and "no string type" in fixes["StringLength"]
    assert "STEP_COMPILES" not in report.codes


def test_unsupported_op_inside_a_loop_body_is_found() -> None:
    """An unsupported op inside a while-loop body (a nested function) is found and owned."""
    inputs = keras.Input((3,))
    outputs = keras.layers.Dense(1)(LoopStringLayer(name="looped")(inputs))
    model = keras.Model(inputs, outputs)
    model.compile("sgd", "mse", jit_compile=True)
    report = explain(model, _batch(2, 3))
    assert not report.compilable
    nested = [op for op in report.unsupported_ops if op.function != "loss_and_gradients"]
    assert {op.op_type for op in nested} >= {"AsString", "StringLength"}
    assert {op.layer for op in report.unsupported_ops} == {"looped"}


def test_compilable_model_with_jit_compile() -> None:
    """A plain model with jit_compile=True compiles: JIT_COMPILE_ON and STEP_COMPILES."""
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(1)])
    model.compile("adam", "mse", jit_compile=True)
    report = explain(model, _batch(8, 4))
    assert report.compilable
    assert report.error == ""
    assert report.hlo_chars > 0
    assert report.unsupported_ops == ()
    assert report.codes == ("JIT_COMPILE_ON", "STEP_COMPILES", "DYNAMIC_BATCH_DIM")
    assert report.to_dict()["verdicts"][1]["code"] == "STEP_COMPILES"


def test_nothing_requested_model_says_jit_compile_off() -> None:
    """jit_compile='auto' on a CPU-only machine resolves to False: JIT_COMPILE_OFF with a fix."""
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("adam", "mse")
    verdicts = model_verdicts(model)
    assert [v.code for v in verdicts] == ["JIT_COMPILE_OFF"]
    assert "auto" in verdicts[0].message and "jit_compile=True" in verdicts[0].fix


def test_dynamic_input_dimensions_are_reported() -> None:
    """A None sequence axis is DYNAMIC_INPUT_DIM with its sample size; batch: DYNAMIC_BATCH_DIM."""
    inputs = keras.Input((None, 4), name="tokens")
    model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    model.compile("adam", "mse", jit_compile=True)
    report = explain(model, _batch(2, 7, 4))
    assert report.compilable
    assert [(d.input_name, d.axis, d.sample_size) for d in report.dynamic_dims] == [
        ("tokens", 0, 2),
        ("tokens", 1, 7),
    ]
    dynamic = report.verdicts[report.codes.index("DYNAMIC_INPUT_DIM")]
    assert dynamic.status == "warning" and "axis 1 (this batch: 7)" in dynamic.message
    assert "padded_batch" in dynamic.fix


def test_layer_declaring_no_jit_support_is_reported() -> None:
    """A layer with supports_jit=False makes Keras drop jit_compile: LAYER_DISABLES_JIT."""

    class NoJit(keras.layers.Layer):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.supports_jit = False

        def call(self, x: Any) -> Any:
            return x

    inputs = keras.Input((2,))
    model = keras.Model(inputs, keras.layers.Dense(1)(NoJit(name="no_jit")(inputs)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.compile("adam", "mse", jit_compile=True)
    codes = [v.code for v in model_verdicts(model)]
    assert codes == ["JIT_COMPILE_OFF", "LAYER_DISABLES_JIT"]
    assert explain(model, _batch(2, 2)).layers_without_jit == ("no_jit",)


def test_inputs_only_sample_uses_the_outputs_as_stand_in_loss() -> None:
    """With x alone the forward pass and gradients are still compiled (with_loss False)."""
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("adam", "mse", jit_compile=True)
    report = explain(model, np.zeros((3, 4), np.float32))
    assert report.compilable and not report.with_loss


def test_explain_leaves_weights_and_optimizer_state_bit_identical() -> None:
    """explain changes no weight, optimizer variable or metric, compilable or not."""
    inputs = keras.Input((6,))
    h = keras.layers.Dense(8)(inputs)
    h = keras.layers.BatchNormalization()(h)
    h = keras.layers.Dropout(0.5)(h)
    h = StringLayer()(h)
    normalized = keras.layers.BatchNormalization()(inputs)
    compilable = keras.Model(inputs, keras.layers.Dense(1)(normalized))
    failing = keras.Model(inputs, keras.layers.Dense(1)(h))
    x, y = _batch(16, 6)
    for model in (compilable, failing):
        model.compile("adam", "mse", metrics=["mae"])
        model.fit(x, y, epochs=1, batch_size=8, verbose=0)
        before = _state(model)
        assert len(before) > len(model.weights)  # optimizer slots exist
        report = explain(model, (x, y))
        assert report.compilable is (model is compilable)
        assert _state(model) == before
        assert int(model.optimizer.iterations.numpy()) == 2


def test_bad_sample_batch_and_an_unbuildable_model_are_value_errors() -> None:
    """A wrong sample structure, or a model its sample cannot build: a ValueError saying what to pass."""
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    x, y = _batch(2, 4)
    with pytest.raises(ValueError, match="tuple of length 4"):
        explain(model, (x, y, None, None))

    class NeedsTwoInputs(keras.Model):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.dense = keras.layers.Dense(1)

        def call(self, inputs: Any) -> Any:
            return self.dense(inputs["a"] + inputs["b"])

    unbuildable = NeedsTwoInputs(name="needs_two")
    with pytest.raises(ValueError) as caught:
        explain(unbuildable, x)
    message = str(caught.value)
    assert message.startswith("`explain` could not build the model from the sample batch (")
    assert message.endswith(
        ": build it first with one call on a real batch, model(x), or model.build(input_shape), "
        "then pass explain that batch's x or (x, y). Received: model='needs_two', which is not "
        "built"
    )


class CustomStep(keras.Model):
    """A subclassed model whose train_step computes its own loss (compiled without one)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.hidden = keras.layers.Dense(8, activation="relu", name="hidden")
        self.head = keras.layers.Dense(1, name="head")

    def call(self, x: Any, training: bool = False) -> Any:
        return self.head(self.hidden(x))

    def train_step(self, data: Any) -> Any:
        x, y = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self(x, training=True) - y))
        gradients = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(gradients, self.trainable_variables))
        return {"loss": loss}


def test_explain_builds_a_subclassed_model_and_checks_a_step_without_a_compiled_loss() -> None:
    """Unbuilt, custom train_step, compile() without a loss: explain builds it and checks forward and gradients."""
    model = CustomStep()
    model.compile("adam", jit_compile=True)
    assert not model.built
    report = explain(model, _batch(8, 4))
    assert model.built and [v.shape for v in model.trainable_variables] == [(4, 8), (8,), (8, 1), (1,)]
    assert report.compilable and not report.with_loss
    # A subclassed model has no input spec (model.inputs), so no dynamic dimension is reported.
    assert report.codes == ("JIT_COMPILE_ON", "LOSS_NOT_CHECKED", "STEP_COMPILES")
    assert "its train_step computes one" in report.verdicts[1].message


def test_callback_explain_on_a_subclassed_model_trains_exactly_as_without_the_guard(tmp_path: Any) -> None:
    """explain=(x, y) builds the subclassed model at train begin; the trained weights equal a fit without the guard."""
    from keras_xla_guard import XlaGuardCallback, XlaGuardWarning

    x, y = _batch(64, 4)

    def trained(callbacks: list[Any]) -> list[bytes]:
        keras.utils.set_random_seed(3)
        model = CustomStep()
        model.compile("adam")
        model.fit(x, y, epochs=2, batch_size=16, shuffle=False, callbacks=callbacks, verbose=0)
        return [np.asarray(w).tobytes() for w in model.get_weights()]

    guard = XlaGuardCallback(log_dir=str(tmp_path), profile_epochs=(), verbose=0, explain=(x[:8], y[:8]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        guarded = trained([guard])
    assert not [w for w in caught if issubclass(w.category, XlaGuardWarning)]
    assert guard.explain_report is not None and guard.explain_report.compilable
    assert "LOSS_NOT_CHECKED" in guard.explain_report.codes
    assert guarded == trained([])


def test_sample_that_does_not_fit_the_model_raises_instead_of_a_verdict() -> None:
    """A sample of the wrong shape is the caller's error, not an XLA finding."""
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("adam", "mse", jit_compile=True)
    with pytest.raises(ValueError, match="incompatible with the layer"):
        explain(model, _batch(2, 5))


def _text_summaries(log_dir: str) -> list[str]:
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.util import tensor_util

    acc = ea.EventAccumulator(log_dir, size_guidance={ea.TENSORS: 0})
    acc.Reload()
    texts = []
    for tag in acc.Tags()["tensors"]:
        if acc.SummaryMetadata(tag).plugin_data.plugin_name != "text":
            continue
        for event in acc.Tensors(tag):
            value = tensor_util.make_ndarray(event.tensor_proto)
            texts += [v.decode() for v in value.ravel()]
    return texts


def test_callback_explain_puts_verdicts_in_first_report_and_tensorboard(tmp_path: Any) -> None:
    """explain=(x, y): the first low-coverage report and its TensorBoard text carry the verdicts, blockers first.

    The py_function makes compile(jit_compile=True) fail in Keras: the first
    note names it (JIT_COMPILE_BLOCKED) and no note advises switching XLA on.
    """
    from keras_xla_guard import XlaGuardCallback

    model = _unsupported_model(jit_compile="auto")
    x, y = _batch(64, 6)
    guard = XlaGuardCallback(
        log_dir=str(tmp_path),
        profile_epochs=(0, 1),
        skip_steps=1,
        max_steps=3,
        verbose=0,
        explain=(x[:8], y[:8]),
        async_analysis=False,
    )
    model.fit(x, y, epochs=2, batch_size=8, callbacks=[guard], verbose=0)
    assert guard.explain_report is not None and not guard.explain_report.compilable
    first, second = guard.reports[0], guard.reports[1]
    assert first.ok and first.xla_time_fraction == 0.0
    assert first.notes[0].startswith(
        "JIT_COMPILE_BLOCKED: XLA is not requested for this model: model.jit_compile is False ("
    )
    # explain's ops in graph order (the run's op table adds none it missed).
    assert (
        "The train step runs ops without an XLA kernel on XLA_CPU_JIT: EagerPyFunc in layer 'py_layer'; "
        "AsString in layer 'strings'; StringLength in layer 'strings'; AsString in layer 'strings_1'; "
        "StringLength in layer 'strings_1'. model.compile(jit_compile=True) would fail in Keras because of "
        "them."
    ) in first.notes[0]
    assert not any("jit_compile=True" in n and "would fail" not in n for n in first.notes)
    assert not any(n.startswith("JIT_COMPILE_OFF") for n in first.notes)
    unsupported = [n for n in first.notes if n.startswith("XLA_UNSUPPORTED_OP")]
    assert any("'py_layer'" in n and "EagerPyFunc" in n for n in unsupported)
    assert not any(n.startswith("JIT_COMPILE_") for n in second.notes)
    text = html.unescape("\n".join(_text_summaries(str(tmp_path))))
    assert "JIT_COMPILE_BLOCKED: XLA is not requested" in text
    assert "XLA_UNSUPPORTED_OP: EagerPyFunc" in text and "'py_layer'" in text


def test_callback_explain_true_warns_when_jit_step_cannot_compile(tmp_path: Any) -> None:
    """explain=True on a jit_compile model with a py_function warns at train begin, naming it."""
    from keras_xla_guard import XlaGuardCallback, XlaGuardWarning

    model = _unsupported_model(jit_compile=True)
    guard = XlaGuardCallback(log_dir=str(tmp_path), verbose=0, explain=True, write_summaries=False)
    guard.set_model(model)
    # Called outside fit(), other parts of the guard warn too; only ours matters here.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        guard.on_train_begin()
    messages = [str(w.message) for w in caught if issubclass(w.category, XlaGuardWarning)]
    assert any("cannot compile with jit_compile=True" in m for m in messages)
    assert any("EagerPyFunc in layer 'py_layer'" in m for m in messages)
    assert guard.explain_report is not None and not guard.explain_report.with_loss
    guard.on_train_end()


def test_the_batch_dim_fix_says_what_it_drops_and_where_it_must_not_be_used() -> None:
    """DYNAMIC_BATCH_DIM's fix names its cost (examples left out) and keeps evaluate/predict data whole."""
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("adam", "mse", jit_compile=True)
    (batch_dim,) = (v for v in explain(model, _batch(8, 4)).verdicts if v.code == "DYNAMIC_BATCH_DIM")
    assert "leaves\n# the short last batch's examples out of every epoch" in batch_dim.fix
    assert "(never for evaluate or predict)" in batch_dim.fix
    assert batch_dim.fix.endswith("\ndataset = dataset.batch(batch_size, drop_remainder=True)")


class DataSizedLayer(keras.layers.Layer):
    """Adds the sum of a `tf.zeros` whose size the batch's values decide (a Fill XLA must size at compile time)."""

    def call(self, x: Any) -> Any:
        return x + tf.reduce_sum(tf.zeros([tf.cast(tf.reduce_sum(x), tf.int32)]))


def test_a_size_the_batch_decides_is_named_and_the_guard_counts_a_compilation_per_batch(
    tmp_path: Any,
) -> None:
    """explain names the Fill (VALUE_DEPENDENT_COMPILE); in fit each batch compiles and the window says why, not 'cache it'."""
    from keras_xla_guard import XlaGuardCallback, max_compilations

    inputs = keras.Input((4,))
    outputs = keras.layers.Dense(1)(DataSizedLayer(name="data_sized")(inputs))
    model = keras.Model(inputs, outputs)
    model.compile("sgd", "mse", jit_compile=True)
    # Batch k holds (k + 1)s: each batch's sum, hence the Fill's size, is its own (32, 64, ...).
    x = np.repeat(np.arange(1, 7, dtype=np.float32), 8)[:, None] * np.ones((1, 4), np.float32)
    y = np.zeros((48, 1), np.float32)
    report = explain(model, (x[:8], y[:8]))
    assert report.compilable
    assert [(op.op_type, op.layer, op.input_index) for op in report.constant_inputs] == [
        ("Fill", "data_sized", 0)
    ]
    assert report.codes == ("JIT_COMPILE_ON", "STEP_COMPILES", "VALUE_DEPENDENT_COMPILE", "DYNAMIC_BATCH_DIM")

    guard = XlaGuardCallback(
        log_dir=str(tmp_path), profile_epochs=(0,), skip_steps=1, max_steps=4, verbose=0, async_analysis=False
    )
    with max_compilations(None) as budget:
        model.fit(x, y, epochs=1, batch_size=8, shuffle=False, callbacks=[guard], verbose=0)
    # What docs/budgets.md says a budget cannot see: it counts from signatures, so 1.
    assert budget.count == 1
    window = guard.reports[0]
    assert window.ok and window.steps_profiled == 4
    # The epoch's one signature compiled at step 0, before the window: each compilation in it is a new value's.
    assert (window.distinct_signatures, window.expected_compilations, window.compilations) == (1, 1, 4)
    assert [(c.step, c.signature) for c in window.compile_table] == [
        (1, None),
        (2, None),
        (3, None),
        (4, None),
    ]
    (note,) = [n for n in window.notes if "compil" in n.lower()]
    assert (
        note.startswith("RECOMPILED_WITHOUT_NEW_SIGNATURE: 4 XLA compilation(s) of one_step_on_data (")
        and "(steps 1, 2, 3, 4)" in note
    )


class RandomSizedLayer(keras.layers.Layer):
    """Adds the sum of a `tf.zeros` whose size is drawn at random: no value makes it a compile-time constant."""

    def call(self, x: Any) -> Any:
        return x + tf.reduce_sum(tf.zeros([tf.random.uniform((), 1, 5, dtype=tf.int32)]))


def test_a_size_no_value_fixes_is_a_step_that_does_not_compile_as_fit_then_finds() -> None:
    """A random size: STEP_DOES_NOT_COMPILE naming TensorFlow's node, and fit(jit_compile=True) fails at that node."""
    inputs = keras.Input((4,))
    outputs = keras.layers.Dense(1)(RandomSizedLayer(name="random_sized")(inputs))
    model = keras.Model(inputs, outputs)
    model.compile("sgd", "mse", jit_compile=True)
    x, y = _batch(8, 4)
    report = explain(model, (x, y))
    assert not report.compilable and report.unsupported_ops == () and report.constant_inputs == ()
    assert report.codes == ("JIT_COMPILE_ON", "STEP_DOES_NOT_COMPILE", "DYNAMIC_BATCH_DIM")
    (verdict,) = [v for v in report.verdicts if v.code == "STEP_DOES_NOT_COMPILE"]
    node = re.search(r"node `([^`]+)` with op Fill must be a compile-time constant", verdict.message)
    assert verdict.status == "error" and node is not None and "random_sized" in node.group(1)
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(node.group(1))):
        model.fit(x, y, verbose=0)
