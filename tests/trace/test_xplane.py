"""Tests for keras_xla_guard.trace.xplane: finding, reading and surviving bad traces.

Real traces come from tiny Keras fits under the real TF profiler; synthetic
changes are only made on top of them (truncated, flipped, spliced bytes; odd
field values) to check the reader and the analysis never fail in other ways
than with our own `TraceError`s.
"""

from __future__ import annotations

import gzip
import random
import re
from pathlib import Path
from typing import Any

import pytest
from _oracle import RAW_REL, raw_figures
from _traces import profiled_fit
from _xspace import pb_field
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keras_xla_guard import (
    CoverageReport,
    TraceError,
    TraceNotFoundError,
    TraceParseError,
    TraceTooLargeError,
    analyze_trace,
    analyze_xspace,
)
from keras_xla_guard.trace.xplane import (
    find_run_dirs,
    find_trace_files,
    iter_lines,
    load_xspace,
    open_xspace,
    parse_xspace,
    xplane_pb2,
)

DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="module")
def jit_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real trace of a jit_compile=True fit, compilation included."""
    return profiled_fit(tmp_path_factory.mktemp("xplane_jit"), jit_compile=True)


@pytest.fixture(scope="module")
def plain_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real trace of a jit_compile=False fit."""
    return profiled_fit(tmp_path_factory.mktemp("xplane_plain"), jit_compile=False)


def _assert_valid(report: Any) -> None:
    assert isinstance(report, CoverageReport)
    assert 0.0 <= report.xla_time_fraction <= 1.0
    for value in (
        report.xla_time_s,
        report.non_xla_op_time_s,
        report.compile_time_s,
        report.input_pipeline_time_s,
        report.eager_overhead_s,
        report.tracing_time_s,
    ):
        assert value >= 0.0
    assert report.xla_executions >= 0 and report.compilations >= 0
    assert all(op.self_time_s >= 0 and op.count >= 1 for op in report.top_non_xla_ops)


def _lines(space: Any) -> list[tuple[str, str, list[tuple[int, int, int, int]]]]:
    return [
        (
            plane.name,
            line.name,
            [(e.metadata_id, e.offset_ps, e.duration_ps, len(e.stats)) for e in line.events],
        )
        for plane in space.planes
        for line in iter_lines(plane)
    ]


# ------------------------------------------------------------ reading real traces


@pytest.mark.slow
@pytest.mark.parametrize("trace_name", ["jit_trace", "plain_trace"])
def test_lazy_reader_sees_the_same_events_as_a_full_parse(trace_name, request):
    """open_xspace + iter_lines yields exactly the lines and events of load_xspace."""
    trace = request.getfixturevalue(trace_name)
    eager, lazy = load_xspace(trace), open_xspace(trace)
    assert [p.name for p in lazy.planes] == [p.name for p in eager.planes]
    assert _lines(lazy) == _lines(eager)
    assert sum(len(events) for _, _, events in _lines(lazy)) > 1000


@pytest.mark.slow
def test_analysis_of_lazy_and_parsed_trace_is_identical(jit_trace, plain_trace):
    """analyze_xspace gives the same report for open_xspace and load_xspace."""
    for trace in (jit_trace, plain_trace):
        lazy = analyze_xspace(open_xspace(trace), trace_path=str(trace), top_k=50)
        eager = analyze_xspace(load_xspace(trace), trace_path=str(trace), top_k=50)
        assert lazy == eager
    jit = analyze_trace(jit_trace)
    assert (jit.xla_time_s, jit.xla_executions, jit.xla_time_fraction) == pytest.approx(
        raw_figures(jit_trace, jit.non_xla_op_time_s), rel=RAW_REL
    )


def _planes(space: Any) -> list[tuple[str, int, int, dict[int, str], dict[int, str], int]]:
    """Each plane's name, id, line count, event and stat metadata names and plane stats."""
    return [
        (
            plane.name,
            plane.id,
            len(plane.line_spans) if hasattr(plane, "line_spans") else len(plane.lines),
            {mid: md.name for mid, md in plane.event_metadata.items()},
            {mid: md.name for mid, md in plane.stat_metadata.items()},
            len(plane.stats),
        )
        for plane in space.planes
    ]


