"""Smoke run of bench_analyze: analysis time and memory against the parse floor and xprof, and its corpus."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _helpers import BENCH, REPO, all_positive, run_script, script_json

pytestmark = pytest.mark.slow


def test_bench_analyze_times_all_three_contenders():
    """bench_analyze builds a real trace, a replicated larger one and a scaling series, and checks the reports."""
    doc = script_json(
        run_script(
            BENCH / "bench_analyze.py",
            "--steps",
            "20",
            "--rounds",
            "1",
            "--large-mb",
            "1",
            "--large-rounds",
            "1",
            "--scale-events",
            "1000,3000",
            "--scale-rounds",
            "1",
        )
    )
    assert doc["rounds"] == 1
    assert doc["trace_bytes"] > 0 and doc["trace_events"] > 0
    for name in ("ours", "xprof", "floor"):
        assert len(doc["wall_s"][name]) == 1 and all_positive(doc["median_wall_s"][name])
    assert all_positive(doc["xprof_over_ours"], doc["ours_over_floor"], doc["peak_memory_over_file_size"])
    assert 1e6 <= doc["large"]["trace_bytes"] < 2e6 and all_positive(doc["large"]["xprof_over_ours"])
    assert [s["trace_events"] for s in doc["scaling"]] == [1000, 3000]
    assert doc["reference"]["identical"] == {"base": True, "large": True}
    assert set(doc["goals_met"]) == {
        "ours_5x_faster_than_xprof",
        "ours_within_1_3x_of_floor",
        "peak_memory_under_file_size",
        "reports_identical_to_reference",
    }


def _package_batch_events() -> int:
    from keras_xla_guard.trace._scan import BATCH_EVENTS

    return BATCH_EVENTS


def _stock_corpus_mlp(corpus_dir: Path) -> None:
    """Stocks `corpus_dir` as bench_analyze's corpus with one trace: the stored real MLP trace as `mlp`,
    marked built for the installed frameworks so that nothing is trained."""
    import gzip

    sys.path.insert(0, str(BENCH))
    import bench_analyze

    where = corpus_dir / "mlp"
    where.mkdir()
    (where / "trace.xplane.pb").write_bytes(
        gzip.decompress((REPO / "tests" / "trace" / "data" / "mlp.xplane.pb.gz").read_bytes())
    )
    (where / "built.json").write_text(json.dumps(bench_analyze._corpus_key()))


def _corpus_mlp_run(corpus_dir: Path, *args: str) -> dict[str, Any]:
    """bench_analyze --corpus on `_stock_corpus_mlp`'s corpus, one round against HEAD, with `args` after."""
    _stock_corpus_mlp(corpus_dir)
    return script_json(
        run_script(
            BENCH / "bench_analyze.py",
            "--corpus",
            "mlp",
            "--corpus-dir",
            corpus_dir,
            "--corpus-rounds",
            "1",
            "--corpus-reference",
            "HEAD",
            *args,
        )
    )


def test_bench_analyze_corpus_measures_each_trace_against_the_floor_and_the_reference(tmp_path):
    """--corpus on a stocked corpus (a real trace as its MLP): each trace timed against the floor in
    fresh processes, its memory with and without a warm-up, every run of ours computing one report,
    compared with HEAD's."""
    doc = _corpus_mlp_run(tmp_path, "--corpus-scale-events", "1000", "--alternating-events", "500")
    traces = doc["traces"]
    assert sorted(traces) == ["mlp", "synthetic_alternating", "synthetic_mlp_1000_events"]
    assert traces["synthetic_mlp_1000_events"]["trace_events"] == 1000
    assert traces["synthetic_alternating"]["trace_events"] == 500
    for m in traces.values():
        assert len(m["wall_s"]["ours"]) == len(m["wall_s"]["floor"]) == 1
        assert all_positive(m["ours_over_floor"], m["peak_memory_over_file_size"])
        # Every run of ours (the timed one and the warmed-up one) computed the same report.
        assert len(m["report_sha256"]) == 1
        assert m["batch_events_used"] == [_package_batch_events()]
    # The 10 MB trace's batches raise the high-water mark past the warm-up's two events.
    assert traces["mlp"]["peak_memory_after_warm_up_mib"] > 0
    assert doc["worst_time"] in traces and doc["worst_memory"] in traces
    # Against HEAD's exported code: equal on a clean checkout, so this pins that the comparison
    # runs; that it can tell code apart is pinned below (`..._reference_runs_the_reference_code_...`).
    assert doc["reference"]["identical"] == dict.fromkeys(traces, True)


