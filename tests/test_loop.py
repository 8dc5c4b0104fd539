"""Tests for `XlaGuard`, the guard for custom training loops."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _oracle import RAW_REL, raw_figures

from keras_xla_guard import XlaGuard
from keras_xla_guard.trace.xplane import load_xspace

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

pytestmark = pytest.mark.compat

FEATURES = 16
BATCH = 32
BATCHES = 8
LENGTHS = [4, 6, 8, 4, 6, 10, 8, 4]


def _make_step(jit_compile: bool | None, seed: int = 0) -> tuple[Any, list[Any]]:
    """A raw-variable MLP train step: forward, gradients, SGD update.

    `jit_compile=None` gives the step as plain Python, run eagerly (no `tf.function`).
    """
    import tensorflow as tf

    init = tf.random.stateless_normal
    w1 = tf.Variable(0.1 * init((FEATURES, 64), seed=(seed, 1)))
    w2 = tf.Variable(0.1 * init((64, 1), seed=(seed, 2)))

    def train_step(x: Any, y: Any) -> Any:
        """One SGD step."""
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.nn.relu(x @ w1) @ w2 - y) ** 2)
        g1, g2 = tape.gradient(loss, [w1, w2])
        w1.assign_sub(0.01 * g1)
        w2.assign_sub(0.01 * g2)
        return loss

    if jit_compile is None:
        return train_step, [w1, w2]
    return tf.function(train_step, jit_compile=jit_compile), [w1, w2]


def _dataset() -> Any:
    import tensorflow as tf

    x = tf.random.stateless_normal((BATCH * BATCHES, FEATURES), seed=(7, 7))
    y = tf.reduce_sum(x[:, :1], axis=1, keepdims=True)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)


def _train(guard: XlaGuard, train_step: Any, epochs: int = 3) -> list[float]:
    step = guard.watch(train_step)
    losses = []
    with guard:
        for epoch in range(epochs):
            with guard.epoch(epoch):
                for x, y in _dataset():
                    losses.append(float(step(x, y)))
    return losses


def _step_markers(trace_path: str) -> list[dict[str, int]]:
    """Stats of every `train` step-marker event in a trace."""
    markers = []
    space = load_xspace(trace_path)
    for plane in space.planes:
        names = {mid: m.name for mid, m in plane.event_metadata.items()}
        stat_names = {mid: m.name for mid, m in plane.stat_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                if names.get(event.metadata_id) == "train":
                    markers.append({stat_names[s.metadata_id]: s.int64_value for s in event.stats})
    return markers


def _tensor_tags(log_dir: str) -> set[str]:
    from tensorboard.backend.event_processing import event_accumulator

    acc = event_accumulator.EventAccumulator(log_dir, size_guidance={"tensors": 0})
    acc.Reload()
    return set(acc.Tags()["tensors"])


@pytest.fixture(scope="module")
def jit_run(tmp_path_factory: pytest.TempPathFactory) -> XlaGuard:
    """Three epochs of a jit-compiled step, epoch 1 profiled."""
    log_dir = tmp_path_factory.mktemp("jit")
    guard = XlaGuard(log_dir=log_dir, profile_epochs=(1,), verbose=0)
    train_step, _ = _make_step(jit_compile=True)
    _train(guard, train_step)
    return guard


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory: pytest.TempPathFactory) -> XlaGuard:
    """Three epochs of a tf.function step without jit: the issue's API, no close()."""
    log_dir = tmp_path_factory.mktemp("plain")
    guard = XlaGuard(log_dir=log_dir, verbose=0)
    train_step, _ = _make_step(jit_compile=False)
    step = guard.watch(train_step)
    for epoch in range(3):
        with guard.epoch(epoch):
            for x, y in _dataset():
                step(x, y)
    return guard


# ------------------------------------------------------------ fast tests


