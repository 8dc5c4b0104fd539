"""Every figure of a report shows the same number in the console, TensorBoard, JSON and HTML.

One source, asserted (issue 29, item 4): a report goes through the sinks a
guard uses (`ConsoleSink`, `TensorBoardSink`, `RunFileSink`) and the HTML
page is rendered from the run file, as `report --html` does; each output
is then read back on its own terms - the console text by its labels, the
TensorBoard event file with TensorBoard's `EventAccumulator`, the run
file's JSON, the page's `data-field`/`data-value` cells - and every figure
must equal the report's own value (float32 in TensorBoard, the text
formats' rounding in the console and the page's shown text). The CLI's
table is checked against its `--json` the same way.

Reports: a real fit's (the `jit_fit` and `plain_fit` session fits: host
times, no device figures), a synthetic raw GPU trace's (device times,
transfers, collectives, one program, ops inside XLA and two trace quality
entries; `tests/_gpu_trace.py`) and a two-GPU trace's, whose totals are
labelled as summed over its devices and whose per-device figures every
output shows (`tests/_gpu_shapes.py`).
"""

from __future__ import annotations

import io
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from _gpu_trace import collective_fit
from _html import read_page

from keras_xla_guard import CoverageReport, analyze_trace
from keras_xla_guard.output.console import ConsoleSink
from keras_xla_guard.output.html import render_html
from keras_xla_guard.output.runfile import RunFileSink, read_run_file
from keras_xla_guard.output.table import format_ms
from keras_xla_guard.output.tensorboard import TensorBoardSink
from keras_xla_guard.runtime.sink import EpochRecord

# Every scalar figure of a measured report, and how the console prints it.
_PERCENT, _MS, _COUNT = "percent", "ms", "count"
FIGURES = {
    "xla_time_fraction": _PERCENT,
    "xla_time_s": _MS,
    "non_xla_op_time_s": _MS,
    "xla_executions": _COUNT,
    "compilations": _COUNT,
    "compile_time_s": _MS,
    "compile_thread_time_s": _MS,
    "input_pipeline_time_s": _MS,
    "transfer_time_s": _MS,
    "collective_time_s": _MS,
    "xla_run_span_s": _MS,
}
# The console's line for each figure: a regex whose named group is the shown value.
_CONSOLE = {
    "xla_time_fraction": r"XLA coverage \(.*\): (?P<v>[\d.]+%) of op time ran inside XLA",
    "xla_time_s": r"  XLA executables: +(?P<v>[\d.]+ ms)  \(\d+ launches\)",
    "xla_executions": r"  XLA executables: +[\d.]+ ms  \((?P<v>\d+) launches\)",
    "non_xla_op_time_s": r"  plain TF ops: +(?P<v>[\d.]+ ms)",
    "compilations": r"  XLA compilations: +(?P<v>\d+) ",
    "compile_time_s": r"  XLA compilations: +\d+ +\((?P<v>[\d.]+ ms) wall-clock, ",
    "compile_thread_time_s": r"  XLA compilations: .*, (?P<v>[\d.]+ ms) summed over threads\)",
    "input_pipeline_time_s": r"  input pipeline: +(?P<v>[\d.]+ ms)",
    "transfer_time_s": r"  device transfers: +(?P<v>[\d.]+ ms)  \(memcpy/memset, not counted\)",
    "collective_time_s": r"  collectives: +(?P<v>[\d.]+ ms)  \(XLA time inside programs, not counted outside\)",
    "xla_run_span_s": r"  XLA run spans: +(?P<v>[\d.]+ ms)  \(first to last kernel of each run",
}
_PROGRAM_LINE = re.compile(r"^ +(?P<time>[\d.]+ ms)  x(?P<runs>\d+) +program (?P<program>\S+)")
_QUALITY_LINE = re.compile(r"^    (?P<code>[a-z_]+): (?P<detail>.+)$")


def _shown(kind: str, value: Any) -> str:
    if kind == _PERCENT:
        return f"{100 * value:.1f}%"
    if kind == _MS:
        return format_ms(value)
    return str(value)


def _console_figures(text: str) -> dict[str, str]:
    """Figure -> the text the console shows for it (absent when it shows none)."""
    found = {}
    for name, pattern in _CONSOLE.items():
        matches = re.findall(pattern, text, flags=re.MULTILINE)
        assert len(matches) <= 1, (name, matches)
        if matches:
            found[name] = matches[0]
    return found


