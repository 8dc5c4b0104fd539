"""The HTML page of a guard's run: how the run ended, and html_report= at the end."""

from __future__ import annotations

import dataclasses

import pytest

from keras_xla_guard import XlaGuardEngine, XlaGuardWarning
from keras_xla_guard.distributed import WorkerInfo
from keras_xla_guard.output.page import exit_reason, write_html_at_end


def test_html_report_that_cannot_be_written_is_a_warning(tmp_path):
    """html_report= naming a directory: the run's end warns and goes on; a chief-less worker writes nothing."""
    engine = XlaGuardEngine(log_dir=tmp_path / "logs", html_report=tmp_path, verbose=0)
    with pytest.warns(XlaGuardWarning, match=r"writing the HTML report .* failed: IsADirectoryError"):
        write_html_at_end(engine)
    page = tmp_path / "page.html"
    engine = XlaGuardEngine(log_dir=tmp_path / "logs", html_report=page, verbose=0)
    worker = WorkerInfo("worker", 1, 2, is_chief=False)
    write_html_at_end(engine, worker)
    assert not page.exists()
    write_html_at_end(engine, dataclasses.replace(worker, task_id=0, is_chief=True))
    assert "Nothing was measured (no profiled window)." in page.read_text(encoding="utf-8")


def test_exit_reason_follows_the_run():
    """Before the first epoch, inside one, and after the end: one sentence each."""
    engine = XlaGuardEngine(profile_epochs=(), verbose=0)
    assert exit_reason(engine) == "Written while training was still running."
    engine.train_begin(epochs=2)
    engine.epoch_begin(1)
    assert exit_reason(engine) == "Written while training was still running (epoch 1)."
    engine.epoch_end(1)
    engine.train_end()
    assert exit_reason(engine) == "Training ran to its end."