def test_analysis_never_parses_the_metadata_plane(tmp_path):
    """`/host:metadata` (an HLO module per entry) is not parsed by the analysis; reading it later
    gives what a full parse gives."""
    path = tmp_path / "jit.xplane.pb"
    path.write_bytes(gzip.decompress((DATA / "jit.xplane.pb.gz").read_bytes()))
    space = open_xspace(path)
    analyze_xspace(space, trace_path=str(path))
    metadata_plane = next(p for p in space.planes if p.name == "/host:metadata")
    assert metadata_plane._meta is None
    host = next(p for p in space.planes if p.name == "/host:CPU")
    assert host._meta is not None
    assert _planes(space) == _planes(load_xspace(path))


def _plane_bytes(*parts: Any) -> bytes:
    """An XSpace of one plane whose fields are the parts' serialized fields, in that order."""
    plane = b"".join(part if isinstance(part, bytes) else part.SerializeToString() for part in parts)
    return pb_field(0x0A, plane)


@pytest.mark.parametrize(
    ("late", "name", "plane_id", "lines"),
    [
        ({"name": "/host:late", "id": 7}, "/host:late", 7, 1),
        ({"lines": 2}, "/host:CPU", 1, 3),
        ({"raw": b"\x08\x00"}, "/host:CPU", 0, 1),
        ({}, "/host:CPU", 1, 1),
    ],
    ids=["name_and_id", "lines", "explicit_zero_id", "none"],
)
def test_fields_after_many_small_metadata_entries_read_as_a_full_parse_reads_them(
    tmp_path, late, name, plane_id, lines
):
    """A plane whose id, name or lines come after 100 small metadata entries (not how writers lay
    them out): the same name, id, lines and metadata as a full parse, the last value winning."""
    pb = xplane_pb2()
    first = pb.XPlane(id=1, name="/host:CPU")
    first.lines.add(id=1, name="tf_Compute/1").events.add(metadata_id=1, offset_ps=0, duration_ps=10)
    metadata = pb.XPlane()
    for mid in range(1, 101):
        metadata.event_metadata[mid].id = mid
        metadata.event_metadata[mid].name = f"op_{mid}:MatMul"
        metadata.stat_metadata[mid].id = mid
        metadata.stat_metadata[mid].name = f"stat_{mid}"
    metadata.stats.add(metadata_id=1, int64_value=5)
    tail = pb.XPlane(name=late.get("name", ""), id=late.get("id", 0))
    for k in range(late.get("lines", 0)):
        tail.lines.add(id=10 + k, name=f"tf_Compute/{10 + k}").events.add(metadata_id=2, duration_ps=5)
    path = _write(tmp_path, _plane_bytes(first, metadata, tail, late.get("raw", b"")))
    lazy, full = open_xspace(path), load_xspace(path)
    assert (lazy.planes[0].name, lazy.planes[0].id, len(lazy.planes[0].line_spans)) == (name, plane_id, lines)
    assert _planes(lazy) == _planes(full)
    assert _lines(lazy) == _lines(full)


def test_damaged_metadata_of_a_host_plane_is_a_parse_error_when_read(tmp_path):
    """Metadata that does not parse raises TraceParseError naming the file, from the analysis that needs it."""
    pb = xplane_pb2()
    plane = pb.XPlane(id=1, name="/host:CPU")
    plane.lines.add(id=1, name="tf_Compute/1").events.add(metadata_id=1, offset_ps=0, duration_ps=10)
    plane.event_metadata[1].name = "op:MatMul"
    # Field 4 (event_metadata), one entry whose payload claims more bytes than it holds.
    path = _write(tmp_path, _plane_bytes(plane, b"\x22\x05\x0a\x09abc"))
    with pytest.raises(
        TraceParseError, match=f"^{re.escape(str(path))} is not a valid XSpace trace \\(protobuf"
    ):
        analyze_trace(path)


# ------------------------------------------------------------------ bad input


def _write(tmp_path: Path, data: bytes, name: str = "host.xplane.pb") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("loader", [load_xspace, open_xspace, analyze_trace])
def test_empty_file_is_a_parse_error(tmp_path, loader):
    """An empty .xplane.pb raises TraceParseError naming the file."""
    path = _write(tmp_path, b"")
    with pytest.raises(TraceParseError, match="empty"):
        loader(path)


@pytest.mark.parametrize("loader", [load_xspace, open_xspace, analyze_trace])
def test_random_bytes_are_a_parse_error(tmp_path, loader):
    """Seeded random bytes raise TraceParseError, not a protobuf error."""
    path = _write(tmp_path, random.Random(0).randbytes(4096))
    with pytest.raises(TraceParseError, match="host.xplane.pb"):
        loader(path)


