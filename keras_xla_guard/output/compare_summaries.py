"""TensorBoard output of `compare`: per-mode scalars, the verdict, the saved result.

`compare` (in process or one process per mode) writes here, beside the
guard's own runs in the same log dir; the guard's HTML report reads the
saved result back (`output.runfile.find_compare`). TensorFlow is imported
only when a writer is created.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from keras_xla_guard.comparison.report import CompareReport
from keras_xla_guard.output.runfile import COMPARE_FILE
from keras_xla_guard.output.tensorboard import SummaryWriter
from keras_xla_guard.output.tensorboard_markdown import escape_markdown, markdown_table
from keras_xla_guard.trace.xplane import COMPARE_SUBDIR

__all__ = ["COMPARE_SUBDIR", "write_summaries"]


def write_summaries(report: CompareReport, log_dir: str | os.PathLike[str]) -> Path:
    """Writes the comparison to TensorBoard beside the guard's runs.

    One run per mode, `<log_dir>/compare/<mode>`, holds that mode's
    figures as scalars under `xla_guard/compare/` (the per-step loss and
    step time at their step; the rest at step 0), so TensorBoard overlays
    the modes; `<log_dir>/compare` holds the verdict and the figures table
    as text (`xla_guard/compare/verdict`), and the whole report as
    `compare_report.json`, which the guard's HTML report shows.

    Args:
        report: The report.
        log_dir: The guard's log dir.

    Returns:
        The `<log_dir>/compare` directory.
    """
    root = Path(log_dir) / COMPARE_SUBDIR
    for name, figures in report.modes.items():
        writer = SummaryWriter(root / name)
        try:
            writer.write_scalars(
                {
                    "compare/step_time_s": figures.step_time_s,
                    "compare/compilations": figures.compilations,
                    "compare/compile_time_s": figures.compile_time_s,
                    "compare/startup_s": figures.startup_s,
                    "compare/distinct_signatures": figures.distinct_signatures,
                    "compare/projected_run_s": report.projected_run_s[name],
                    "compare/final_loss": figures.final_loss,
                    **(
                        {}
                        if figures.peak_memory_bytes is None
                        else {"compare/peak_memory_bytes": figures.peak_memory_bytes}
                    ),
                },
                step=0,
            )
            for step, (loss, seconds) in enumerate(zip(figures.losses, figures.step_times_s)):
                writer.write_scalars({"compare/loss": loss, "compare/step_time_ms": seconds * 1e3}, step=step)
        finally:
            writer.close()
    rows = [
        (
            name,
            f"{f.step_time_s * 1e3:.3f}",
            f.compilations,
            f"{f.compile_time_s:.3f}",
            f.distinct_signatures,
            f"{report.projected_run_s[name]:.3f}",
            f"{f.final_loss:.6g}",
        )
        for name, f in report.modes.items()
    ]
    table = markdown_table(
        ("mode", "step ms", "compilations", "compile s", "signatures", "projected run s", "final loss"), rows
    )
    writer = SummaryWriter(root)
    try:
        writer.write_text("compare/verdict", f"**{escape_markdown(report.verdict)}**\n\n{table}", step=0)
    finally:
        writer.close()
    # The whole result, for the guard's HTML report (`output.runfile.find_compare`).
    (root / COMPARE_FILE).write_text(json.dumps(report.to_dict(), indent=1), encoding="utf-8")
    return root
