"""The run file: one writer, one reader, a schema version; files from before versions still read."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keras_xla_guard import CoverageReport, RunFileError
from keras_xla_guard.distributed import read_reports, worker_coverage
from keras_xla_guard.output.runfile import (
    RUN_FILE,
    RUN_FILE_VERSION,
    RunData,
    RunFileSink,
    read_run_file,
    save_run_file,
)
from keras_xla_guard.runtime.sink import CallRecord, EpochRecord

# Written by a real 2-epoch jit_compile fit (both epochs profiled) with
# keras-xla-guard at 33e6507, before run files had a version.
V0 = Path(__file__).with_name("data") / "run_file_v0.json"


def test_a_file_written_before_versions_reads_as_version_0():
    """The pre-version file of a real fit reads: both epochs' reports and signatures, as saved but for the compile time."""
    saved = json.loads(V0.read_text())
    assert "version" not in saved
    run = read_run_file(V0)
    assert (run.name, run.version, run.saved_at) == ("", 0, saved["saved_at"])
    # Version 0's compile_time_s was summed over threads (3.21 s in a 2.85 s
    # window); it is compile_thread_time_s now, and compile_time_s the sum of
    # the wall-clock compile table.
    old = saved["reports"]["0"]
    assert old["compile_time_s"] > old["window_wall_s"]
    table_s = sum(row["compile_s"] for row in old["compile_table"])
    assert table_s < old["window_wall_s"]
    migrated = {**old, "compile_time_s": table_s, "compile_thread_time_s": old["compile_time_s"]}
    assert run.reports[0] == CoverageReport.from_dict(migrated).to_dict()
    assert (
        run.reports[1]
        == CoverageReport.from_dict({**saved["reports"]["1"], "compile_thread_time_s": 0.0}).to_dict()
    )
    assert run.signatures == (saved["signatures"]["0"], saved["signatures"]["1"])
    reports = run.coverage_reports()
    assert sorted(reports) == [0, 1]
    assert reports[0] == CoverageReport.from_dict(migrated)
    assert (reports[0].compilations, len(reports[0].compile_table), reports[0].distinct_signatures) == (
        2,
        2,
        2,
    )


def test_writer_stamps_the_version_and_the_reader_gives_back_what_was_written(tmp_path):
    """save_run_file -> read_run_file round-trips the reports of the pre-version file, now with a version."""
    reports = read_run_file(V0).coverage_reports()
    path = save_run_file(tmp_path, reports, {}, worker="worker_1")
    assert path == tmp_path / RUN_FILE
    assert json.loads(path.read_text())["version"] == RUN_FILE_VERSION == 3
    run = read_run_file(tmp_path)
    assert (run.name, run.version, run.calls) == ("worker_1", 3, ())
    assert run.coverage_reports() == reports
    assert read_reports(tmp_path) == reports
    assert worker_coverage(tmp_path.parent)[1]["worker_1"].xla_time_fraction == reports[1].xla_time_fraction


def test_a_newer_version_is_refused_by_name(tmp_path):
    """A run file of a later layout is a RunFileError naming the file and both versions."""
    data = json.loads(V0.read_text())
    data["version"] = RUN_FILE_VERSION + 1
    (tmp_path / RUN_FILE).write_text(json.dumps(data))
    with pytest.raises(RunFileError) as caught:
        read_run_file(tmp_path / RUN_FILE)
    assert str(caught.value) == (
        f"{str(tmp_path / RUN_FILE)!r} is not a readable run file: version: 4 is newer than this "
        "keras-xla-guard reads (up to 3); read it with the version that wrote it"
    )


def _calls() -> list[CallRecord]:
    """A validation and a predict call, with figures made by the trackers themselves."""
    import numpy as np

    from keras_xla_guard.signatures import Signature, SignatureTracker

    made = []
    for function, epoch, call in (("test", 0, 0), ("predict", None, 0)):
        tracker = SignatureTracker(xla=True, function=function)
        tracker.begin_epoch(epoch)
        for n in (3, 5, 3):
            tracker.observe(Signature.of(np.zeros((2, n))))
        made.append(CallRecord(function, call, epoch, tracker.end_epoch()))
    return made + [CallRecord("test", 1, None, signatures_unavailable="keras 9")]