def test_import_does_not_import_tensorflow_or_keras() -> None:
    """Importing the loop module pulls in neither TensorFlow nor Keras."""
    code = (
        "import sys, keras_xla_guard.loop; "
        "print(sorted(m for m in ('keras', 'tensorflow') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_public_name_is_exported() -> None:
    """`XlaGuard` is re-exported from the package."""
    import keras_xla_guard

    assert "XlaGuard" in keras_xla_guard.__all__
    assert keras_xla_guard.XlaGuard is XlaGuard


@pytest.mark.parametrize("epoch", [-1, 1.0, True, "1", None])
def test_epoch_rejects_bad_index(tmp_path: Path, epoch: Any) -> None:
    """`guard.epoch` raises ValueError quoting a bad epoch index."""
    guard = XlaGuard(log_dir=tmp_path, verbose=0)
    with pytest.raises(ValueError, match=rf"Received: epoch={epoch!r}"):
        guard.epoch(epoch)


@pytest.mark.parametrize("steps", [0, -3, 2.5, True])
def test_epoch_rejects_bad_steps(tmp_path: Path, steps: Any) -> None:
    """`guard.epoch` raises ValueError quoting a bad step count."""
    guard = XlaGuard(log_dir=tmp_path, verbose=0)
    with pytest.raises(ValueError, match=rf"Received: steps={steps!r}"):
        guard.epoch(0, steps=steps)


def test_watch_rejects_non_callable(tmp_path: Path) -> None:
    """`watch` raises ValueError quoting a non-callable argument."""
    guard = XlaGuard(log_dir=tmp_path, verbose=0)
    with pytest.raises(ValueError, match=r"Received: fn=42"):
        guard.watch(42)


def test_watch_rejects_non_bool_jit_compile(tmp_path: Path) -> None:
    """`watch` raises ValueError quoting a `jit_compile` that is not a bool."""
    guard = XlaGuard(log_dir=tmp_path, verbose=0)
    with pytest.raises(ValueError, match=r"Received: jit_compile='yes'"):
        guard.watch(print, jit_compile="yes")


def test_constructor_validates_like_the_callback(tmp_path: Path) -> None:
    """Bad schedule arguments raise ValueError quoting the value."""
    with pytest.raises(ValueError, match=r"Received: profile_epochs=-1"):
        XlaGuard(log_dir=tmp_path, profile_epochs=-1)
    with pytest.raises(ValueError, match=r"Received: log_dir=''"):
        XlaGuard(log_dir="")


@pytest.mark.parametrize("model", ["mlp", 42, [1, 2]])
def test_model_must_be_a_keras_model(tmp_path: Path, model: Any) -> None:
    """A `model` that is not a Keras model raises ValueError quoting it."""
    with pytest.raises(ValueError, match=rf"Received: model={model!r}".replace("[", r"\[")):
        XlaGuard(log_dir=tmp_path, model=model)


def test_model_must_be_a_built_model_instance_not_its_class_or_a_look_alike(tmp_path: Path) -> None:
    """keras.Sequential (the class), an object with `layers` and `count_params`, an unbuilt model: refused."""
    import keras

    class LooksLikeAModel:
        layers: list[Any] = []

        def count_params(self) -> int:
            return 0

    unbuilt = keras.Sequential([keras.layers.Dense(1)])
    for model, said in [
        (keras.Sequential, "must be a Keras model instance"),
        (LooksLikeAModel(), "must be a Keras model instance"),
        (unbuilt, "must be a built Keras model"),
    ]:
        with pytest.raises(ValueError, match=said) as caught:
            XlaGuard(log_dir=tmp_path, model=model)
        assert str(caught.value).endswith(f"Received: model={model!r}")
    built = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    assert XlaGuard(log_dir=tmp_path, model=built)._model is built


def test_strategy_must_be_a_tf_distribute_strategy(tmp_path: Path) -> None:
    """A `strategy` that is not a tf.distribute.Strategy raises ValueError quoting it."""
    with pytest.raises(ValueError, match=r"Received: strategy='mirrored'"):
        XlaGuard(log_dir=tmp_path, strategy="mirrored")


def test_single_process_loop_has_no_worker_and_profiles_into_log_dir(tmp_path: Path, monkeypatch) -> None:
    """Without a multi-worker strategy or TF_CONFIG the guard is alone: traces under log_dir itself."""
    monkeypatch.delenv("TF_CONFIG", raising=False)
    guard = XlaGuard(log_dir=tmp_path, profile_epochs=(0,), skip_steps=0, write_summaries=False, verbose=0)
    step = guard.watch(lambda: None)
    with guard:
        with guard.epoch(0):
            step()
    assert guard.worker is None
    (trace,) = guard.reports[0].trace_paths
    assert Path(trace).is_relative_to(tmp_path / "plugins" / "profile")


def test_watch_passes_values_and_exceptions_through(tmp_path: Path) -> None:
    """The watched step returns the same object and raises the same exception."""
    guard = XlaGuard(log_dir=tmp_path, profile_epochs=(9,), write_summaries=False, verbose=0)
    result = object()
    error = ArithmeticError("user error")

    def train_step(x: Any, *, fail: bool = False) -> Any:
        """The user's step."""
        if fail:
            raise error
        return result

    step = guard.watch(train_step)
    with guard.epoch(0):
        assert step(1) is result
        with pytest.raises(ArithmeticError) as info:
            step(1, fail=True)
    assert info.value is error
    assert step.__name__ == "train_step"
    assert step.__doc__ == "The user's step."
    assert step.__wrapped__ is train_step
    assert guard.watch(step) is step


def test_nested_epochs_are_rejected(tmp_path: Path) -> None:
    """Entering `guard.epoch` inside another raises RuntimeError."""
    guard = XlaGuard(log_dir=tmp_path, profile_epochs=(9,), verbose=0)
    with pytest.raises(RuntimeError, match=r"cannot be nested"):
        with guard.epoch(0):
            with guard.epoch(1):
                pass


# ------------------------------------------------------------ real TF


@pytest.mark.slow
@pytest.mark.parametrize("exc", [ValueError("bad batch"), KeyboardInterrupt()])
def test_exception_in_epoch_stops_profiler_and_propagates(tmp_path: Path, exc: BaseException) -> None:
    """An exception inside `guard.epoch` stops the profiler and escapes unchanged."""
    import tensorflow as tf

    guard = XlaGuard(log_dir=tmp_path / "guard", profile_epochs=(0,), skip_steps=0, verbose=0)
    step = guard.watch(lambda x: x + 1)
    with pytest.raises(type(exc)) as info:
        with guard.epoch(0):
            step(tf.constant(1.0))
            step(tf.constant(2.0))
            assert guard.engine.profiling
            raise exc
    assert info.value is exc
    assert not guard.engine.profiling
    tf.profiler.experimental.start(str(tmp_path / "other"))
    tf.profiler.experimental.stop()
    guard.close()
    # The window training left is no measurement: incomplete, its figures None, its trace named.
    report = guard.reports[0]
    assert (report.status, report.steps_profiled, report.xla_time_fraction, report.xla_executions) == (
        "incomplete",
        2,
        None,
        None,
    )
    assert report.reason == (
        "the profiling window did not complete: training stopped inside it, 2 step(s) in "
        f"({type(exc).__name__}{': bad batch' if str(exc) else ''}); its partial trace is not a measurement"
    )
    assert [Path(p).parent.name.endswith("_epoch0") for p in report.trace_paths] == [True]


@pytest.mark.slow
def test_jit_step_runs_inside_xla(jit_run: XlaGuard) -> None:
    """A tf.function(jit_compile=True) step's XLA figures are its raw launch events' sums."""
    report = jit_run.reports[1]
    assert report.ok, report.reason
    assert (report.xla_time_s, report.xla_executions, report.xla_time_fraction) == pytest.approx(
        raw_figures(report.trace_path, report.non_xla_op_time_s), rel=RAW_REL
    )
    assert report.xla_executions == BATCHES - 2
    assert report.steps_profiled == BATCHES - 2
    assert list(jit_run.reports) == [1]


@pytest.mark.slow
def test_plain_step_has_no_xla(plain_run: XlaGuard) -> None:
    """A tf.function step without jit reports 0 XLA time and says why."""
    assert list(plain_run.reports) == [1]
    report = plain_run.reports[1]
    assert report.ok, report.reason
    assert report.xla_time_fraction == 0
    assert report.non_xla_op_time_s > 0
    from keras_xla_guard.diagnose.advice import measure_first

    # Measured or hedged: compare first, with the CPU figures, then the step's own switch.
    (note,) = [n for n in report.notes if n.startswith("JIT_COMPILE_OFF")]
    assert note.startswith(
        "JIT_COMPILE_OFF: XLA is not requested: the watched train step is not a "
        f"tf.function(jit_compile=True). {measure_first()}. Fix: "
    )
    assert note.index("keras_xla_guard.compare(") < note.index(
        "train_step = tf.function(train_step, jit_compile=True)  # only if compare says jit_compile pays"
    )
    # A window whose trace holds accelerator planes: the CPU's slowdowns are no evidence there.
    (gpu_note,) = [
        n
        for n in plain_run._jit_notes(dataclasses.replace(report, time_base="device"))
        if n.startswith("JIT_COMPILE_OFF")
    ]
    assert measure_first(accelerator=True) in gpu_note and measure_first() not in gpu_note


@pytest.mark.slow
def test_a_saved_compare_is_quoted_with_the_model_it_measured(tmp_path: Path) -> None:
    """A loop guard has no model to match a saved compare with: its note names the model compare measured."""
    import json

    from _helpers import REPO

    saved = REPO / "benchmarks" / "results" / "bench_compare-20261203T162056Z.json"
    compare = next(
        c["compare"]
        for c in json.loads(saved.read_text())["result"]["cases"]
        if c["case"] == "xla_does_not_pay"
    )
    compare["model"] = {"class": "Functional", "name": "seq_model", "params": 12345}
    (tmp_path / "compare").mkdir()
    (tmp_path / "compare" / "compare_report.json").write_text(json.dumps(compare))
    guard = XlaGuard(log_dir=tmp_path, profile_epochs=(0,), verbose=0)
    train_step, _ = _make_step(jit_compile=False)
    _train(guard, train_step, epochs=1)
    (note,) = [n for n in guard.reports[0].notes if n.startswith("JIT_COMPILE_OFF")]
    assert note == (
        "JIT_COMPILE_OFF: XLA is not requested: the watched train step is not a tf.function(jit_compile=True). "
        "compare measured Functional 'seq_model' (12,345 parameters) in this log dir that jit_compile does "
        f"not pay here: {compare['verdict'].rstrip('.')}. Keep it off."
    )


def _keras_step(model: Any) -> Any:
    """A plain (no XLA) `tf.function` train step of a Keras model, with SGD."""
    import keras
    import tensorflow as tf

    optimizer = keras.optimizers.SGD(0.01)

    @tf.function(jit_compile=False)
    def train_step(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x, training=True) - y) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return train_step