@pytest.mark.tf
@pytest.mark.parametrize("loader", [load_xspace, open_xspace, analyze_trace])
def test_a_graphdef_is_not_a_trace(tmp_path, loader):
    """A serialized tf GraphDef (another protobuf) raises TraceParseError naming the file."""
    import tensorflow as tf

    @tf.autograph.experimental.do_not_convert
    def f(x: Any) -> Any:
        return x * 2.0 + 1.0

    graph = tf.function(f).get_concrete_function(tf.TensorSpec([2])).graph.as_graph_def()
    path = _write(tmp_path, graph.SerializeToString())
    with pytest.raises(TraceParseError, match=f"^{re.escape(str(path))} "):
        loader(path)


@pytest.mark.parametrize("loader", [load_xspace, open_xspace, analyze_trace])
def test_a_tensorboard_summary_is_not_a_trace(tmp_path, loader):
    """A serialized tensorboard Summary proto, which decodes as an XSpace, is rejected."""
    from tensorboard.compat.proto import summary_pb2

    summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="loss", simple_value=0.5)])
    path = _write(tmp_path, summary.SerializeToString())
    with pytest.raises(TraceParseError, match="no /host: or /device: plane"):
        loader(path)


def test_directory_without_traces_is_not_found(tmp_path):
    """A directory holding no *.xplane.pb raises TraceNotFoundError."""
    (tmp_path / "plugins" / "profile" / "run").mkdir(parents=True)
    (tmp_path / "events.out.tfevents.1").write_bytes(b"x")
    with pytest.raises(TraceNotFoundError) as caught:
        analyze_trace(tmp_path)
    assert str(caught.value) == (
        f"No *.xplane.pb trace found under {str(tmp_path)!r}. Traces are written to "
        "<log_dir>/plugins/profile/<run>/<host>.xplane.pb."
    )
    with pytest.raises(TraceNotFoundError) as caught:
        find_trace_files(tmp_path / "missing")
    assert str(caught.value) == f"No such file or directory: {str(tmp_path / 'missing')!r}."


def test_a_path_that_is_neither_file_nor_directory_or_no_path_is_refused_by_name(tmp_path):
    """A FIFO is no trace (TraceNotFoundError quoting it); a path of the wrong type a ValueError quoting it."""
    import os

    fifo = tmp_path / "pipe.xplane.pb"
    os.mkfifo(fifo)
    with pytest.raises(TraceNotFoundError) as caught:
        find_trace_files(fifo)
    assert str(caught.value) == f"Expected an .xplane.pb file or a directory. Received: {str(fifo)!r}."
    with pytest.raises(ValueError) as refused:
        find_trace_files(3)
    assert str(refused.value) == (
        "`path` must be an .xplane.pb file, a run directory or a log directory (a str or os.PathLike). "
        "Received: path=3"
    )


@pytest.mark.parametrize("loader", [load_xspace, open_xspace, analyze_trace])
def test_file_beyond_the_size_cap_is_refused_before_reading(tmp_path, loader):
    """A file larger than max_bytes raises TraceTooLargeError quoting both sizes."""
    path = _write(tmp_path, b"\0" * 2048)
    with pytest.raises(TraceTooLargeError, match="2048 bytes, above the cap of 1000"):
        loader(path, max_bytes=1000)


def test_file_errors_name_the_file_word_for_word(tmp_path):
    """A missing file, a directory, a name too long to look up, an empty file and one over the cap each
    raise their own error quoting the path; a one-byte file fits a one-byte cap."""
    from keras_xla_guard.errors import TraceError
    from keras_xla_guard.trace._reader import check_trace_file

    missing, folder, long = tmp_path / "missing.xplane.pb", tmp_path / "d.xplane.pb", tmp_path / ("x" * 300)
    folder.mkdir()
    empty, big = _write(tmp_path, b""), tmp_path / "big.xplane.pb"
    big.write_bytes(b"\0" * 2048)
    expected = {
        missing: (TraceNotFoundError, f"No such trace file: {str(missing)!r}."),
        folder: (TraceNotFoundError, f"Not a file: {str(folder)!r}."),
        empty: (TraceParseError, f"Trace file {str(empty)!r} is empty."),
        big: (
            TraceTooLargeError,
            f"Trace file {str(big)!r} is 2048 bytes, above the cap of 1000 bytes. Raise `max_bytes` "
            "(CLI: --max-bytes) to analyze it anyway.",
        ),
    }
    for path, (cls, message) in expected.items():
        with pytest.raises(cls) as caught:
            open_xspace(path, max_bytes=1000)
        assert str(caught.value) == message
    with pytest.raises(TraceError) as caught:
        open_xspace(long)
    # The OS error's own text follows (errno 36 on Linux, 63 on macOS).
    assert str(caught.value).startswith(f"Cannot read trace file {str(long)!r}: [Errno ")
    assert "File name too long" in str(caught.value)
    one = tmp_path / "one.xplane.pb"
    one.write_bytes(b"\0")
    assert check_trace_file(one, max_bytes=1) == 1