def _tensorboard(log_dir: Path) -> tuple[dict[str, dict[int, float]], dict[str, dict[int, str]]]:
    """The run's scalars and texts, tag -> step -> value, as TensorBoard reads its event files."""
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.util import tensor_util

    acc = ea.EventAccumulator(str(log_dir), size_guidance={ea.TENSORS: 0})
    acc.Reload()
    scalars: dict[str, dict[int, float]] = {}
    texts: dict[str, dict[int, str]] = {}
    for tag in acc.Tags()["tensors"]:
        plugin = acc.SummaryMetadata(tag).plugin_data.plugin_name
        values = {e.step: tensor_util.make_ndarray(e.tensor_proto) for e in acc.Tensors(tag)}
        if plugin == "scalars":
            scalars[tag] = {step: float(v.item()) for step, v in values.items()}
        elif plugin == "text":
            texts[tag] = {step: v.item().decode() for step, v in values.items()}
    return scalars, texts


def _write_outputs(reports: dict[int, CoverageReport], log_dir: Path) -> str:
    """Runs the guard's sinks over `reports`; returns the console text."""
    records = {epoch: EpochRecord(epoch, report) for epoch, report in reports.items()}
    stream = io.StringIO()
    sinks = [TensorBoardSink(log_dir), RunFileSink(log_dir), ConsoleSink(stream=stream)]
    for sink in sinks:
        for record in records.values():
            sink.write_epoch(record)
        sink.close(records)
    return stream.getvalue()


def assert_outputs_agree(reports: dict[int, CoverageReport], log_dir: Path, console: str) -> None:
    """Every figure of every ok report: the same in the console, TensorBoard, JSON and HTML."""
    run = read_run_file(log_dir)
    page = read_page(render_html([run], exit_reason="done"))
    scalars, texts = _tensorboard(log_dir)
    blocks = {
        int(m.group(1)): m.group(0)
        for m in re.finditer(
            r"keras-xla-guard: XLA coverage \(epoch (\d+)[^\n]*(?:\n(?!keras-xla-guard: ).*)*", console
        )
    }
    saved = {r["epoch"]: r for r in run.reports}
    assert sorted(saved) == sorted(reports)
    for epoch, report in reports.items():
        assert report.ok
        source = report.to_dict()
        shown = _console_figures(blocks[epoch])
        for name, kind in FIGURES.items():
            value = source[name]
            # JSON: the run file holds the report's own value, exactly.
            assert saved[epoch][name] == value, (epoch, name)
            # HTML: the exact value in data-value, the shown text its rounding.
            cell = [v for v in page.values if v.field == name and v.row.get("data-epoch") == str(epoch)]
            assert [c.value for c in cell] == [value], (epoch, name)
            if value is None:
                assert name not in shown and f"xla_guard/{name}" not in scalars, (epoch, name)
                assert cell[0].text == "-"
                continue
            if name == "collective_time_s" and not value:
                # The console names collectives only when there were some.
                shown[name] = _shown(kind, value)
            html_text = (
                f"{100 * value:.1f}%"
                if kind == _PERCENT
                else format_ms(value, 2)
                if kind == _MS
                else str(value)
            )
            assert cell[0].text == html_text, (epoch, name)
            assert shown[name] == _shown(kind, value), (epoch, name)
            # TensorBoard stores float32.
            assert math.isclose(scalars[f"xla_guard/{name}"][epoch], value, rel_tol=1e-6, abs_tol=1e-9), (
                epoch,
                name,
            )
        programs = [_PROGRAM_LINE.match(line) for line in blocks[epoch].splitlines()]
        assert [(m["program"], m["time"], int(m["runs"])) for m in programs if m] == [
            (p.program, format_ms(p.time_s), p.runs) for p in report.programs
        ][:3]
        assert saved[epoch]["programs"] == source["programs"]
        _assert_xla_ops_and_quality_agree(
            report, saved[epoch], blocks[epoch], texts["xla_guard/report"][epoch], page
        )
        for p in report.programs:
            assert page.value("time_s", **{"data-program": p.program, "data-report": "0"}) == p.time_s
            assert page.value("runs", **{"data-program": p.program, "data-report": "0"}) == p.runs
            tb = scalars[f"xla_guard/program/{p.program}/time_s"][epoch]
            assert math.isclose(tb, p.time_s, rel_tol=1e-6)
            assert scalars[f"xla_guard/program/{p.program}/runs"][epoch] == p.runs


