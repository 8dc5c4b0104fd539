"""XlaGuardEngine: each epoch leaves as one EpochRecord through ReportSinks; a failing sink costs a warning only."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from keras_xla_guard import CoverageReport, XlaGuardEngine, XlaGuardWarning
from keras_xla_guard.output.console import ConsoleSink
from keras_xla_guard.output.runfile import RunFileSink
from keras_xla_guard.output.tensorboard import TensorBoardSink
from keras_xla_guard.runtime.engine import xla_mode_of
from keras_xla_guard.runtime.sink import ReportSink
from keras_xla_guard.signatures import Signature


class _Recorder:
    """A sink that keeps every call."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.records: list = []

    def write_epoch(self, record):
        self.records.append(record)
        report, stats = record.report, record.signatures
        self.calls.append(
            (
                "epoch",
                record.epoch,
                None if report is None else report.status,
                None if stats is None else stats.distinct_signatures,
                record.signatures_unavailable,
            )
        )

    def close(self, records):
        self.calls.append(("close", tuple(sorted(records))))


class _Broken(_Recorder):
    def write_epoch(self, record):
        raise OSError("disk full")


def _run(engine: XlaGuardEngine, lengths_by_epoch, **begin) -> None:
    engine.train_begin(epochs=len(lengths_by_epoch), **begin)
    for epoch, lengths in enumerate(lengths_by_epoch):
        engine.epoch_begin(epoch)
        for step, n in enumerate(lengths):
            engine.observe_signature(Signature.of(np.zeros((2, n))), step=step)
        engine.epoch_end(epoch)
    engine.train_end()


def test_recorder_and_builtin_sinks_satisfy_the_protocol(tmp_path):
    """TensorBoardSink, RunFileSink, ConsoleSink and a duck-typed sink are ReportSinks."""
    assert isinstance(_Recorder(), ReportSink)
    assert isinstance(ConsoleSink(), ReportSink)
    assert isinstance(TensorBoardSink("unused"), ReportSink)
    assert isinstance(RunFileSink(tmp_path), ReportSink)


def test_signature_figures_and_the_end_reach_every_sink_in_order(tmp_path):
    """Each unprofiled epoch is one record at its end (no report), then close() with the run's records."""
    sink = _Recorder()
    engine = XlaGuardEngine(log_dir=tmp_path, profile_epochs=(), sinks=[sink])
    _run(engine, [[3, 4, 3], [5]], xla_mode="jit_compile")
    assert sink.calls == [("epoch", 0, None, 2, None), ("epoch", 1, None, 1, None), ("close", (0, 1))]
    assert not list(tmp_path.iterdir()), "no sink writes files here, so no event file"


def test_unavailable_signatures_are_published_not_counted(tmp_path):
    """After signatures_unavailable the sink hears why, per epoch, and gets no counts."""
    sink = _Recorder()
    engine = XlaGuardEngine(log_dir=tmp_path, profile_epochs=(), sinks=[sink])
    engine.train_begin(epochs=1)
    engine.epoch_begin(0)
    with pytest.warns(XlaGuardWarning, match="input signatures are unavailable in this run: keras 9"):
        engine.signatures_unavailable("keras 9")
    engine.epoch_end(0)
    engine.train_end()
    assert sink.calls == [("epoch", 0, None, None, "keras 9"), ("close", (0,))]