def test_calls_round_trip_in_order_and_a_version_1_file_reads_with_none(tmp_path):
    """Version 2 keeps each call's to_dict() in order; a version-1 file (no calls) reads with calls ()."""
    calls = _calls()
    save_run_file(tmp_path, {}, {}, calls=calls)
    run = read_run_file(tmp_path)
    assert run.calls == tuple(c.to_dict() for c in calls)
    assert [(c["kind"], c["call"], c["epoch"]) for c in run.calls] == [
        ("validation", 0, 0),
        ("predict", 0, None),
        ("evaluate", 1, None),
    ]
    assert run.calls[0]["signatures"]["expected_compilations"] == 2
    data = json.loads(V0.read_text())
    data["version"] = 1
    (tmp_path / RUN_FILE).write_text(json.dumps(data))
    old = read_run_file(tmp_path)
    assert (old.version, old.calls, len(old.reports)) == (1, (), 2)


def test_run_file_sink_adds_a_call_after_fit_to_the_file_there(tmp_path):
    """write_call on a fresh sink keeps the epochs and calls already saved and appends; a new run's sink starts anew."""
    first, second, third = _calls()
    report = CoverageReport(status="skipped", reason="busy", epoch=0, steps_profiled=0)
    RunFileSink(tmp_path).write_epoch(EpochRecord(0, report, calls=(first,)))
    RunFileSink(tmp_path).write_call(second)
    run = read_run_file(tmp_path)
    assert run.reports == (report.to_dict(),)
    assert run.calls == (first.to_dict(), second.to_dict())
    RunFileSink(tmp_path).write_epoch(EpochRecord(1))
    assert read_run_file(tmp_path).calls == ()
    (tmp_path / RUN_FILE).write_text("not json")
    RunFileSink(tmp_path).write_call(third)
    assert read_run_file(tmp_path).calls == (third.to_dict(),)


def test_run_data_of_takes_objects_or_dicts_in_epoch_order():
    """RunData.of: a dict keyed by epoch gives its values in epoch order, as dicts."""
    late, early = CoverageReport(epoch=3), CoverageReport(epoch=1)
    run = RunData.of("w", {3: late, 1: early})
    assert run.reports == (early.to_dict(), late.to_dict())
    assert RunData.of("w", [late.to_dict()]).coverage_reports() == {3: late}


# ------------------------------------------------------------ a bad run file is one error


def _edit(path: str, value):
    """An edit of the v0 file: the value at `path` (keys and list indices separated by `/`) set to `value`."""

    def edit(data):
        *parents, last = path.split("/")
        node = data
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[int(last) if isinstance(node, list) else last] = value
        return data

    return edit