def test_bench_analyze_reference_runs_the_reference_code_not_the_checkouts(tmp_path, monkeypatch):
    """The reference comparison imports the package of the reference tree, even when started from the
    checkout: a tree whose reports differ is found different, an unchanged copy identical, and one
    whose reports lack a field (an older version's) identical on the others, the field named."""
    import gzip
    import shutil

    sys.path.insert(0, str(BENCH))
    import bench_analyze

    trace = tmp_path / "mlp.xplane.pb"
    trace.write_bytes(gzip.decompress((REPO / "tests" / "trace" / "data" / "mlp.xplane.pb.gz").read_bytes()))
    same, changed, older = tmp_path / "same", tmp_path / "changed", tmp_path / "older"
    for tree in (same, changed, older):
        shutil.copytree(
            REPO / "keras_xla_guard", tree / "keras_xla_guard", ignore=shutil.ignore_patterns("__pycache__")
        )
    with (changed / "keras_xla_guard" / "trace" / "analysis.py").open("a") as f:
        f.write(
            "\n_unchanged = analyze_trace\n\n\n"
            "def analyze_trace(*args, **kwargs):\n"
            "    return dataclasses.replace(_unchanged(*args, **kwargs), hosts=('reference',))\n"
        )
    with (older / "keras_xla_guard" / "trace" / "report.py").open("a") as f:
        f.write(
            "\n_to_dict = CoverageReport.to_dict\n\n\n"
            "def _without_steps(self):\n"
            "    d = _to_dict(self)\n"
            "    del d['steps']\n"
            "    return d\n\n\n"
            "CoverageReport.to_dict = _without_steps\n"
        )
    monkeypatch.chdir(REPO)
    found = bench_analyze._same_as_tree(same, {"mlp": trace})
    assert (found["identical"], found["fields_not_in_both"]) == ({"mlp": True}, [])
    found = bench_analyze._same_as_tree(changed, {"mlp": trace})
    assert (found["identical"], found["fields_not_in_both"]) == ({"mlp": False}, [])
    found = bench_analyze._same_as_tree(older, {"mlp": trace})
    assert (found["identical"], found["fields_not_in_both"]) == ({"mlp": True}, ["steps"])


def test_bench_analyze_corpus_batch_size_is_set_in_ours_runs_and_changes_no_report(tmp_path):
    """--batch-events 64: every run of ours ran with batches of 64 events and computed the report the
    package's batch size gives in-process (the batch size changes the cost, never a figure); without
    --corpus, or below 0, a usage error naming it."""
    from keras_xla_guard import analyze_trace

    doc = _corpus_mlp_run(
        tmp_path, "--corpus-scale-events", "", "--alternating-events", "0", "--batch-events", "64"
    )
    assert doc["batch_events"] == 64
    assert doc["traces"]["mlp"]["batch_events_used"] == [64] != [_package_batch_events()]
    import bench_analyze

    ours = analyze_trace(tmp_path / "mlp" / "trace.xplane.pb", top_k=10).to_dict()
    assert doc["traces"]["mlp"]["report_sha256"] == [
        bench_analyze.report_digest(json.loads(json.dumps(ours)))
    ]
    for argv in (["--batch-events", "64"], ["--corpus", "mlp", "--batch-events", "-1"]):
        proc = subprocess.run(
            [sys.executable, str(BENCH / "bench_analyze.py"), *argv],
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 2
        assert (
            f"--batch-events takes a count >= 0, with --corpus only. Received: {int(argv[-1])}" in proc.stderr
        )