@pytest.mark.parametrize("max_bytes", [0, -1, 1.5, True, "1G"])
def test_invalid_size_cap_is_a_value_error(tmp_path, max_bytes):
    """max_bytes must be a positive int; the error quotes the value."""
    path = _write(tmp_path, b"\0")
    with pytest.raises(ValueError, match="max_bytes="):
        open_xspace(path, max_bytes=max_bytes)


@pytest.mark.slow
def test_truncated_real_trace_is_a_parse_error(tmp_path, plain_trace):
    """The first half of a real trace raises TraceParseError."""
    data = plain_trace.read_bytes()
    path = _write(tmp_path, data[: len(data) // 2])
    with pytest.raises(TraceParseError):
        analyze_trace(path)
    with pytest.raises(TraceParseError):
        load_xspace(path)


@pytest.mark.slow
def test_dangling_metadata_in_a_lazy_line_is_a_parse_error(tmp_path, plain_trace):
    """An event naming undefined metadata is caught when its line is read."""
    space = load_xspace(plain_trace)
    plane = next(p for p in space.planes if p.name == "/host:CPU")
    line = next(line for line in plane.lines if line.events)
    line.events[0].metadata_id = max(plane.event_metadata) + 1000
    path = _write(tmp_path, space.SerializeToString())
    with pytest.raises(TraceParseError, match="undefined"):
        parse_xspace(path.read_bytes())
    with pytest.raises(TraceParseError, match="undefined"):
        analyze_trace(path)


# ------------------------------------------------- properties on mutated traces

_MUTATION = st.one_of(
    st.tuples(st.just("truncate"), st.floats(0.0, 1.0)),
    st.tuples(
        st.just("flip"),
        st.lists(st.tuples(st.floats(0.0, 1.0), st.integers(1, 255)), min_size=1, max_size=16),
    ),
    st.tuples(st.just("splice"), st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 1.0), st.floats(0.0, 1.0))),
    st.tuples(st.just("insert"), st.tuples(st.floats(0.0, 1.0), st.binary(min_size=1, max_size=64))),
)


def _mutate(data: bytes, mutation: tuple[str, Any]) -> bytes:
    kind, arg = mutation
    n = len(data)
    if kind == "truncate":
        return data[: int(arg * n)]
    if kind == "flip":
        buf = bytearray(data)
        for where, mask in arg:
            buf[min(int(where * n), n - 1)] ^= mask
        return bytes(buf)
    if kind == "splice":
        a, b, c = (int(x * n) for x in arg)
        a, b = min(a, b), max(a, b)
        return data[:c] + data[a:b] + data[c:]
    where, extra = arg
    return data[: int(where * n)] + extra + data[int(where * n) :]


@pytest.mark.slow
@settings(
    max_examples=300,
    deadline=5000,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(mutation=_MUTATION, which=st.sampled_from(["jit", "plain"]))
def test_mutated_real_trace_gives_a_report_or_a_trace_error(
    mutation, which, jit_trace, plain_trace, tmp_path_factory
):
    """Truncated, flipped or spliced trace bytes: a valid report or TraceError, nothing else."""
    trace = jit_trace if which == "jit" else plain_trace
    data = _mutate(trace.read_bytes(), mutation)
    path = tmp_path_factory.getbasetemp() / f"mutated_{which}.xplane.pb"
    path.write_bytes(data)
    for analyze in (analyze_trace, lambda p: analyze_xspace(load_xspace(p))):
        try:
            report = analyze(path)
        except TraceError:
            continue
        _assert_valid(report)


_EDIT = st.tuples(
    st.floats(0.0, 1.0),
    st.sampled_from(
        [
            "offset_ps",
            "duration_ps",
            "metadata_id",
            "drop_stats",
            "stat_ref",
            "num_occurrences",
            "drop_metadata",
        ]
    ),
    st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from([0, -1, 1, 2**62, -(2**62)])),
)