# (edit of the parsed file, the field the error must name, the problem it must state)
BAD = {
    "report_is_a_string": (_edit("reports/0", "ok"), "reports['0']", "expected an object, got 'ok'"),
    "report_is_null": (_edit("reports/0", None), "reports['0']", "expected an object, got None"),
    "notes_is_5": (_edit("reports/0/notes", 5), "reports['0'].notes", "expected a list, got 5"),
    "hosts_is_7": (_edit("reports/1/hosts", 7), "reports['1'].hosts", "expected a list, got 7"),
    "op_type_is_a_number": (
        _edit("reports/0/top_non_xla_ops/0/op_type", 1),
        "reports['0'].top_non_xla_ops[0].op_type",
        "expected a string, got 1",
    ),
    "ops_is_a_string": (
        _edit("reports/0/top_non_xla_ops", "MatMul"),
        "reports['0'].top_non_xla_ops",
        "expected a list, got 'MatMul'",
    ),
    "op_has_an_extra_key": (
        _edit("reports/0/top_non_xla_ops/0/scope", "dense"),
        "reports['0'].top_non_xla_ops[0].scope",
        "not a field of this object",
    ),
    "op_layer_is_a_number": (
        _edit("reports/0/top_non_xla_ops/0/layer", 3),
        "reports['0'].top_non_xla_ops[0].layer",
        "expected a string, got 3",
    ),
    "compile_row_is_5": (
        _edit("reports/0/compile_table/0", 5),
        "reports['0'].compile_table[0]",
        "expected an object, got 5",
    ),
    "compile_time_is_text": (
        _edit("reports/0/compile_table/1/compile_s", "slow"),
        "reports['0'].compile_table[1].compile_s",
        "expected a number from 0 to 1e+09, got 'slow'",
    ),
    "fraction_above_1": (
        _edit("reports/1/xla_time_fraction", 2),
        "reports['1'].xla_time_fraction",
        "expected a number from 0 to 1, got 2",
    ),
    "count_is_true": (
        _edit("reports/1/xla_executions", True),
        "reports['1'].xla_executions",
        "expected an integer from 0 to 9007199254740992, got True",
    ),
    "ok_without_its_figure": (
        _edit("reports/1/xla_time_s", None),
        "reports['1'].xla_time_s",
        "missing from a measured (ok) report",
    ),
    "epoch_not_its_key": (_edit("reports/1/epoch", 0), "reports['1'].epoch", "expected 1, its key, got 0"),
    "signatures_is_a_string": (_edit("signatures/1", "x"), "signatures['1']", "expected an object, got 'x'"),
    "explanation_without_message": (
        _edit("signatures/0/explanations", [{"kind": "new_signature"}]),
        "signatures['0'].explanations[0].message",
        "missing",
    ),
    "shape_is_text": (
        _edit("signatures/0/signatures/0/shapes", "8x8"),
        "signatures['0'].signatures[0].shapes",
        "expected a list, got '8x8'",
    ),
    "reports_is_a_list": (_edit("reports", []), "reports", "expected an object of epochs, got []"),
    "worker_is_a_number": (_edit("worker", 3), "(top level).worker", "expected a string, got 3"),
    "version_is_text": (
        _edit("version", "1"),
        "(top level).version",
        "expected an integer from 0 to 9007199254740992, got '1'",
    ),
    "quality_without_its_cost": (
        _edit("reports/0/trace_quality", [{"code": "collectives", "detail": "d", "remedy": "r"}]),
        "reports['0'].trace_quality[0].cost",
        "missing",
    ),
    "quality_with_an_extra_key": (
        _edit(
            "reports/0/trace_quality", [{"code": "c", "detail": "d", "cost": "c", "remedy": "r", "level": 1}]
        ),
        "reports['0'].trace_quality[0].level",
        "not a field of this object",
    ),
    "program_per_op_is_text": (
        _edit("reports/0/programs", [{"program": "p(1)", "runs": 1, "time_s": 0.1, "per_op": "no"}]),
        "reports['0'].programs[0].per_op",
        "expected true or false, got 'no'",
    ),
    "collective_time_negative": (
        _edit("reports/1/collective_time_s", -1),
        "reports['1'].collective_time_s",
        "expected a number from 0 to 1e+09, got -1",
    ),
    "step_with_negative_idle": (
        _edit("reports/1/steps", [{"step": 3, "wall_s": 0.1, "busy_s": 0.2, "idle_s": -0.1, "launches": 1}]),
        "reports['1'].steps[0].idle_s",
        "expected a number from 0 to 1e+09, got -0.1",
    ),
    "device_with_an_extra_key": (
        _edit(
            "reports/1/devices",
            [
                {
                    "device": "/device:GPU:0",
                    "host": None,
                    "xla_time_s": 0.1,
                    "xla_run_span_s": 0.1,
                    "non_xla_op_time_s": 0.0,
                    "xla_time_fraction": 1.0,
                    "launches": 1,
                    "transfer_time_s": 0.0,
                    "collective_time_s": 0.0,
                    "busy": 1,
                }
            ],
        ),
        "reports['1'].devices[0].busy",
        "not a field of this object",
    ),
    "device_share_above_one": (
        _edit(
            "reports/1/devices",
            [
                {
                    "device": "/device:GPU:0",
                    "xla_time_s": 0.1,
                    "non_xla_op_time_s": 0.0,
                    "xla_time_fraction": 2,
                    "launches": 1,
                }
            ],
        ),
        "reports['1'].devices[0].xla_time_fraction",
        "expected a number from 0 to 1, got 2",
    ),
    "xla_op_without_count": (
        _edit("reports/1/top_xla_ops", [{"op_type": "fusion", "op_name": "f.1", "self_time_s": 0.1}]),
        "reports['1'].top_xla_ops[0].count",
        "missing",
    ),
    "calls_is_an_object": (_edit("calls", {}), "calls", "expected a list, got {}"),
    "call_of_the_train_function": (
        _edit("calls", [{"function": "train", "call": 0}]),
        "calls[0].function",
        "expected one of ['test', 'predict'], got 'train'",
    ),
    "call_without_its_number": (_edit("calls", [{"function": "test"}]), "calls[0].call", "missing"),
    "call_with_an_extra_key": (
        _edit("calls", [{"function": "test", "call": 0, "report": {}}]),
        "calls[0].report",
        "not a field of this object",
    ),
    "call_figures_of_another_function": (
        _edit(
            "calls",
            [
                {
                    "function": "test",
                    "call": 0,
                    "signatures": {
                        "epoch": None,
                        "steps": 1,
                        "distinct_signatures": 1,
                        "new_signatures": 1,
                        "compilations_so_far": 1,
                        "function": "fit",
                    },
                }
            ],
        ),
        "calls[0].signatures.function",
        "expected one of ['train', 'test', 'predict'], got 'fit'",
    ),
}


def _write_bad(tmp_path: Path, edit) -> Path:
    path = tmp_path / RUN_FILE
    path.write_text(json.dumps(edit(json.loads(V0.read_text()))))
    return path