def _keras_mlp(*middle: Any) -> Any:
    import keras

    return keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(8, name="dense"),
            *middle,
            keras.layers.Dense(1, name="head"),
        ],
        name="loop_mlp",
    )


@pytest.mark.slow
@pytest.mark.parametrize("same", [True, False])
def test_a_saved_compare_counts_only_for_the_model_given(tmp_path: Path, same: bool) -> None:
    """With `model=`, a saved compare of that model decides the advice; one of another model is set aside, warned once."""
    import json
    import warnings

    from _helpers import REPO

    from keras_xla_guard import XlaGuardWarning
    from keras_xla_guard.comparison.report import describe_model
    from keras_xla_guard.diagnose.advice import measure_first

    model = _keras_mlp()
    saved = REPO / "benchmarks" / "results" / "bench_compare-20261203T162056Z.json"
    compare = next(
        c["compare"] for c in json.loads(saved.read_text())["result"]["cases"] if c["case"] == "xla_pays"
    )
    ours = describe_model(model)
    assert ours == {"class": "Sequential", "name": "loop_mlp", "params": FEATURES * 8 + 8 + 8 + 1}
    compare["model"] = ours if same else {**ours, "name": "deep_mlp", "params": ours["params"] + 1000}
    (tmp_path / "compare").mkdir()
    (tmp_path / "compare" / "compare_report.json").write_text(json.dumps(compare))
    guard = XlaGuard(log_dir=tmp_path, profile_epochs=(0, 1), verbose=0, model=model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _train(guard, _keras_step(model), epochs=2)
    what = "JIT_COMPILE_OFF: XLA is not requested: the watched train step is not a tf.function(jit_compile=True)."
    mismatch = [w for w in caught if "measured another model" in str(w.message)]
    for epoch in (0, 1):
        (note,) = [n for n in guard.reports[epoch].notes if n.startswith("JIT_COMPILE_OFF")]
        if same:
            assert note.startswith(
                f"{what} compare measured Sequential 'loop_mlp' ({ours['params']:,} parameters) in this log dir "
                "that XLA pays: "
            )
        else:
            assert note.startswith(f"{what} {measure_first()}. Fix: ")
    if same:
        assert mismatch == []
    else:
        (warning,) = mismatch
        assert issubclass(warning.category, XlaGuardWarning)
        assert (
            f"measured another model (Sequential 'deep_mlp' ({ours['params'] + 1000:,} parameters); "
            f"this loop trains Sequential 'loop_mlp' ({ours['params']:,} parameters))"
        ) in str(warning.message)


@pytest.mark.slow
def test_the_model_given_names_the_layer_of_an_op_without_an_xla_kernel(tmp_path: Path) -> None:
    """With `model=`, JIT_COMPILE_BLOCKED names the Keras layer of an op XLA cannot compile, and the op
    table gives each op its layer, as the callback does."""
    import keras
    import tensorflow as tf

    class PyFunctionLayer(keras.layers.Layer):
        def call(self, x: Any) -> Any:
            y = tf.py_function(lambda t: t * 2.0, [x], x.dtype)
            y.set_shape(x.shape)
            return y

    model = _keras_mlp(PyFunctionLayer(name="py_layer"))
    guard = XlaGuard(log_dir=tmp_path, profile_epochs=(0,), verbose=0, model=model, top_k=100)
    _train(guard, _keras_step(model), epochs=1)
    # And every op of the op table its layer (the loss' ops have none).
    ops = guard.reports[0].top_non_xla_ops
    assert {op.layer for op in ops if op.op_type == "EagerPyFunc"} == {"py_layer"}
    assert {op.layer for op in ops if "MatMul" in op.op_type} == {"dense", "head"}
    assert {op.layer for op in ops if op.op_name == "Add"} == {None}
    (note,) = [n for n in guard.reports[0].notes if n.startswith("JIT_COMPILE_BLOCKED")]
    assert note == (
        "JIT_COMPILE_BLOCKED: XLA is not requested: the watched train step is not a tf.function(jit_compile=True). "
        "The train step runs ops without an XLA kernel on XLA_CPU_JIT: EagerPyFunc in layer 'py_layer'. "
        "jit_compile=True on the train step would fail because of them."
    )


@pytest.mark.slow
def test_ops_run_eagerly_beside_a_compiled_step_are_timed_and_noted(tmp_path: Path) -> None:
    """A jit step plus eager ops in every step: the XLA share stays 1.0, eager_op_time_s is the raw trace's
    eager op spans, and the note gives their calls and the share counting them."""
    import tensorflow as tf
    from _oracle import raw_eager_ops

    train_step, _ = _make_step(jit_compile=True)
    total = tf.Variable(0.0)

    def step_and_log(x: Any, y: Any) -> Any:
        loss = step(x, y)
        # A loss log kept the slow way: eager ops after each compiled step.
        total.assign_add(tf.reduce_sum(tf.square(x @ tf.transpose(x))))
        return loss

    guard = XlaGuard(log_dir=tmp_path, profile_epochs=(1,), verbose=0)
    step = guard.watch(train_step)
    with guard:
        for epoch in range(2):
            with guard.epoch(epoch):
                for x, y in _dataset():
                    step_and_log(x, y)
    report = guard.reports[1]
    total_ps, calls = raw_eager_ops(report.trace_path)
    steps = report.steps_profiled
    assert steps == len(report.steps) == BATCHES - 2
    assert {
        op: calls[op] for op in ("MatMul", "Transpose", "Square", "Sum", "AssignAddVariableOp")
    } == dict.fromkeys(("MatMul", "Transpose", "Square", "Sum", "AssignAddVariableOp"), steps)
    assert report.eager_op_time_s == pytest.approx(total_ps * 1e-12, rel=1e-12)
    assert report.xla_time_fraction == 1.0 and report.non_xla_op_time_s == 0.0
    # The package's parse of the file books the same.
    from keras_xla_guard import analyze_xspace

    assert analyze_xspace(load_xspace(report.trace_path)).eager_op_time_s == report.eager_op_time_s
    ordered = sorted(((op, n) for op, n in calls.items() if n >= steps), key=lambda item: (-item[1], item[0]))
    named = ", ".join(f"{op} x{n}" for op, n in ordered[:5]) + (
        f" and {len(ordered) - 5} more" if len(ordered) > 5 else ""
    )
    counted = report.xla_time_s / (report.xla_time_s + report.eager_op_time_s)
    (note,) = [n for n in report.notes if "ran eagerly" in n]
    assert note == (
        f"ops also ran eagerly, one at a time from Python, beside the functions, as often as the steps or more "
        f"({named} in {steps} steps): the ops run eagerly took {report.eager_op_time_s:.3f} s (eager_op_time_s), "
        "which the XLA share leaves out (it counts op time inside functions); counting them, "
        f"{counted:.1%} of op time ran inside XLA. XLA never compiles an op run eagerly: move the step's "
        "eager ops into the compiled train step - whether compiling them pays is not measured here"
    )


@pytest.mark.slow
def test_an_eager_step_is_named_as_eager_with_the_fix(tmp_path: Path) -> None:
    """A step that is no tf.function: 0% XLA, and the note names the op types the raw trace ran eagerly."""
    train_step, _ = _make_step(jit_compile=None)
    guard = XlaGuard(log_dir=tmp_path, profile_epochs=(1,), verbose=0)
    _train(guard, train_step, epochs=2)
    report = guard.reports[1]
    assert report.ok, report.reason
    assert (report.xla_time_s, report.non_xla_op_time_s, report.xla_time_fraction) == (0.0, 0.0, 0.0)
    # The oracle: the op types of the raw trace's eager op spans, read with the proto alone.
    eager = sorted(
        {
            m.name[len("EagerLocalExecute: ") :]
            for trace in report.trace_paths
            for plane in load_xspace(trace).planes
            if plane.name == "/host:CPU"
            for m in plane.event_metadata.values()
            if m.name.startswith("EagerLocalExecute: ") and "__inference_" not in m.name
        }
    )
    assert "MatMul" in eager and len(eager) > 5
    (note,) = report.notes
    assert note.startswith(
        "no TF op kernel or XLA program ran in this window: its ops ran eagerly, one at a time from Python "
        f"({', '.join(eager[:5])} and {len(eager) - 5} more), which XLA never compiles"
    )
    assert f"(their time is part of eager_overhead_s, {report.eager_overhead_s:.3f} s)" in note
    assert report.eager_overhead_s > 0
    assert note.endswith(
        "wrap the train step in tf.function(jit_compile=True) - whether XLA pays on this "
        "machine is not measured here: measure it first with keras_xla_guard.compare"
    )


@pytest.mark.slow
def test_close_prints_reports_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With verbose=1, closing prints each report once; closing again does nothing."""
    import tensorflow as tf

    guard = XlaGuard(log_dir=tmp_path, profile_epochs=(0,), skip_steps=0)
    step = guard.watch(tf.function(lambda x: tf.matmul(x, x), jit_compile=True))
    with guard:
        with guard.epoch(0):
            for _ in range(3):
                step(tf.ones((4, 4)))
    guard.close()
    out = capsys.readouterr().out
    assert out.count("keras-xla-guard: XLA coverage (epoch 0, 3 steps") == 1


@pytest.mark.slow
def test_step_markers_in_trace(jit_run: XlaGuard) -> None:
    """Each profiled step is a `train` event with step_num and `_r=1` for XProf."""
    markers = _step_markers(jit_run.reports[1].trace_path)
    assert [m["step_num"] for m in markers] == list(range(2, BATCHES))
    assert all(m["_r"] == 1 for m in markers)


@pytest.mark.slow
def test_xprof_sees_the_marked_steps(jit_run: XlaGuard) -> None:
    """XProf's step-time analysis (the oracle) lists the guard's `train` steps."""
    import json

    from xprof.convert import raw_to_tool_data

    data, _ = raw_to_tool_data.xspace_to_tool_data(
        [jit_run.reports[1].trace_path], "input_pipeline_analyzer", {}
    )
    step_table = json.loads(data)[1]
    names = [row["c"][0]["v"] for row in step_table["rows"]]
    # XProf leaves out the window's first and last step as possibly incomplete.
    assert names == [f"train {n}" for n in range(3, BATCHES - 1)]


@pytest.mark.slow
def test_event_files_hold_guard_tags(jit_run: XlaGuard) -> None:
    """TensorBoard event files hold the same `xla_guard/*` tags as the callback's."""
    from keras_xla_guard.output.tensorboard_metadata import SCALAR_TAGS

    tags = _tensor_tags(jit_run.log_dir)
    assert set(SCALAR_TAGS) <= tags
    assert "xla_guard/report" in tags


@pytest.mark.slow
def test_watch_keeps_tf_function_api_and_numbers(tmp_path: Path) -> None:
    """A watched, profiled step trains to the same weights as the bare step."""
    import numpy as np

    bare_step, bare_vars = _make_step(jit_compile=True, seed=3)
    watched_fn, watched_vars = _make_step(jit_compile=True, seed=3)
    bare_losses = [float(bare_step(x, y)) for _ in range(2) for x, y in _dataset()]
    guard = XlaGuard(log_dir=tmp_path, profile_epochs=(0, 1), skip_steps=0, verbose=0)
    watched_losses = _train(guard, watched_fn, epochs=2)
    step = guard.watch(watched_fn)
    assert watched_losses == bare_losses
    assert all(np.isfinite(watched_losses))
    for bare, watched in zip(bare_vars, watched_vars):
        np.testing.assert_array_equal(bare.numpy(), watched.numpy())
    assert step.experimental_get_tracing_count() == 1
    assert step.get_concrete_function is not None
    assert [r.status for r in guard.reports.values()] == ["ok", "ok"]


@pytest.fixture(scope="module")
def shapes_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[XlaGuard, Any]:
    """Two epochs of a jit step over batches of 4 distinct sizes, epoch 0 profiled."""
    import tensorflow as tf

    guard = XlaGuard(log_dir=tmp_path_factory.mktemp("shapes"), profile_epochs=(0,), skip_steps=0, verbose=0)
    train_step, _ = _make_step(jit_compile=True)
    step = guard.watch(train_step)
    with guard:
        for epoch in range(2):
            with guard.epoch(epoch):
                for n in LENGTHS:
                    x = tf.random.stateless_normal((n, FEATURES), seed=(n, 0))
                    step(x, y=tf.zeros((n, 1)))
    return guard, step


@pytest.mark.slow
def test_variable_shapes_signatures_match_trace_compilations(shapes_run: tuple[XlaGuard, Any]) -> None:
    """Signature counts and the trace agree: one XLA compilation per new shape."""
    guard, step = shapes_run
    report = guard.reports[0]
    assert report.ok, report.reason
    distinct = len(set(LENGTHS))
    assert report.compilations == distinct
    assert report.distinct_signatures == distinct
    assert report.new_signatures == distinct
    assert report.expected_compilations == distinct
    assert step.experimental_get_tracing_count() == distinct


@pytest.mark.slow
def test_variable_shapes_explained_by_argument_name(shapes_run: tuple[XlaGuard, Any]) -> None:
    """The explanation names the step's argument, the dimension and the sizes seen."""
    guard, _ = shapes_run
    explanations = [finding.message for finding in guard.reports[0].signature_explanations]
    assert "input 'x' dim 0 varied across 4 values (4, 6, 8, 10)" in explanations
    assert "input 'y' dim 0 varied across 4 values (4, 6, 8, 10)" in explanations


@pytest.mark.slow
def test_unprofiled_epoch_still_tracks_signatures(shapes_run: tuple[XlaGuard, Any]) -> None:
    """An epoch without profiler gets signature figures and no new compilations."""
    guard, _ = shapes_run
    assert list(guard.reports) == [0]
    stats = guard.signatures[1]
    assert (stats.steps, stats.distinct_signatures, stats.new_signatures) == (len(LENGTHS), 4, 0)
    assert stats.expected_compilations == 0


@pytest.mark.slow
def test_write_html_holds_the_loops_reports_and_signatures(
    shapes_run: tuple[XlaGuard, Any], tmp_path: Path
) -> None:
    """`XlaGuard.write_html` writes the run's page: its report's and epochs' figures, how it ended."""
    from _html import read_page

    guard, _ = shapes_run
    page = read_page(guard.write_html(tmp_path / "loop.html").read_text(encoding="utf-8"))
    report = guard.reports[0].to_dict()
    for field in ("xla_time_fraction", "xla_time_s", "non_xla_op_time_s", "compilations", "compile_time_s"):
        assert page.value(field, **{"data-epoch": 0, "class": "report"}) == report[field]
    for epoch, stats in guard.signatures.items():
        row = {"data-epoch": epoch, "class": "epoch-signatures"}
        assert page.value("new_signatures", **row) == stats.new_signatures
        assert page.value("expected_compilations", **row) == stats.expected_compilations
    assert "Training ran to its end." in page.text


@pytest.mark.slow
def test_raise_on_violation_escapes_the_step_before_it_runs(tmp_path: Path) -> None:
    """`on_violation="raise"` raises from the watched step and stops the profiler."""
    import numpy as np
    import tensorflow as tf

    from keras_xla_guard.errors import RecompilationLimitError

    double = tf.function(lambda x: 2 * x, jit_compile=True)
    guard = XlaGuard(
        log_dir=tmp_path,
        profile_epochs=(0,),
        skip_steps=0,
        verbose=0,
        max_compilations=2,
        on_violation="raise",
    )
    step = guard.watch(double)
    with pytest.raises(RecompilationLimitError, match=r"max_compilations=2"):
        with guard.epoch(0):
            for n in (2, 3, 4):
                step(np.zeros(n, "float32"))
    assert not guard.engine.profiling
    assert double.experimental_get_tracing_count() == 2
    guard.close()


@pytest.mark.slow
def test_stop_on_violation_sets_stop_requested(tmp_path: Path) -> None:
    """`on_violation="stop"` warns, asks the loop to stop via `stop_requested`; the page says so."""
    import numpy as np
    import tensorflow as tf

    from keras_xla_guard import XlaGuardWarning

    step_fn = tf.function(lambda x: 2 * x, jit_compile=True)
    guard = XlaGuard(
        log_dir=tmp_path, profile_epochs=(5,), verbose=0, max_compilations=2, on_violation="stop"
    )
    step = guard.watch(step_fn)
    sizes = []
    with pytest.warns(XlaGuardWarning, match=r"on_violation='stop'"):
        with guard, guard.epoch(0):
            for n in (2, 3, 4, 5):
                step(np.zeros(n, "float32"))
                sizes.append(n)
                if guard.stop_requested:
                    break
    assert sizes == [2, 3, 4]
    from _html import read_page

    text = "".join(read_page(guard.write_html(tmp_path / "page.html").read_text(encoding="utf-8")).text)
    assert "Training was stopped by the guard (on_violation='stop'): " in text


@pytest.fixture
def autoclustering() -> Any:
    """Requests TF auto-clustering for one test, restoring the switch after."""
    import tensorflow as tf

    before = tf.config.optimizer.get_jit()
    tf.config.optimizer.set_jit("autoclustering")
    yield
    tf.config.optimizer.set_jit(before or False)


@pytest.mark.slow
def test_ineffective_autoclustering_is_explained(tmp_path: Path, autoclustering: Any) -> None:
    """Auto-clustering without the CPU flag: 0% XLA and a note naming the flag."""
    guard = XlaGuard(log_dir=tmp_path, profile_epochs=(0,), skip_steps=0, verbose=0)
    train_step, _ = _make_step(jit_compile=False)
    _train(guard, train_step, epochs=1)
    report = guard.reports[0]
    assert guard.engine.xla_mode == "autoclustering"
    assert report.xla_time_fraction == 0
    (note,) = report.notes
    assert "--tf_xla_cpu_global_jit" in note
    # The alternative, jit_compile on the step, comes measured-first.
    from keras_xla_guard.diagnose.advice import measure_first

    assert note.endswith(
        f"tf.function(jit_compile=True) on the train step needs neither switch. {measure_first()}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("declared", [True, None])
def test_python_step_declared_jit_counts_compilations(tmp_path: Path, declared: Any) -> None:
    """A Python step calling a jit function counts compilations once declared so."""
    import numpy as np
    import tensorflow as tf

    double = tf.function(lambda x: 2 * x, jit_compile=True)

    def train_step(x: Any) -> Any:
        return double(x)

    guard = XlaGuard(log_dir=tmp_path, profile_epochs=(9,), write_summaries=False, verbose=0)
    step = guard.watch(train_step, jit_compile=declared)
    with guard, guard.epoch(0):
        for n in (2, 3, 2, 5):
            step(np.zeros(n, "float32"))
    stats = guard.signatures[0]
    assert stats.distinct_signatures == 3
    assert stats.expected_compilations == (3 if declared else None)
    assert double.experimental_get_tracing_count() == 3