def _assert_xla_ops_and_quality_agree(
    report: CoverageReport, saved: dict[str, Any], console: str, markdown: str, page: Any
) -> None:
    """The top ops inside XLA and the trace quality entries: the same in every output."""
    source = report.to_dict()
    assert saved["top_xla_ops"] == source["top_xla_ops"]
    assert saved["trace_quality"] == source["trace_quality"]
    rows = [(v.row["data-rank"], v.field, v.value) for v in page.values if v.row.get("class") == "xla-op"]
    assert rows == [
        (str(n), f, getattr(op, "self_time_s" if f == "self_time_s" else "count"))
        for n, op in enumerate(report.top_xla_ops, 1)
        for f in ("self_time_s", "count")
    ]
    shown = (
        console.split("  top ops inside XLA (device time):\n", 1)[1].splitlines()
        if report.top_xla_ops
        else []
    )
    for line, op in zip(shown, report.top_xla_ops[:3]):
        assert line.split() == [*format_ms(op.self_time_s).split(), f"x{op.count}", op.op_type, op.op_name]
    codes = [m["code"] for m in map(_QUALITY_LINE.match, console.splitlines()) if m]
    assert codes == [q.code for q in report.trace_quality]
    assert [a["data-code"] for tag, a in page.tags if tag == "li" and a.get("class") == "quality"] == codes
    from keras_xla_guard.output.tensorboard_markdown import escape_markdown

    for q in report.trace_quality:
        assert f"- **{escape_markdown(q.code)}**: {escape_markdown(q.detail)}." in markdown


@pytest.fixture(scope="module")
def gpu_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, CoverageReport]:
    """A synthetic raw GPU trace of 6 steps with collectives and dropped events, its report as epoch 0."""
    trace = collective_fit(6)
    trace.space.warnings.append(
        "Detected GPU events dropped on gpu-host: 7 events dropped because total "
        "device(activity) events reaches max."
    )
    path = trace.write(tmp_path_factory.mktemp("gpu") / "gpu.xplane.pb")
    report = analyze_trace(path)
    return path, CoverageReport.from_dict({**report.to_dict(), "epoch": 0, "steps_profiled": 6})


@pytest.mark.tf
def test_gpu_report_shows_the_same_figures_everywhere(tmp_path, gpu_report):
    """Device report: collectives, ops inside XLA, trace quality and the program's time agree everywhere."""
    _, report = gpu_report
    assert (
        report.collective_time_s and report.programs and report.top_xla_ops and report.time_base == "device"
    )
    assert [q.code for q in report.trace_quality] == ["collectives", "events_dropped"]
    console = _write_outputs({0: report}, tmp_path)
    assert_outputs_agree({0: report}, tmp_path, console)


@pytest.mark.tf
def test_the_check_catches_an_output_that_drifts(tmp_path, gpu_report):
    """A run file whose collective time differs from what TensorBoard got fails the check."""
    _, report = gpu_report
    console = _write_outputs({0: report}, tmp_path)
    data = json.loads((tmp_path / "xla_guard_reports.json").read_text())
    data["reports"]["0"]["collective_time_s"] *= 2
    (tmp_path / "xla_guard_reports.json").write_text(json.dumps(data))
    with pytest.raises(AssertionError):
        assert_outputs_agree({0: report}, tmp_path, console)


def _table_cells(out: str) -> dict[str, str]:
    """The one data row of `report`'s table, by column title."""
    lines = [
        line for line in out.splitlines() if not line.startswith(("run summary (", "compilations of the"))
    ]
    header, row = lines[:2]
    starts = [m.start() for m in re.finditer(r"\S+(?: \S+)*", header)]
    titles = [header[a:b].strip() for a, b in zip(starts, [*starts[1:], None])]
    # Right-aligned numbers end where their title ends; split the row on runs of 2+ spaces.
    cells = re.split(r" {2,}", row.strip())
    assert len(cells) == len(titles), (titles, cells)
    return dict(zip(titles, cells))