@pytest.mark.parametrize("case", sorted(BAD))
def test_each_wrong_type_is_one_run_file_error_naming_the_file_and_the_field(tmp_path, case):
    """A wrong type, range or key anywhere a reader looks: RunFileError '<file>' ...: <field>: <problem>."""
    edit, field, problem = BAD[case]
    path = _write_bad(tmp_path, edit)
    with pytest.raises(RunFileError) as caught:
        read_run_file(path)
    assert str(caught.value) == f"{str(path)!r} is not a readable run file: {field}: {problem}"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"[" * 200_000 + b"]" * 200_000, "its JSON is nested deeper than any run file"),
        (b'{"reports": {', "not JSON (Expecting property name enclosed in double quotes: line 1 column 14"),
        (b"\xff\xfe{}", "not JSON ('utf-8' codec can't decode byte 0xff in position 0"),
        (
            b'{"reports": {"1": {"status": "ok", "xla_executions": 1' + b"0" * 5000 + b"}}}",
            "not JSON (Exceeds the limit (4300 digits) for integer string conversion",
        ),
        (b"7", "(top level): expected an object, got 7"),
    ],
    ids=["nested_200000_deep", "truncated", "not_utf8", "huge_integer", "a_number"],
)
def test_unreadable_content_is_one_run_file_error(tmp_path, content, message):
    """Any depth, broken JSON, bytes that are not text: RunFileError naming the file, never a crash."""
    path = tmp_path / RUN_FILE
    path.write_bytes(content)
    with pytest.raises(RunFileError) as caught:
        read_run_file(path)
    assert str(caught.value).startswith(f"{str(path)!r} is not a readable run file: {message}")


def test_a_file_larger_than_any_run_file_is_refused_unread(tmp_path, monkeypatch):
    """Above MAX_RUN_FILE_BYTES the file is refused by its size, before it is read."""
    import keras_xla_guard.output.runfile as runfile

    monkeypatch.setattr(runfile, "MAX_RUN_FILE_BYTES", 1000)
    size = V0.stat().st_size
    with pytest.raises(RunFileError) as caught:
        read_run_file(V0)
    assert str(caught.value) == (
        f"{str(V0)!r} is not a readable run file: {size} bytes, more than the 1000 a run file may hold"
    )


def test_worker_coverage_of_a_bad_worker_file_is_a_run_file_error(tmp_path):
    """worker_coverage meets a worker's bad file: the same one RunFileError, naming that file."""
    (tmp_path / "worker_1").mkdir()
    path = _write_bad(tmp_path / "worker_1", BAD["notes_is_5"][0])
    with pytest.raises(
        RunFileError,
        match=rf"^{re.escape(repr(str(path)))} is not a readable run file: "
        r"reports\['0'\]\.notes: expected a list, got 5$",
    ):
        worker_coverage(tmp_path)


# ------------------------------------------------------------ fuzz

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
# Where (a walk of choices down the file's structure), what (set, delete), the new value.
_MUTATION = st.tuples(st.lists(st.integers(0, 2**16), max_size=7), st.sampled_from(["set", "delete"]), _JSON)


def _mutate(data, mutation):
    """Sets or deletes the value a walk of choices ends at (a leaf, or where the walk runs out)."""
    walk, action, value = mutation
    parent, key, node = None, None, data
    for choice in walk:
        if isinstance(node, dict) and node:
            parent, key = node, sorted(node)[choice % len(node)]
        elif isinstance(node, list) and node:
            parent, key = node, choice % len(node)
        else:
            break
        node = parent[key]
    if parent is None:
        return value if action == "set" else data
    if action == "delete":
        del parent[key]
    else:
        parent[key] = value
    return data


@pytest.mark.slow
@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations=st.lists(_MUTATION, min_size=1, max_size=4))
def test_mutated_run_file_reads_and_renders_or_is_one_run_file_error(mutations, tmp_path_factory):
    """Any edit of a real run file: it reads and every output renders it, or it is one RunFileError."""
    from keras_xla_guard.output.console import format_report
    from keras_xla_guard.output.html import render_html

    data = json.loads(V0.read_text())
    for mutation in mutations:
        data = _mutate(data, mutation)
    directory = tmp_path_factory.getbasetemp() / "fuzz_run_file" / "worker_0"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / RUN_FILE
    path.write_text(json.dumps(data))
    try:
        run = read_run_file(path)
    except RunFileError as e:
        assert str(e).startswith(f"{str(path)!r} is not a readable run file: ")
        assert "\n" not in str(e)
        return
    page = render_html([run], exit_reason="fuzz")
    assert page.startswith("<!DOCTYPE html>")
    for report in run.coverage_reports().values():
        format_report(report)
    assert set(worker_coverage(directory.parent)) == set(run.coverage_reports())