@pytest.mark.slow
@settings(max_examples=200, deadline=5000, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits=st.lists(_EDIT, min_size=1, max_size=40))
def test_weird_but_valid_xspace_never_breaks_the_analysis(edits, jit_trace, tmp_path_factory):
    """Odd offsets, durations, dangling ids, refs: a valid report (from a file: or TraceError)."""
    space = xplane_pb2().XSpace()
    space.CopyFrom(load_xspace(jit_trace))
    plane = next(p for p in space.planes if p.name == "/host:CPU")
    events = [e for line in plane.lines for e in line.events]
    for where, field, value in edits:
        event = events[min(int(where * len(events)), len(events) - 1)]
        if field == "drop_stats":
            del event.stats[:]
        elif field == "stat_ref":
            event.stats.add(metadata_id=value & 0xFFFF, ref_value=value & (2**64 - 1))
        elif field == "drop_metadata":
            if event.metadata_id in plane.event_metadata:
                del plane.event_metadata[event.metadata_id]
        elif field == "metadata_id":
            event.metadata_id = value
        else:
            setattr(event, field, value)
    _assert_valid(analyze_xspace(space))
    path = tmp_path_factory.getbasetemp() / "weird.xplane.pb"
    path.write_bytes(space.SerializeToString())
    try:
        report = analyze_trace(path)
    except TraceParseError as e:
        assert "undefined" in str(e)
    else:
        _assert_valid(report)


_DEVICE_EVENT = st.tuples(
    st.sampled_from(["XLA Modules", "Stream #1", "Stream #2", "XLA Ops"]),
    st.integers(-(2**63), 2**63 - 1),
    st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(-5, 5)),
    st.sampled_from(["hlo_op", "tf_op", "none", "dangling"]),
    st.one_of(st.sampled_from(["dense/MatMul:MatMul", "", "a:b:c", ":X"]), st.text(max_size=12)),
)