def test_a_failing_sink_warns_once_a_run_and_the_others_still_publish(tmp_path):
    """OSError in one sink's every write: one XlaGuardWarning a run naming it; the next sink gets the figures."""
    broken, good = _Broken(), _Recorder()
    engine = XlaGuardEngine(log_dir=tmp_path, profile_epochs=(), sinks=[broken, good])
    for _ in range(2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _run(engine, [[3], [3], [3]])
        assert [str(w.message) for w in caught] == [
            "keras-xla-guard: could not write the output _Broken: OSError: disk full. This run's figures are "
            "missing there (guard.reports still has them). Training continues. To fix: "
            "_Broken.write_epoch raised it: fix that sink."
        ]
    assert good.calls[-4:] == [*(("epoch", e, None, 1, None) for e in (0, 1, 2)), ("close", (0, 1, 2))]
    assert broken.calls == [("close", (0, 1, 2))] * 2


def test_engine_without_sinks_publishes_nowhere_and_a_factory_gives_fresh_sinks_per_run(tmp_path):
    """sinks=None: no sink; sinks=callable: called with the config as each run begins."""
    made = []

    def factory(config):
        made.append(_Recorder())
        assert config.log_dir == tmp_path
        return [made[-1]]

    engine = XlaGuardEngine(log_dir=tmp_path, profile_epochs=(), sinks=factory)
    _run(engine, [[3]])
    _run(engine, [[4]])
    assert [sink.calls for sink in made] == [[("epoch", 0, None, 1, None), ("close", (0,))]] * 2
    bare = XlaGuardEngine(log_dir=tmp_path, profile_epochs=())
    _run(bare, [[3]])
    assert bare.signatures[0].distinct_signatures == 1
    assert not list(tmp_path.iterdir())


def test_train_begin_rejects_a_bad_xla_mode_and_steps_per_call(tmp_path):
    """xla_mode and steps_per_call are checked with the allowed values named."""
    engine = XlaGuardEngine(log_dir=tmp_path, profile_epochs=(), verbose=0)
    with pytest.raises(
        ValueError,
        match=r"`xla_mode` must be one of \('jit_compile', 'autoclustering', None\). Received: xla_mode='xla'",
    ):
        engine.train_begin(xla_mode="xla")
    with pytest.raises(
        ValueError, match=r"^`steps_per_call` must be an integer >= 1. Received: steps_per_call=0$"
    ):
        engine.train_begin(steps_per_call=0)


def test_xla_mode_rule_is_shared():
    """jit_compile wins; otherwise auto-clustering only when TF's switch is on."""
    import tensorflow as tf

    assert xla_mode_of(True) == "jit_compile"
    assert tf.config.optimizer.get_jit() == ""
    assert xla_mode_of(False) is None
    tf.config.optimizer.set_jit("autoclustering")
    try:
        assert xla_mode_of(False) == "autoclustering"
    finally:
        tf.config.optimizer.set_jit(False)


@pytest.mark.slow
def test_each_run_ends_its_analysis_thread_and_the_next_run_starts_one(tmp_path):
    """An asynchronous analysis thread lives from a run's first window to its train_end, not as long as the guard."""
    import threading

    import tensorflow as tf

    def analysis_threads():
        return [t for t in threading.enumerate() if t.name.startswith("keras_xla_guard_")]

    before = analysis_threads()
    engine = XlaGuardEngine(log_dir=tmp_path, profile_epochs=(0,), skip_steps=0, max_steps=2, sinks=[])
    for run in range(2):
        engine.train_begin(epochs=1)
        engine.epoch_begin(0, steps=2)
        for s in range(2):
            engine.step_begin(s)
            tf.reduce_sum(tf.ones((4, 4)))
        engine.epoch_end(0)
        (thread,) = [t for t in analysis_threads() if t not in before]
        engine.train_end()
        thread.join(timeout=30)
        assert not thread.is_alive(), f"run {run}: the analysis thread outlived train_end"
        assert engine.reports[0] is not None and engine.reports[0].status == "ok", engine.reports[0]


@pytest.mark.slow
def test_a_profiled_jit_step_reaches_a_custom_sink_with_exact_counts(tmp_path):
    """A real profiled window of 6 jit_compile steps: the sink's report counts 6 XLA launches."""
    import tensorflow as tf
    from _fit_helpers import profiler_is_free

    w = tf.Variable(tf.ones((8, 8)))

    @tf.function(jit_compile=True)
    def step(x):
        w.assign(tf.tanh(x @ w))
        return tf.reduce_sum(w)

    sink = _Recorder()
    engine = XlaGuardEngine(
        log_dir=tmp_path, profile_epochs=(0,), skip_steps=2, max_steps=6, async_analysis=False, sinks=[sink]
    )
    x = tf.ones((8, 8))
    engine.train_begin(epochs=1, xla_mode="jit_compile")
    engine.epoch_begin(0, steps=10)
    for s in range(10):
        engine.step_begin(s)
        engine.observe_inputs(x, step=s)
        step(x)
    engine.epoch_end(0)
    engine.train_end()
    assert profiler_is_free()
    assert sink.calls == [("epoch", 0, "ok", 1, None), ("close", (0,))]
    (record,) = sink.records
    report = record.report
    assert report.ok, report.reason
    assert (report.epoch, report.steps_profiled, report.xla_executions) == (0, 6, 6)
    # The window opened after the step that compiled: the signature is not new in it.
    assert (report.distinct_signatures, report.new_signatures, report.expected_compilations) == (1, 1, 1)
    assert record.compile_table == report.compile_table == ()
    assert record.signatures is engine.signatures[0]
    assert engine.reports[0] is not None and engine.reports[0].xla_executions == 6
    assert list((tmp_path / "plugins" / "profile").iterdir()), "the trace stays in log_dir"


def test_not_profiled_run_reports_each_selected_epoch_skipped_with_the_reason(tmp_path):
    """not_profiled: no profiler session, every selected epoch skipped with that reason, signatures kept."""
    sink = _Recorder()
    engine = XlaGuardEngine(log_dir=tmp_path, profile_epochs=(0, 1), skip_steps=0, sinks=[sink])
    engine.train_begin(epochs=2, xla_mode="jit_compile", not_profiled="not profiled: a test")
    for epoch in range(2):
        engine.epoch_begin(epoch, steps=3)
        for step in range(3):
            engine.step_begin(step)
            assert not engine.profiling
            engine.observe_signature(Signature.of(np.zeros((2, 3))), step=step)
        engine.epoch_end(epoch)
    engine.train_end()
    reports = engine.reports
    assert [(r.status, r.reason, r.steps_profiled) for r in reports.values()] == [
        ("skipped", "not profiled: a test", 0)
    ] * 2
    assert [r.distinct_signatures for r in reports.values()] == [1, 1]
    assert not list(tmp_path.iterdir())  # no trace, no staging directory


@pytest.mark.slow
def test_skip_first_step_starts_the_first_epochs_window_one_step_later(tmp_path):
    """skip_first_step: with skip_steps=0 the run's first epoch is profiled from step 1, later ones from 0."""
    engine = XlaGuardEngine(log_dir=tmp_path, profile_epochs=(0, 1), skip_steps=0, sinks=[])
    engine.train_begin(epochs=2, skip_first_step=True)
    starts = []
    for epoch in range(2):
        engine.epoch_begin(epoch, steps=3)
        for step in range(3):
            engine.step_begin(step)
            if engine.profiling and len(starts) == epoch:
                starts.append(step)
        engine.epoch_end(epoch)
    engine.train_end()
    assert starts == [1, 0]
    assert [r.steps_profiled for r in engine.reports.values()] == [2, 3]


def test_reported_step_ends_count_only_finished_steps_and_a_cap_still_counts_its_window(tmp_path):
    """With step_end, a begun step that never ended is not counted; without ends, and at a cap, begins count."""
    engine = XlaGuardEngine(log_dir=tmp_path, profile_epochs=(0, 1, 2), skip_steps=0, sinks=[])
    engine.train_begin(epochs=3)
    for epoch, (ends, begun) in enumerate([(True, 4), (False, 4), (True, 6)]):
        engine.epoch_begin(epoch)
        for step in range(begun):
            engine.step_begin(step)
            if ends and step < 3:  # the 4th call finds the data's end and runs no step
                engine.step_end(step)
        engine.epoch_end(epoch)
    engine.train_end()
    assert [r.steps_profiled for r in engine.reports.values()] == [3, 4, 3]


def test_a_step_cap_ends_the_window_at_the_cap_whatever_ended(tmp_path):
    """max_steps=2 closes the window at its third step_begin: 2 steps, ends reported or not."""
    engine = XlaGuardEngine(log_dir=tmp_path, profile_epochs=(0,), skip_steps=0, max_steps=2, sinks=[])
    engine.train_begin(epochs=1)
    engine.epoch_begin(0)
    for step in range(5):
        engine.step_begin(step)
        engine.step_end(step)
    engine.epoch_end(0)
    engine.train_end()
    assert engine.reports[0].steps_profiled == 2


def test_epochs_released_by_two_threads_reach_the_sinks_in_epoch_order(tmp_path):
    """Epoch 1's record, released while epoch 0's is still being handed out, reaches a sink after it."""
    import threading
    import time

    from keras_xla_guard.trace.report import CoverageReport

    sink = _Recorder()
    engine = XlaGuardEngine(log_dir=tmp_path, profile_epochs=(), sinks=[sink], verbose=0)
    engine.train_begin(epochs=2, xla_mode="jit_compile")
    for epoch in (0, 1):
        engine._epochs_open.begin(epoch)
        engine._epochs_open.analyzing(epoch, (0, 1))
        engine._epochs_open.end(epoch, None, "not recorded")
    analysis = threading.Thread(
        target=engine._store, args=(CoverageReport(status="skipped", reason="r", epoch=1),)
    )
    publish = engine._publish

    def publish_slowly(record):
        if record.epoch == 0:
            # The other thread completes epoch 1 while epoch 0 is on its way out.
            analysis.start()
            time.sleep(0.3)
        publish(record)

    engine._publish = publish_slowly
    engine._store(CoverageReport(status="skipped", reason="r", epoch=0))
    analysis.join()
    assert [call[1] for call in sink.calls] == [0, 1]


def test_an_epoch_note_that_fails_is_a_warning_and_the_others_still_note(tmp_path):
    """A failing `epoch_notes` provider never reaches training: a warning naming it, the other notes kept."""

    def boom(report):
        raise RuntimeError("boom")

    engine = XlaGuardEngine(log_dir=tmp_path, profile_epochs=(), epoch_notes=[boom, lambda r: ["kept"]])
    with pytest.warns(XlaGuardWarning, match="a note on epoch 3 failed: RuntimeError: boom"):
        report = engine._add_epoch_notes(CoverageReport(epoch=3, notes=("analysis",)))
    assert report.notes == ("analysis", "kept")
    # A report that measured nothing gets no note.
    skipped = CoverageReport(status="skipped", reason="r", epoch=4)
    assert engine._add_epoch_notes(skipped) is skipped
