"""`CoverageReport` and `OpStat`: the JSON round trip of a report, and its measured figures."""

from __future__ import annotations

import dataclasses
import json

import pytest

from keras_xla_guard import CoverageReport, Explanation, MeasuredFigures, OpStat


def _report() -> CoverageReport:
    return CoverageReport(
        epoch=3,
        steps_profiled=4,
        trace_paths=("a/h.xplane.pb",),
        hosts=("h",),
        xla_time_s=0.3,
        non_xla_op_time_s=0.1,
        xla_time_fraction=0.75,
        xla_executions=4,
        compiled_modules=("m",),
        notes=("n",),
        distinct_signatures=1,
        new_signatures=0,
        top_non_xla_ops=(OpStat("CollectiveReduceV2", "CollectiveReduceV2", 0.1, 4),),
        signature_explanations=(
            Explanation("dim_varied", "x dim 1 took 3 values", "warning", "x", 1, (5, 7, 9), 2, "pad()"),
        ),
    )


def test_report_survives_the_json_round_trip():
    """A report read back from its to_dict() JSON equals the one written, tuples and op table included."""
    report = _report()
    assert CoverageReport.from_dict(json.loads(json.dumps(report.to_dict()))) == report


def test_from_dict_refuses_a_malformed_op_table():
    """An op entry without the OpStat fields is a ValueError quoting the data."""
    data = _report().to_dict()
    data["top_non_xla_ops"] = [{"op_type": "MatMul"}]
    with pytest.raises(ValueError, match=r"top_non_xla_ops.*Received: data="):
        CoverageReport.from_dict(data)


def test_report_read_back_writes_the_same_json():
    """A report rebuilt from JSON holds Explanation objects again, so its own to_dict() works and matches."""
    data = json.loads(json.dumps(_report().to_dict()))
    again = CoverageReport.from_dict(data)
    assert isinstance(again.signature_explanations[0], Explanation)
    assert again.to_dict() == data


def test_from_dict_refuses_a_malformed_explanation():
    """An explanation entry with unknown keys is a ValueError quoting it."""
    data = _report().to_dict()
    data["signature_explanations"] = [{"kind": "dim_varied", "oops": 1}]
    with pytest.raises(ValueError, match=r"Explanation.to_dict.*Received: data="):
        CoverageReport.from_dict(data)


def test_a_report_saved_before_eager_op_time_reads_it_as_unmeasured():
    """A saved report without `eager_op_time_s` (older versions) reads it as None, not 0; a saved 0 stays 0."""
    saved = CoverageReport(
        xla_time_s=0.9, non_xla_op_time_s=0.1, xla_time_fraction=0.9, eager_op_time_s=0.0
    ).to_dict()
    assert CoverageReport.from_dict(saved).eager_op_time_s == 0.0
    del saved["eager_op_time_s"]
    older = CoverageReport.from_dict(saved)
    assert (older.eager_op_time_s, older.xla_time_s) == (None, 0.9)


def test_from_dict_refuses_what_is_not_a_dict():
    """Anything but a dict is a ValueError quoting it."""
    with pytest.raises(ValueError) as raised:
        CoverageReport.from_dict([1])
    assert str(raised.value) == "`data` must be a dict from CoverageReport.to_dict(). Received: data=[1]"


_TRACE_FIGURES = (
    "xla_time_s",
    "non_xla_op_time_s",
    "xla_time_fraction",
    "xla_executions",
    "compilations",
    "compile_time_s",
    "compile_thread_time_s",
    "input_pipeline_time_s",
    "eager_overhead_s",
    "eager_op_time_s",
    "tracing_time_s",
    "guard_op_time_s",
    "transfer_time_s",
)


@pytest.mark.parametrize("status", ["skipped", "failed"])
def test_a_report_that_measured_nothing_writes_null_figures(status):
    """A skipped or failed report's JSON has None, not 0, for every trace figure; its signature figures stay."""
    report = CoverageReport(
        status=status, reason="not profiled: chief only", epoch=1, distinct_signatures=2, new_signatures=1
    )
    d = report.to_dict()
    for key in _TRACE_FIGURES:
        assert d[key] is None, key
    assert (d["status"], d["reason"], d["distinct_signatures"], d["new_signatures"]) == (
        status,
        "not profiled: chief only",
        2,
        1,
    )
    assert CoverageReport.from_dict(json.loads(json.dumps(d))) == report


@pytest.mark.parametrize("status", ["skipped", "failed"])
def test_a_report_that_measured_nothing_has_none_figures_in_python(status):
    """The Python fields of a report that is not ok are None too, even when given a number."""
    report = CoverageReport(status=status, reason="x", xla_time_s=1.0, xla_time_fraction=0.5, compilations=3)
    assert [getattr(report, key) for key in _TRACE_FIGURES] == [None] * len(_TRACE_FIGURES)
    ok = CoverageReport(xla_time_s=1.0, xla_time_fraction=0.5, compilations=3)
    assert (ok.xla_time_s, ok.xla_time_fraction, ok.compilations, ok.non_xla_op_time_s) == (1.0, 0.5, 3, 0.0)