def test_cli_table_shows_what_its_json_says(capsys, gpu_report):
    """`report`'s table cells are its `--json` figures, transfers and thread-summed compile time too."""
    from keras_xla_guard.cli import main

    path, _ = gpu_report
    assert main(["report", str(path), "--json"]) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    doc = run["combined"]
    assert main(["report", str(path)]) == 0
    cells = _table_cells(capsys.readouterr().out)
    assert cells["XLA share"] == f"{100 * doc['xla_time_fraction']:.1f}%"
    assert cells["XLA time"] == format_ms(doc["xla_time_s"])
    assert cells["plain ops"] == format_ms(doc["non_xla_op_time_s"])
    assert cells["launches"] == str(doc["xla_executions"])
    assert cells["compile time"] == format_ms(doc["compile_time_s"])
    assert cells["compile, summed over threads"] == format_ms(doc["compile_thread_time_s"])
    assert cells["device transfers"] == format_ms(doc["transfer_time_s"]) == "0.0 ms"


@pytest.mark.slow
def test_real_fits_show_the_same_figures_everywhere(tmp_path, jit_fit, plain_fit):
    """The guard's own reports of real fits: every figure the same in all four outputs."""
    for fit, name in ((jit_fit, "jit"), (plain_fit, "plain")):
        reports = {epoch: r for epoch, r in fit.callback.reports.items() if r.ok}
        assert reports, name
        # The fit's own event file and run file, and the console text its sink prints.
        stream = io.StringIO()
        ConsoleSink(stream=stream).close({e: EpochRecord(e, r) for e, r in reports.items()})
        assert_outputs_agree(reports, fit.log_dir, stream.getvalue())


_DEVICE_LINE = re.compile(
    r"^    (?P<device>\S+) +(?P<share>[\d.]+%) +(?P<xla>[\d.]+ ms) +(?P<span>[\d.]+ ms) +(?P<op>[\d.]+ ms) "
    r"+(?P<launches>\d+) +(?P<transfers>[\d.]+ ms)$"
)


@pytest.mark.tf
def test_a_two_gpu_reports_totals_and_devices_are_the_same_everywhere(tmp_path):
    """Totals labelled "summed over 2 devices" and each device's XLA time, share, launches and transfers:
    the same in the console, the run file's JSON, TensorBoard's text and scalars, and the HTML page."""
    from _gpu_shapes import SHAPES

    from keras_xla_guard.output.tensorboard_metadata import DEVICE_TAG

    path = SHAPES["two_gpus"].build().write(tmp_path / "two.xplane.pb")
    report = CoverageReport.from_dict({**analyze_trace(path).to_dict(), "epoch": 0, "steps_profiled": 6})
    assert report.totals_label == "summed over 2 devices" and len(report.devices) == 2
    log_dir = tmp_path / "logs"
    console = _write_outputs({0: report}, log_dir)
    assert_outputs_agree({0: report}, log_dir, console)
    run = read_run_file(log_dir)
    page = read_page(render_html([run], exit_reason="done"))
    scalars, texts = _tensorboard(log_dir)
    (saved,) = run.reports
    assert saved["totals"] == "summed over 2 devices"
    assert saved["devices"] == [d.to_dict() for d in report.devices]
    assert "summed over 2 devices" in console.splitlines()[0]
    assert "summed over 2 devices" in texts["xla_guard/report"][0]
    assert any("epoch 0 (summed over 2 devices)" in text for _, text in page.cells)
    shown = {m["device"]: m for m in map(_DEVICE_LINE.match, console.splitlines()) if m}
    for d in report.devices:
        line = shown[d.device]
        assert (line["share"], line["xla"], line["launches"]) == (
            f"{100 * d.xla_time_fraction:.1f}%",
            format_ms(d.xla_time_s, 2),
            str(d.launches),
        )
        # TensorBoard's per-device table: the device's row starts with its name.
        share = f"{100 * d.xla_time_fraction:.1f}%".replace(".", "&#46;")
        assert (
            f"| {d.device} | {share} | {f'{d.xla_time_s * 1e3:.3f}'.replace('.', '&#46;')} |"
            in (texts["xla_guard/report"][0])
        )
        for figure in ("xla_time_s", "xla_time_fraction", "launches", "transfer_time_s"):
            tag = DEVICE_TAG.format(device=d.device.lstrip("/"), figure=figure)
            assert math.isclose(scalars[tag][0], getattr(d, figure), rel_tol=1e-6, abs_tol=1e-12), tag
            if figure != "xla_time_fraction":
                assert page.value(figure, **{"data-device": d.device, "data-report": "0"}) == getattr(
                    d, figure
                )
        assert page.value("xla_time_fraction", **{"data-device": d.device}) == d.xla_time_fraction
    assert sum(d.xla_time_s for d in report.devices) == pytest.approx(report.xla_time_s, rel=1e-12)
    assert sum(d.launches for d in report.devices) == report.xla_executions
