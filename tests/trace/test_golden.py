"""The streaming analysis gives exactly the reports of the code before it,
and those reports agree with an independent oracle on the same traces.

Golden reports come from commit 9c25e2f (see `_golden.py`) on real traces
kept in the repository and on edits of one that take the rarer paths; beside
them, `data/golden_oracle.json` holds what the oracle read from each trace,
so that a frozen figure is checked against truth, not only against itself.
"""

from __future__ import annotations

import pytest
from _golden import EAGER_NOTE_START, TOP_K, load_golden, load_oracle, oracle, report_dict, variants

from keras_xla_guard import analyze_trace, analyze_xspace
from keras_xla_guard.trace.xplane import load_xspace

_GOLDEN = load_golden()
_ORACLE = load_oracle()
_VARIANTS = variants()


@pytest.fixture(scope="module")
def trace_files(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Each variant written to a file."""
    folder = tmp_path_factory.mktemp("golden")
    files = {}
    for name, data in _VARIANTS.items():
        files[name] = folder / f"{name}.xplane.pb"
        files[name].write_bytes(data)
    return files


def test_every_variant_has_a_golden_report():
    """The golden file covers exactly the traces the tests build."""
    assert sorted(_GOLDEN) == sorted(_VARIANTS)
    assert len(_GOLDEN["mlp"]["top_non_xla_ops"]) > 100
    assert _GOLDEN["jit"]["compilations"] == 1


@pytest.mark.parametrize("name", sorted(_VARIANTS))
def test_streamed_report_equals_the_golden_one(trace_files, name):
    """analyze_trace on the file: every figure equal to what 9c25e2f computed."""
    assert report_dict(analyze_trace(trace_files[name], top_k=TOP_K)) == _GOLDEN[name]


@pytest.mark.parametrize("name", sorted(_VARIANTS))
def test_parsed_report_equals_the_golden_one(trace_files, name):
    """analyze_xspace on a fully parsed XSpace: every figure equal to 9c25e2f's."""
    assert report_dict(analyze_xspace(load_xspace(trace_files[name]), top_k=TOP_K)) == _GOLDEN[name]


@pytest.mark.parametrize("name", sorted(_VARIANTS))
def test_streamed_compile_table_equals_the_parsed_one(trace_files, name):
    """The compile table read line by line equals the one from a full parse, a row per compilation."""
    streamed = analyze_trace(trace_files[name], top_k=TOP_K)
    parsed = analyze_xspace(load_xspace(trace_files[name]), top_k=TOP_K)
    assert streamed.compile_table == parsed.compile_table
    assert len(streamed.compile_table) == _GOLDEN[name]["compilations"]
    assert all(row.compile_s > 0 and not row.cache_hit for row in streamed.compile_table)


@pytest.mark.parametrize("chunk_bytes", [64, 700])
def test_tiny_slices_give_the_golden_reports(trace_files, monkeypatch, chunk_bytes):
    """Lines read a few events at a time (slices grown for long events): same reports."""
    import keras_xla_guard.trace._reader as reader

    monkeypatch.setattr(reader, "CHUNK_BYTES", chunk_bytes)
    for name in ("mlp", "jit", "mlp_in_outer_kernel"):
        assert report_dict(analyze_trace(trace_files[name], top_k=TOP_K)) == _GOLDEN[name]


def test_every_variant_has_oracle_values_for_its_xla_figures():
    """The oracle file covers every variant, each with its XLA time, launches, share and compilations."""
    assert sorted(_ORACLE) == sorted(_VARIANTS)
    for figures in _ORACLE.values():
        assert {"xla_time_s", "xla_executions", "xla_time_fraction", "compilations"} <= set(figures)
    assert "non_xla_op_time_s" in _ORACLE["plain"]


@pytest.mark.parametrize("name", sorted(_VARIANTS))
def test_golden_and_current_figures_agree_with_the_oracle(trace_files, name):
    """Each figure with an oracle value, frozen and as computed now, is that value within its tolerance."""
    now = report_dict(analyze_trace(trace_files[name], top_k=TOP_K))
    for figure, check in _ORACLE[name].items():
        expected = pytest.approx(check["value"], rel=check["rel"], abs=1e-12)
        assert _GOLDEN[name][figure] == expected, (name, figure, check["oracle"])
        assert now[figure] == expected, (name, figure, check["oracle"])


@pytest.mark.tf
@pytest.mark.parametrize("name", sorted(_VARIANTS))
def test_oracle_values_are_what_the_oracle_reads_from_the_trace(trace_files, name):
    """The stored oracle values are the oracle's reading of the trace today (TensorFlow's proto, xprof)."""
    assert oracle(trace_files[name], _GOLDEN[name], name) == _ORACLE[name]


def test_the_eager_loops_note_names_the_op_types_its_raw_trace_ran_eagerly(trace_files):
    """The stored eager loop (no kernel, no XLA): the note names the eager op spans' types, read from the proto alone."""
    trace = trace_files["eager_loop"]
    eager = sorted(
        {
            m.name[len("EagerLocalExecute: ") :]
            for plane in load_xspace(trace).planes
            if plane.name == "/host:CPU"
            for m in plane.event_metadata.values()
            if m.name.startswith("EagerLocalExecute: ")
            and not m.name.startswith("EagerLocalExecute: __inference_")
        }
    )
    assert "MatMul" in eager and len(eager) > 5
    for report in (analyze_trace(trace), analyze_xspace(load_xspace(trace))):
        (note,) = report.notes
        assert note.startswith(
            f"{EAGER_NOTE_START}, one at a time from Python ({', '.join(eager[:5])} and {len(eager) - 5} more)"
        )
        assert f"eager_overhead_s, {report.eager_overhead_s:.3f} s)" in note and report.eager_overhead_s > 0
