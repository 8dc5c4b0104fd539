"""A JAX run's run file, HTML page and `report` command, in a venv without TensorFlow."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from _helpers import REPO
from _jax_helpers import PROFILED
from tensorboard_server import HtmlTables

from keras_xla_guard.output.runfile import read_run_file
from keras_xla_guard.trace._text import JAX_COVERAGE_NOTE

pytestmark = pytest.mark.slow


def test_the_run_file_keeps_every_epochs_counted_compilations(guarded):
    """The run file read back holds each epoch's compilations exactly as the guard counted them."""
    data = read_run_file(guarded.log_dir)
    counted = guarded.guard.compilations
    assert list(data.compilations) == [counted[e].to_dict() for e in sorted(counted)]
    assert [r["backend"] for r in data.reports] == ["jax"]


def test_the_html_page_shows_windows_as_busy_time_and_every_compilation(guarded, tmp_path):
    """The page's window table is the JAX one (busy share, no coverage), with the reason once; every compilation listed."""
    page = HtmlTables(guarded.guard.write_html(tmp_path / "page.html").read_text())
    text = page.visible_text
    assert "XLA programs per profiled window (JAX)" in text and "XLA coverage per profiled epoch" not in text
    assert text.count(JAX_COVERAGE_NOTE[1:]) == 1
    header = next(row for row in page.rows if row and row[0] == "window")
    assert header == [
        "window",
        "busy",
        "program time",
        "host between programs",
        "launches",
        "compilations",
        "steps",
    ]
    # The model's functions have a row each; the small programs Keras compiled besides (eager
    # ops: as many as this process had not compiled before the fit) are counted in one line.
    rows = [row for c in guarded.guard.compilations.values() for row in c.rows]
    listed = [row for row in page.rows if len(row) == 9 and row[1] in ("train", "test", "predict", "other")]
    assert len(listed) == sum(1 for row in rows if row.function != "other")
    others = sum(1 for row in rows if row.function == "other")
    assert (f"Not listed: {others} small program(s)" in text) == (others > 0)
    assert [row[2] for row in listed if row[1] == "train"][:1] == ["train_step"]


def test_report_reads_the_jax_run_without_tensorflow(guarded, tmp_path):
    """`keras-xla-guard report <log dir> --html` on the JAX run: exit 0, the window listed, the page written."""
    cli = Path(sys.executable).with_name("keras-xla-guard")
    html = tmp_path / "report.html"
    done = subprocess.run(
        [str(cli), "report", str(guarded.log_dir), "--html", str(html)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env=dict(os.environ),
    )
    assert done.returncode == 0, done.stderr
    assert f"epoch{PROFILED}" in done.stdout
    assert "XLA programs per profiled window (JAX)" in HtmlTables(html.read_text()).visible_text
