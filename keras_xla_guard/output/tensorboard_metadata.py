"""TensorBoard's tags and layout for the guard: what the writer writes and any reader looks up.

Like the `metadata.py` of TensorBoard's own plugins, this module is shared
by the writer (`output.tensorboard`) and whatever reads the summaries back
(tests, a dashboard script): every tag's name, how each scalar is read
from a report, and the Custom Scalars layout of the "XLA Guard" category.
It imports nothing from TensorBoard until a layout is built.
"""

from __future__ import annotations

import re
from typing import Any

from keras_xla_guard.trace.report import CoverageReport

__all__ = [
    "DEVICE_FIGURES",
    "DEVICE_TAG",
    "DEVICE_TAGS",
    "JAX_SKIPPED_TAGS",
    "LAYOUT_CATEGORY",
    "PREFIX",
    "PROGRAM_TAG",
    "SCALAR_TAGS",
    "SIGNATURE_TAGS",
    "WORKER_SIGNATURE_FIGURES",
    "WORKER_TAGS",
    "device_names",
    "layout_proto",
]

# Every tag's first part, and the Custom Scalars category of the guard's charts.
PREFIX = "xla_guard"
LAYOUT_CATEGORY = "XLA Guard"
# Tag -> how to read it from a report. The step of every point is the epoch.
SCALAR_TAGS: dict[str, Any] = {
    f"{PREFIX}/xla_time_fraction": lambda r: r.xla_time_fraction,
    f"{PREFIX}/coverage_percent": lambda r: 100.0 * r.xla_time_fraction,
    f"{PREFIX}/xla_time_s": lambda r: r.xla_time_s,
    f"{PREFIX}/non_xla_op_time_s": lambda r: r.non_xla_op_time_s,
    f"{PREFIX}/xla_executions": lambda r: r.xla_executions,
    f"{PREFIX}/compilations": lambda r: r.compilations,
    f"{PREFIX}/compile_time_s": lambda r: r.compile_time_s,
    f"{PREFIX}/compile_thread_time_s": lambda r: r.compile_thread_time_s,
    f"{PREFIX}/input_pipeline_time_s": lambda r: r.input_pipeline_time_s,
}
# Figures only device traces have (`None` on host traces): written when set.
DEVICE_TAGS: dict[str, Any] = {
    f"{PREFIX}/transfer_time_s": lambda r: r.transfer_time_s,
    f"{PREFIX}/collective_time_s": lambda r: r.collective_time_s,
    f"{PREFIX}/xla_run_span_s": lambda r: r.xla_run_span_s,
}
# Each device's figures (`DEVICE_FIGURES`) when a report sums several: `DEVICE_TAG.format(device=...,
# figure=...)`, `device` its `device_names` name without its slash (`device:GPU:1`, `<host>/device:GPU:1`).
DEVICE_TAG = PREFIX + "/device/{device}/{figure}"
DEVICE_FIGURES = ("xla_time_s", "xla_time_fraction", "launches", "transfer_time_s")
# Each XLA program's device time: `PROGRAM_TAG.format(program=..., figure="time_s"|"runs")`.
PROGRAM_TAG = PREFIX + "/program/{program}/{figure}"
# Under JAX every step is one XLA program: the coverage tags would read 100%
# (or 0 s of plain ops) by construction, so a JAX window does not write them.
JAX_SKIPPED_TAGS = frozenset(
    f"{PREFIX}/{t}" for t in ("xla_time_fraction", "coverage_percent", "non_xla_op_time_s")
)
# Tag suffix -> how to read it from an epoch's `EpochSignatures`; written for
# every epoch with observed steps (`expected_compilations` only under XLA).
# A test or predict call writes the same figures under its kind:
# `validation/...` at its epoch, `evaluate/...` and `predict/...` at its
# call number (`CallRecord.kind` names the prefix).
SIGNATURE_TAGS: dict[str, Any] = {
    "distinct_signatures": lambda s: s.distinct_signatures,
    "new_signatures": lambda s: s.new_signatures,
    "expected_compilations": lambda s: s.expected_compilations,
}
# Tag suffix -> how to read it from a worker's report; a multi-worker chief
# writes them under `xla_guard/<worker>/...` and combined under `xla_guard/...`
# (`write_worker_summaries`).
WORKER_TAGS: dict[str, Any] = {
    "xla_time_fraction": lambda r: r.xla_time_fraction,
    "coverage_percent": lambda r: 100.0 * r.xla_time_fraction,
    "xla_time_s": lambda r: r.xla_time_s,
    "non_xla_op_time_s": lambda r: r.non_xla_op_time_s,
    "compilations": lambda r: r.compilations,
    "compile_time_s": lambda r: r.compile_time_s,
}
# Signature figures a chief writes per worker, and their largest combined.
WORKER_SIGNATURE_FIGURES = ("distinct_signatures", "new_signatures")


def device_names(report: CoverageReport) -> list[str]:
    """Each device's name, with its host where the devices come from several hosts."""
    several = len({d.host for d in report.devices}) > 1
    return [f"{d.host}{d.device}" if several and d.host else d.device for d in report.devices]


def layout_proto(counted_compilations: bool = False) -> Any:
    """Builds the Custom Scalars layout of the "XLA Guard" category.

    Args:
        counted_compilations: The run counts its compilations as they happen
            (JAX): charts of them per function replace the coverage charts,
            which read 100% by construction there. Defaults to `False`.

    Returns:
        A `tensorboard.plugins.custom_scalar.layout_pb2.Layout`.
    """
    from tensorboard.plugins.custom_scalar import layout_pb2

    def chart(title: str, *tags: str) -> Any:
        return layout_pb2.Chart(
            title=title,
            multiline=layout_pb2.MultilineChartContent(
                tag=[f"^{re.escape(PREFIX + '/' + t)}$" for t in tags]
            ),
        )

    # Measured compilations beside the signature tracker's prediction: a
    # gap means shapes are not the only cause.
    signatures = chart(
        "Compilations vs new signatures", "compilations", "expected_compilations", "new_signatures"
    )
    if counted_compilations:
        functions = ("train", "test", "predict", "warm_up", "other")
        charts = [
            chart("Compilations per function", *(f"{f}/compilations" for f in functions)),
            chart("Compile time per function (s)", *(f"{f}/compile_time_s" for f in functions)),
            signatures,
            chart("XLA program time in the window (s)", "xla_time_s"),
        ]
    else:
        charts = [
            chart("XLA coverage (%)", "coverage_percent"),
            chart("XLA vs non-XLA op time (s)", "xla_time_s", "non_xla_op_time_s"),
            signatures,
            # The test function compiles on its own: the validation's
            # compilations beside the train function's, per epoch.
            chart(
                "Expected compilations: train vs validation",
                "expected_compilations",
                "validation/expected_compilations",
            ),
            chart(
                "Compile time (s): wall-clock, and summed over threads",
                "compile_time_s",
                "compile_thread_time_s",
            ),
            chart("Input pipeline time (s)", "input_pipeline_time_s"),
            chart("Device transfers and collectives (s)", "transfer_time_s", "collective_time_s"),
        ]
    return layout_pb2.Layout(category=[layout_pb2.Category(title=LAYOUT_CATEGORY, chart=charts)])