@pytest.mark.slow
@settings(max_examples=150, deadline=5000, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(device_events=st.lists(_DEVICE_EVENT, max_size=30))
def test_weird_device_plane_never_breaks_the_analysis(device_events, jit_trace):
    """A real trace plus an odd accelerator plane (any durations, labels, ids): a valid report."""
    space = xplane_pb2().XSpace()
    space.CopyFrom(load_xspace(jit_trace))
    plane = space.planes.add(id=99, name="/device:GPU:0")
    plane.event_metadata[1].name = "fusion.1"
    plane.stat_metadata[1].name = "hlo_op"
    plane.stat_metadata[2].name = "tf_op"
    lines: dict[str, Any] = {}
    for line_name, offset, duration, stat, label in device_events:
        if line_name not in lines:
            lines[line_name] = plane.lines.add(name=line_name)
        event = lines[line_name].events.add(
            metadata_id=1 if stat != "dangling" else 7, offset_ps=offset, duration_ps=duration
        )
        if stat == "hlo_op":
            event.stats.add(metadata_id=1, str_value=label)
        elif stat == "tf_op":
            event.stats.add(metadata_id=2, str_value=label)
        elif stat == "dangling":
            event.stats.add(metadata_id=77, ref_value=5)
    report = analyze_xspace(space)
    _assert_valid(report)
    # XProf reads device activity from "XLA Modules" and "Stream..." lines.
    counted = [(n, d) for n, _, d, _, _ in device_events if n == "XLA Modules" or n[:6] == "Stream"]
    assert report.time_base == ("device" if counted else "host")
    if counted:
        positive = sum(d for _, d in counted if d > 0) * 1e-12
        assert report.xla_time_s + report.non_xla_op_time_s <= positive * (1 + 1e-9)


def test_host_of_strips_the_trace_suffix_only():
    """TensorFlow names a trace <host>.xplane.pb; the host keeps its own dots."""
    from keras_xla_guard.trace.xplane import host_of

    assert host_of("/logs/plugins/profile/run/node-1.example.com.xplane.pb") == "node-1.example.com"
    assert host_of("trace.pb") == "trace"


def test_runs_moved_while_the_log_dir_is_read_are_skipped_not_an_error(tmp_path, monkeypatch):
    """A run directory (or trace) that goes away between listing and reading holds nothing; the rest is found."""
    import gzip
    import os

    from keras_xla_guard.trace import xplane

    data = gzip.decompress((Path(__file__).parent / "data" / "jit.xplane.pb.gz").read_bytes())
    kept, moved, gone = (tmp_path / "plugins" / "profile" / name for name in ("kept", "moved", "gone"))
    for run in (kept, moved, gone):
        run.mkdir(parents=True)
        (run / "host.xplane.pb").write_bytes(data)
    real_scandir = os.scandir

    class Listing(list):
        """What os.scandir gave before the runs moved (usable as scandir's context manager)."""

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def scandir_while_a_guard_moves_runs(path):
        if Path(path) != kept.parent:
            return real_scandir(path)
        with real_scandir(path) as it:
            entries = Listing(it)
        # What a guard publishing its staged run does under a live `report`.
        moved.rename(tmp_path / "elsewhere")
        (gone / "host.xplane.pb").unlink()
        return entries

    monkeypatch.setattr(xplane.os, "scandir", scandir_while_a_guard_moves_runs)
    assert find_trace_files(tmp_path) == [kept / "host.xplane.pb"]


def _sorted_scandir(monkeypatch, gone: set[Path] = frozenset()):
    """Makes the walk list each directory in name order; the directories in `gone` went away."""
    import os

    from keras_xla_guard.trace import xplane

    real_scandir = os.scandir

    def scandir(path):
        if Path(path) in gone:
            raise FileNotFoundError(path)
        with real_scandir(path) as it:
            return sorted(it, key=lambda e: e.name)

    monkeypatch.setattr(xplane.os, "scandir", scandir)


def test_a_run_that_went_away_or_a_dangling_trace_link_ends_no_walk(tmp_path, monkeypatch):
    """Listed first, a vanished run directory and a dangling trace link are passed over; later runs are found."""
    import os

    (tmp_path / "a.xplane.pb").symlink_to(tmp_path / "nowhere")
    for name in ("b_run", "z_gone"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "h.xplane.pb").write_bytes(b"x")
    os.utime(tmp_path / "b_run" / "h.xplane.pb", (5.0, 5.0))
    _sorted_scandir(monkeypatch, gone={tmp_path / "z_gone"})
    assert find_run_dirs(tmp_path) == [tmp_path / "b_run"]


def test_a_trace_removed_between_walk_and_stat_ends_no_walk(tmp_path, monkeypatch):
    """A trace walked first whose stat finds it gone is passed over; the run walked after it is found."""
    from keras_xla_guard.trace import xplane

    for name in ("a_run", "b_run"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "h.xplane.pb").write_bytes(b"x")
    _sorted_scandir(monkeypatch)
    real_stat = Path.stat
    calls = []

    def stat(self, *args, **kwargs):
        # The first stat is `is_file`'s, which still finds the file; the second, for its mtime, does not.
        # The walk pops b_run (listed last) first.
        if self == tmp_path / "b_run" / "h.xplane.pb":
            calls.append(self)
            if len(calls) == 2:
                raise FileNotFoundError(self)
        return real_stat(self, *args, **kwargs)

    monkeypatch.setattr(xplane.Path, "stat", stat)
    assert find_run_dirs(tmp_path) == [tmp_path / "a_run"]
    assert len(calls) == 2


def test_a_run_is_as_new_as_its_newest_trace_and_an_mtime_under_a_second_stays(tmp_path):
    """Runs order by their newest trace, whichever the directory lists last; an mtime of 0.5 s stays 0.5 s."""
    import os

    # Named against their time order, so that only the times can order them.
    newer, older, early = tmp_path / "a_newer", tmp_path / "b_older", tmp_path / "z_early"
    for run in (newer, older, early):
        run.mkdir()
        for name in ("h1.xplane.pb", "h2.xplane.pb"):
            (run / name).write_bytes(b"x")
    # The newer run's newest trace is the one its directory lists first.
    with os.scandir(newer) as it:
        first, last = list(it)
    os.utime(first.path, (300.0, 300.0))
    os.utime(last.path, (100.0, 100.0))
    for name in ("h1.xplane.pb", "h2.xplane.pb"):
        os.utime(older / name, (200.0, 200.0))
        os.utime(early / name, (0.5, 0.5))
    later = tmp_path / "y_later"
    later.mkdir()
    (later / "h.xplane.pb").write_bytes(b"x")
    os.utime(later / "h.xplane.pb", (0.75, 0.75))
    assert find_run_dirs(tmp_path) == [early, later, older, newer]


def test_a_linked_directory_is_not_walked_into(tmp_path):
    """A symlink to a run directory is no second run: the walk does not follow directory links."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "h.xplane.pb").write_bytes(b"x")
    (tmp_path / "link").symlink_to(run, target_is_directory=True)
    assert find_run_dirs(tmp_path) == [run]


def test_errors_of_lines_read_one_by_one_name_the_source_given_or_the_default(tmp_path):
    """parse_xspace and iter_lines (over a lazily read plane) name their `source`, or `<bytes>` and
    `<trace>` when none is given, in the error of a first event naming undefined metadata, of planes
    that are no profiler's, or of a line that does not decode."""
    pb = xplane_pb2()
    plane = pb.XPlane(id=1, name="/host:CPU")
    plane.event_metadata[1].name = "op:MatMul"
    plane.lines.add(id=1, name="tf_Compute/1").events.add(metadata_id=7, offset_ps=0, duration_ps=10)
    dangling = _write(tmp_path, pb.XSpace(planes=[plane]).SerializeToString(), "dangling.xplane.pb")
    undefined = "is not a consistent XSpace trace: event metadata id 7 is undefined in plane '/host:CPU'."
    for source, call in [
        ("given", lambda: parse_xspace(dangling.read_bytes(), source="given")),
        ("<bytes>", lambda: parse_xspace(dangling.read_bytes())),
        ("given", lambda: list(iter_lines(open_xspace(dangling).planes[0], source="given"))),
        ("<trace>", lambda: list(iter_lines(open_xspace(dangling).planes[0]))),
    ]:
        with pytest.raises(TraceParseError) as raised:
            call()
        assert str(raised.value) == f"{source} {undefined}"
    foreign = pb.XSpace(planes=[pb.XPlane(id=1, name="foo")]).SerializeToString()
    with pytest.raises(TraceParseError) as raised:
        parse_xspace(foreign, source="given")
    assert str(raised.value) == (
        "given is not a TF profiler trace: it has no /host: or /device: plane (plane names: ['foo'])."
    )
    # A line holding a field of wire type 7, which protobuf refuses.
    plane.ClearField("lines")
    damaged = _write(tmp_path, _plane_bytes(plane, b"\x1a\x03\x08\x01\x0f"), "damaged.xplane.pb")
    for source, kwargs in [("given", {"source": "given"}), ("<trace>", {})]:
        with pytest.raises(TraceParseError, match=f"^{re.escape(source)} is not a valid XSpace trace \\("):
            list(iter_lines(open_xspace(damaged).planes[0], **kwargs))


def test_profiler_notes_that_are_no_utf8_are_read_with_replacement_characters(tmp_path):
    """An error string that is not UTF-8 (field 2 of the XSpace, written after the planes) is quoted with
    U+FFFD where its bad bytes were, not a failed analysis."""
    space = xplane_pb2().XSpace()
    plane = space.planes.add(id=1, name="/host:CPU")
    plane.event_metadata[1].id = 1
    plane.event_metadata[1].name = "dense/MatMul:MatMul"
    plane.lines.add(id=1, name="t").events.add(metadata_id=1, offset_ps=0, duration_ps=5)
    path = tmp_path / "h.xplane.pb"
    path.write_bytes(space.SerializeToString() + pb_field(0x12, b"bad \xff byte"))
    entries = {q.code: q for q in analyze_trace(path).trace_quality}
    assert sorted(entries) == ["no_step_markers", "profiler_errors"]
    assert entries["profiler_errors"].detail == "the profiler reported: bad \ufffd byte"


def test_a_trace_that_shrank_after_it_was_opened_is_an_error_naming_the_file(tmp_path):
    """A file cut short between `open_xspace` and reading its lines (the profiler rewriting it) raises
    TraceParseError saying the file ended early, never a short read taken as the line."""
    path = tmp_path / "h.xplane.pb"
    path.write_bytes(gzip.decompress((DATA / "mlp.xplane.pb.gz").read_bytes()))
    space = open_xspace(path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(TraceParseError) as caught:
        for plane in space.planes:
            for _ in iter_lines(plane, source=str(path)):
                pass
    assert (
        str(caught.value)
        == f"{path} is not a valid XSpace trace (protobuf decode failed: the file ended early)."
    )
