"""The built-in outputs: which sinks a config asks for, and what each writes from one EpochRecord."""

from __future__ import annotations

import io
import json

from keras_xla_guard import CoverageReport, GuardConfig
from keras_xla_guard.output.console import ConsoleSink
from keras_xla_guard.output.runfile import RUN_FILE, RunFileSink
from keras_xla_guard.output.sinks import default_sinks
from keras_xla_guard.runtime.sink import EpochRecord


def test_default_sinks_follow_the_config(tmp_path):
    """write_summaries adds TensorBoard and the run file in log_dir, verbose the console; tensorboard= overrides."""
    kinds = lambda sinks: [type(s).__name__ for s in sinks]  # noqa: E731
    assert kinds(default_sinks(GuardConfig(log_dir=tmp_path))) == ["TensorBoardSink", "RunFileSink", "ConsoleSink"]
    assert kinds(default_sinks(GuardConfig(log_dir=tmp_path, verbose=0))) == ["TensorBoardSink", "RunFileSink"]
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
    assert stream.getvalue() == "keras-xla-guard: XLA coverage (epoch 1): skipped - busy\n"
