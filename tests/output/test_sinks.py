"""The built-in outputs: which sinks a config asks for, and what each writes from one EpochRecord."""

from __future__ import annotations

import io
import json

import numpy as np

from keras_xla_guard import CoverageReport, GuardConfig
from keras_xla_guard.output.console import ConsoleSink
from keras_xla_guard.output.runfile import RUN_FILE, RunFileSink
from keras_xla_guard.output.sinks import default_sinks
from keras_xla_guard.runtime.compile_log import predicted_compilations
from keras_xla_guard.runtime.sink import CallRecord, EpochRecord
from keras_xla_guard.signatures import EpochSignatures, Signature, SignatureTracker


def test_default_sinks_follow_the_config(tmp_path):
    """write_summaries adds TensorBoard and the run file in log_dir, verbose the console; tensorboard= overrides."""
    kinds = lambda sinks: [type(s).__name__ for s in sinks]  # noqa: E731 - a one-line helper of this test
    assert kinds(default_sinks(GuardConfig(log_dir=tmp_path))) == [
        "TensorBoardSink",
        "RunFileSink",
        "ConsoleSink",
    ]
    assert kinds(default_sinks(GuardConfig(log_dir=tmp_path, verbose=0))) == [
        "TensorBoardSink",
        "RunFileSink",
    ]
    assert kinds(default_sinks(GuardConfig(log_dir=tmp_path, write_summaries=False))) == ["ConsoleSink"]
    assert kinds(default_sinks(GuardConfig(log_dir=tmp_path), tensorboard=False)) == ["ConsoleSink"]
    (tensorboard, run_file, _) = default_sinks(GuardConfig(log_dir=tmp_path))
    assert tensorboard.writer.log_dir == str(tmp_path) and run_file.directory == tmp_path


def test_run_file_sink_saves_each_record_as_it_comes(tmp_path):
    """Each write_epoch rewrites the file with that epoch; close() adds nothing; no record, no file."""
    sink = RunFileSink(tmp_path)
    sink.close({})
    assert not (tmp_path / RUN_FILE).exists()
    report = CoverageReport(status="skipped", reason="busy", epoch=2, steps_profiled=0)
    sink.write_epoch(EpochRecord(2, report))
    saved = json.loads((tmp_path / RUN_FILE).read_text())
    assert saved["reports"] == {"2": report.to_dict()} and saved["signatures"] == {}


def test_console_sink_prints_each_report_at_close_only():
    """Nothing is printed while training runs; close() prints one block per record with a report."""
    stream = io.StringIO()
    sink = ConsoleSink(stream)
    report = CoverageReport(status="skipped", reason="busy", epoch=1, steps_profiled=0)
    sink.write_epoch(EpochRecord(1, report))
    assert stream.getvalue() == ""
    sink.close({0: EpochRecord(0), 1: EpochRecord(1, report)})
    assert stream.getvalue() == (
        "keras-xla-guard: run summary (none): Nothing was measured (skipped: busy).\n"
        "keras-xla-guard: XLA coverage (epoch 1): skipped - busy\n"
    )


def _stats(
    function: str, epoch, steps: int, distinct: int, new: int, expected, so_far: int
) -> EpochSignatures:
    return EpochSignatures(
        epoch=epoch,
        steps=steps,
        distinct_signatures=distinct,
        new_signatures=new,
        expected_compilations=expected,
        compilations_so_far=so_far,
        short_last_batch=False,
        explanations=(),
        signatures=(),
        function=function,
    )


def _observed(function: str, widths: list[int]) -> EpochSignatures:
    """Real tracker figures of epoch 0 of `function` (XLA on): one step per width."""
    tracker = SignatureTracker(xla=True, function=function)
    tracker.begin_epoch(0)
    for step, width in enumerate(widths):
        tracker.observe(Signature.of(np.zeros((2, width))), step=step)
    return tracker.end_epoch()


def test_console_sink_prints_validations_under_their_epoch_and_a_line_per_function():
    """close(): the run's headline first, then each validation after its epoch and the epoch's compilations."""
    stream = io.StringIO()
    sink = ConsoleSink(stream)
    validation = CallRecord("test", 0, 0, _observed("test", [3, 4]))
    train = _observed("train", [3, 4, 3, 4])
    # As the engine's assembly joins them: one compilation per new signature of each function.
    compiled = predicted_compilations(0, [train, validation.signatures])
    records = {
        0: EpochRecord(0, signatures=train, calls=(validation,), compilations=compiled),
        1: EpochRecord(
            1,
            signatures=_stats("train", 1, 4, 2, 0, 0, 2),
            calls=(CallRecord("test", 1, 1, signatures_unavailable="keras 9"),),
        ),
    }
    sink.close(records)
    assert stream.getvalue().splitlines() == [
        "keras-xla-guard: run summary (recompiles): The train function compiled 2 times in this run: "
        "the input dim 1 varied across 2 values (3, 4). Fix: pad the input dim 1 to 1 bucket length(s) (4) -> at "
        "most 1 compilation(s) instead of 2. "
        "Compilations: train 2, test 2 (every epoch, one per new input signature).",
        "keras-xla-guard: validation in epoch 0: 2 steps, 2 input signature(s), 2 new, 2 expected XLA "
        "compilation(s), 2 for the test function so far",
        "  the input dim 1 varied across 2 values (3, 4)",
        "  first signature at step 0: input: float64[2,3]",
        "keras-xla-guard: epoch 0 compilations (one per new input signature): train 2, test 2",
        *(f"  {r.function:<8} step {r.step:>4}  compile {'-':>9}  {r.signature}" for r in compiled.rows),
        "keras-xla-guard: validation in epoch 1: input signatures unavailable (keras 9)",
    ]


def test_console_sink_prints_an_evaluate_or_predict_call_when_it_ends():
    """write_call prints at once (the call's own progress bar is done); close({}) prints nothing more."""
    stream = io.StringIO()
    sink = ConsoleSink(stream)
    sink.write_call(CallRecord("predict", 1, None, _stats("predict", None, 4, 2, 1, 1, 3)))
    sink.close({})
    assert stream.getvalue() == (
        "keras-xla-guard: predict (call 1 of the predict function): 4 steps, 2 input signature(s), 1 new, "
        "1 expected XLA compilation(s), 3 for the predict function so far\n"
    )