@pytest.mark.parametrize("status", ["skipped", "failed"])
def test_a_report_that_measured_nothing_has_empty_trace_tables(status):
    """Programs, devices, XLA ops and trace-quality entries of a report that is not ok are empty, its
    steps unknown (`None`), even when given."""
    from keras_xla_guard.trace.report import DeviceStat, ProgramStat, StepStat, TraceQuality

    tables = {
        "programs": (ProgramStat("m(1)", 2, 1.0),),
        "devices": (DeviceStat("/device:GPU:0", None, 1.0, 1.5, 0.0, 1.0, 2, 0.0, 0.0),),
        "top_xla_ops": (OpStat("fusion", "m", 1.0, 2),),
        "steps": (StepStat(1, 1.0, 0.5, 0.5, 1),),
        "trace_quality": (TraceQuality("profiler_errors", "d", "c", "r"),),
    }
    report = CoverageReport(status=status, reason="x", xla_run_span_s=1.5, **tables)
    assert {name: getattr(report, name) for name in tables} == {**dict.fromkeys(tables, ()), "steps": None}
    assert report.xla_run_span_s is None
    assert {name: getattr(CoverageReport(**tables), name) for name in tables} == tables


def test_measured_gives_an_ok_reports_figures():
    """measured() returns the seven figures every ok report holds, exactly as the report has them."""
    figures = _report().measured()
    assert figures == MeasuredFigures(
        xla_time_fraction=0.75,
        xla_time_s=0.3,
        non_xla_op_time_s=0.1,
        xla_executions=4,
        compilations=0,
        compile_time_s=0.0,
        input_pipeline_time_s=0.0,
    )


@pytest.mark.parametrize("status", ["skipped", "failed", "incomplete"])
def test_measured_refuses_a_report_that_measured_nothing(status):
    """A report that is not ok has no figures to give: a ValueError quoting its status and reason."""
    report = CoverageReport(status=status, reason="not profiled: chief only")
    with pytest.raises(ValueError, match=f"status='{status}', reason='not profiled: chief only'"):
        report.measured()


def test_measured_refuses_an_ok_report_built_without_a_figure():
    """An ok report constructed with None for a measured figure is a ValueError naming the figure."""
    with pytest.raises(ValueError, match="Received: compilations=None"):
        CoverageReport(compilations=None).measured()


def _full_report() -> CoverageReport:
    """A report with every tuple field filled (device figures, steps, quality, compile rows)."""
    from keras_xla_guard.trace.compiles import CompileRecord
    from keras_xla_guard.trace.report import ProgramStat, StepStat, TraceQuality

    return dataclasses.replace(
        _report(),
        backend="tensorflow",
        hosts=("h", "g"),
        programs=(ProgramStat("jit_a(1)", 3, 0.2), ProgramStat("jit_b(2)", 1, 0.1, per_op=False)),
        top_xla_ops=(OpStat("fusion", "fusion.1", 0.2, 3),),
        steps=(StepStat(0, 0.1, 0.08, 0.02, 1, 0.001), StepStat(1, 0.1, 0.07, 0.03, 2)),
        trace_quality=(TraceQuality("no_step_markers", "d", "c", "r"),),
        compile_table=(
            CompileRecord("p", "m", 0.5, 0.25, False, 0, "x: float32[2]"),
            CompileRecord("q", cache_hit=True),
        ),
        cache_hits=1,
        persistent_cache="/tmp/c",
    )


def test_a_full_report_survives_the_json_round_trip_as_equal_tuples_of_its_types():
    """Programs, XLA ops, steps, quality and compile rows come back as tuples of their own types, equal."""
    report = _full_report()
    again = CoverageReport.from_dict(json.loads(json.dumps(report.to_dict())))
    assert again == report
    assert [type(x).__name__ for x in (again.programs[0], again.steps[0], again.compile_table[0])] == [
        "ProgramStat",
        "StepStat",
        "CompileRecord",
    ]
    assert (again.trace_paths, again.hosts, again.compiled_modules, again.notes) == (
        ("a/h.xplane.pb",),
        ("h", "g"),
        ("m",),
        ("n",),
    )


def test_from_dict_of_an_empty_dict_is_the_default_report():
    """No keys: every field at its default, the tables empty tuples."""
    assert CoverageReport.from_dict({}) == CoverageReport()


@pytest.mark.parametrize(
    ("key", "what", "cls"),
    [
        ("top_non_xla_ops", "op", "OpStat"),
        ("top_xla_ops", "op", "OpStat"),
        ("steps", "step", "StepStat"),
        ("trace_quality", "entry", "TraceQuality"),
        ("programs", "program", "ProgramStat"),
        ("devices", "device", "DeviceStat"),
        ("compile_table", "row", "CompileRecord"),
    ],
)
def test_from_dict_names_the_malformed_table_and_quotes_the_data(key, what, cls):
    """An entry with an unknown key: ValueError '`<table>` holds a malformed <entry> (...). Received: data=...'."""
    data = {key: [{"bogus": 1}]}
    with pytest.raises(ValueError) as raised:
        CoverageReport.from_dict(data)
    assert str(raised.value) == (
        f"`{key}` holds a malformed {what} ({cls}.__init__() got an unexpected keyword argument 'bogus'). "
        f"Received: data={data!r}"
    )


def test_unknown_steps_and_devices_survive_json():
    """`steps` None (no marker) stays None through JSON, an empty list stays empty (a saved report
    that measured no step), and devices come back equal."""
    import json

    from keras_xla_guard.trace.report import DeviceStat

    device = DeviceStat("/device:GPU:1", "h", 0.5, 0.6, 0.1, 0.5 / 0.6, 3, 0.01, 0.0)
    for steps in (None, ()):
        report = CoverageReport(time_base="device", xla_run_span_s=0.6, devices=(device, device), steps=steps)
        data = json.loads(json.dumps(report.to_dict()))
        assert (data["steps"], data["totals"]) == (None if steps is None else [], "summed over 2 devices")
        assert CoverageReport.from_dict(data) == report
