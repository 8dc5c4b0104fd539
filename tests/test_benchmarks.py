"""Smoke runs of every benchmark script and the demo with tiny arguments.

Only what a tiny run fixes by construction is pinned (steps, arms, compile
counts, keys); timing ratios of tiny runs mean nothing and are only checked
to be positive numbers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _helpers import REPO

pytestmark = pytest.mark.slow

BENCH = REPO / "benchmarks"


def _run(*argv: Any, timeout: float = 300) -> str:
    """Runs a script with this interpreter, the checkout's package first; returns stdout."""
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [sys.executable, *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(REPO),
        env=env,
        check=False,
    )
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    return proc.stdout


def _json(stdout: str) -> dict[str, Any]:
    sys.path.insert(0, str(BENCH))
    from save_result import last_json_object

    return last_json_object(stdout)


def _positive(*values: Any) -> bool:
    return all(isinstance(v, float) and v > 0 for v in values)


def test_bench_fix_counts_each_arms_compilations_in_traces(tmp_path):
    """bench_fix (via save_result): traced compiles 4 / len(boundaries) / 0, as the guard predicts."""
    saved = Path(
        _run(
            BENCH / "save_result.py",
            "--results-dir",
            tmp_path,
            BENCH / "bench_fix.py",
            "--rounds",
            "1",
            "--epochs",
            "1",
            "--examples",
            "256",
            "--batch-size",
            "64",
        ).strip()
    )
    assert saved.parent == tmp_path and saved.name.startswith("bench_fix-")
    doc = json.loads(saved.read_text())
    assert set(doc["machine"]) >= {
        "cpus",
        "load_avg_1min_before",
        "load_avg_1min_after",
        "tensorflow",
        "keras",
        "python",
    }
    assert doc["args"][:2] == ["--rounds", "1"]

    def git(*argv: str) -> str:
        return subprocess.run(["git", *argv], cwd=REPO, capture_output=True, text=True, check=True).stdout

    # The code the result belongs to: the commit, and what was changed on top.
    assert doc["code"] == {
        "commit": git("rev-parse", "--short", "HEAD").strip(),
        "changed_files": sorted(
            line[3:] for line in git("status", "--porcelain", "--untracked-files=no").splitlines()
        ),
    }
    result = doc["result"]
    assert (result["benchmark"], result["rounds"], result["epochs"]) == ("fix_pays", 1, 1)
    arms = result["arms"]
    assert set(arms) == {"xla_unfixed", "xla_bucketed", "no_xla"}
    # 256 examples in batches of 64: 4 batches, each its own length (sorted
    # uniform lengths 64..128), so 4 XLA compiles; no XLA, no compiles.
    unfixed, bucketed, plain = arms["xla_unfixed"], arms["xla_bucketed"], arms["no_xla"]
    assert (unfixed["steps_per_epoch"], unfixed["distinct_shapes"]) == (4, 4)
    assert unfixed["xla_compiles"] == unfixed["guard_expected_compilations"] == 4
    assert (plain["xla_compiles"], plain["guard_expected_compilations"]) == (0, None)
    # The guard's advice, applied: one compile per bucket it recommended.
    assert result["guard_advice"].startswith("fix: pad input x dim 1 to ")
    boundaries = result["recommended_boundaries"]
    assert 1 <= len(boundaries) < 4 and boundaries[-1] == 128
    assert bucketed["xla_compiles"] == bucketed["distinct_shapes"] == len(boundaries)
    assert bucketed["guard_expected_compilations"] == len(boundaries)
    for arm in arms.values():
        assert len(arm["total_s_rounds"]) == 1 and _positive(arm["step_ms_median"])


def test_bench_overhead_has_aa_controls_for_both_ratios():
    """bench_overhead prints both ratios, each beside its A/A control."""
    doc = _json(_run(BENCH / "bench_overhead.py", "--pairs", "1", "--steps", "2", "--batches", "8"))
    assert (doc["benchmark"], doc["pairs"], doc["steps_per_epoch"]) == ("callback_overhead", 1, 8)
    assert doc["track_signatures"] is True
    unprofiled, profiled = doc["unprofiled"], doc["profiled_vs_keras_tensorboard"]
    assert _positive(unprofiled["ratio_median"], unprofiled["aa_ratio"])
    assert _positive(profiled["ratio_median"], profiled["aa_ratio"])
    assert (profiled["profiled_steps"], profiled["goal"], unprofiled["goal"]) == (2, 1.10, 1.01)
    assert set(doc["machine"]) >= {"cpus", "tensorflow", "keras", "load_avg_1min"}


def test_bench_loop_has_an_aa_control():
    """bench_loop times the watched, bare and bare-again arms, prints the A/A ratio and the guard's own cost per call."""
    doc = _json(_run(BENCH / "bench_loop.py", "--rounds", "1", "--batches", "4", "--width", "16"))
    assert (doc["benchmark"], doc["rounds"], doc["steps_per_epoch"], doc["hidden_units"]) == (
        "custom_loop_watch_overhead",
        1,
        4,
        16,
    )
    assert set(doc["epoch_ms_median"]) == {"watched", "bare", "bare_again"}
    assert _positive(doc["ratio"], doc["aa_ratio"], doc["cpu_ratio"])
    assert set(doc["machine"]) >= {"cpus", "tensorflow", "keras", "load_avg_1m"}
    assert isinstance(doc["guard_us_per_call"], float)
    assert doc["guard_share_of_bare_step"] == pytest.approx(
        doc["guard_us_per_call"] / doc["step_us_median"]["bare"], rel=0.01, abs=2e-4
    )
    assert doc["epoch_scope_ms"] > 0
    # Both rounded: the milliseconds to 0.01 (1.25 us a step of 4), the microseconds to 0.1.
    assert doc["epoch_scope_us_per_step"] == pytest.approx(1e3 * doc["epoch_scope_ms"] / 4, abs=1.3)


def test_bench_signatures_runs_both_variants():
    """bench_signatures measures the dynamic and the static input; the static one records nothing."""
    doc = _json(
        _run(
            BENCH / "bench_signatures.py",
            "--rounds",
            "1",
            "--batches",
            "8",
            "--steps",
            "40",
            "--spe",
            "1",
            "--width",
            "16",
        )
    )
    assert (doc["benchmark"], doc["rounds"], doc["steps_per_epoch"]) == ("signature_tracking_overhead", 1, 8)
    variants = {v["variant"]: v for v in doc["variants"]}
    assert set(variants) == {"dynamic_spe1", "static_spe1"}
    # A fully static element_spec needs no recording (docs/signatures.md, "How batches are observed").
    assert variants["static_spe1"]["record_us_per_batch"] == 0.0
    for v in variants.values():
        assert v["steps_per_execution"] == 1
        assert set(v["step_us_median"]) == {"tracked", "untracked", "untracked_again"}
        assert _positive(v["ratio"], v["aa_ratio"])


def test_bench_analyze_times_all_three_contenders():
    """bench_analyze builds a real trace, a replicated larger one and a scaling series, and checks the reports."""
    doc = _json(
        _run(
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
        assert len(doc["wall_s"][name]) == 1 and _positive(doc["median_wall_s"][name])
    assert _positive(doc["xprof_over_ours"], doc["ours_over_floor"], doc["peak_memory_over_file_size"])
    assert 1e6 <= doc["large"]["trace_bytes"] < 2e6 and _positive(doc["large"]["xprof_over_ours"])
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
    return _json(
        _run(
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
        assert _positive(m["ours_over_floor"], m["peak_memory_over_file_size"])
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


def test_bench_doctor_runs_the_command_both_ways():
    """bench_doctor runs `doctor --json` with and without the probe and reports the probe's cost."""
    doc = _json(_run(BENCH / "bench_doctor.py", "--rounds", "1"))
    assert (doc["rounds"], doc["cpus"]) == (1, os.cpu_count())
    assert _positive(doc["doctor_wall_s_median"], doc["no_probe_wall_s_median"], doc["probe_child_s_median"])


def test_demo_json_reports_both_runs(tmp_path):
    """The demo's --json line: Keras' default is 0% XLA on CPU, jit_compile=True one run per step."""
    stdout = _run("-m", "keras_xla_guard.demo", "--epochs", "2", "--log-dir", tmp_path / "demo", "--json")
    doc = json.loads(stdout.strip().splitlines()[-1])
    assert doc["epochs"] == 2
    assert set(doc["runs"]) == {"keras_default", "jit_compile"}
    # Epoch 1 is the one profiled; 4096 rows in batches of 64 is 64 steps,
    # of which the defaults (skip 2, at most 20) profile 20.
    default, jit = doc["runs"]["keras_default"]["1"], doc["runs"]["jit_compile"]["1"]
    # jit_compile="auto" resolves to False on a CPU-only machine.
    assert (default["xla_time_fraction"], default["xla_executions"]) == (0.0, 0)
    assert (jit["steps_profiled"], jit["xla_executions"], jit["compilations"]) == (20, 20, 0)
    assert default["steps_profiled"] == 20


def test_bench_compare_projects_and_trains_both_cases_in_full():
    """bench_compare runs compare and the full runs of both cases; compile counts are 1 and 2 by construction."""
    doc = _json(
        _run(
            BENCH / "bench_compare.py",
            "--rounds",
            "1",
            "--steps",
            "3",
            "--epochs",
            "1",
            "--mlp-batches",
            "4",
            "--seq-batches",
            "4",
            "--lengths",
            "2",
            "--seq-epochs",
            "1",
            "--width",
            "16",
            "--layers",
            "1",
            "--seq-width",
            "16",
        )
    )
    assert (doc["benchmark"], doc["rounds"], doc["steps"]) == ("compare_verdict", 1, 3)
    cases = {c["case"]: c for c in doc["cases"]}
    assert set(cases) == {"xla_pays", "xla_does_not_pay"}
    # One batch shape in the MLP's data; two sequence lengths in the other.
    for name, signatures, steps in (("xla_pays", 1, 4), ("xla_does_not_pay", 2, 4)):
        compared = cases[name]["compare"]
        assert (compared["planned_steps"], compared["planned_signatures"]) == (steps, signatures)
        assert compared["modes"]["plain"]["compilations"] == 0
        assert compared["modes"]["jit_compile"]["compilations"] == signatures
        assert compared["best_mode"] in ("plain", "jit_compile")
        case = cases[name]
        assert all(len(case["full_run_s"][m]) == 1 for m in ("plain", "jit_compile"))
        assert case["best_mode_compare"] == compared["best_mode"]
        assert _positive(
            case["projected_jit_over_plain"], case["measured_jit_over_plain"], case["compare_cost_ratio"]
        )
        assert isinstance(case["ratio_within_tolerance"], bool)
    assert (doc["ratio_tolerance"], doc["cost_goal"]) == (0.25, 3.0)


def test_bench_jit_cpu_times_both_modes_of_one_mobilenet():
    """bench_jit_cpu: one MobileNetV2, plain and jit_compile, first step and the alternated blocks of each."""
    doc = _json(
        _run(
            BENCH / "bench_jit_cpu.py",
            "--rounds",
            "2",
            "--steps",
            "1",
            "--size",
            "32",
            "--alpha",
            "0.35",
            "--batch-size",
            "2",
        )
    )
    assert doc["benchmark"] == "jit_compile_on_cpu" and doc["devices"] == ["CPU"]
    assert doc["model"] == "MobileNetV2(alpha=0.35, input 32x32x3, 10 classes, weights=None)"
    assert set(doc["step_time_s"]) == set(doc["first_step_s"]) == {"plain", "jit_compile"}
    assert all(len(blocks) == 2 and min(blocks) > 0 for blocks in doc["step_time_blocks_s"].values())
    assert doc["jit_over_plain_step_ratio"] == doc["step_time_s"]["jit_compile"] / doc["step_time_s"]["plain"]


def test_bench_html_measures_a_real_page_without_script():
    """bench_html renders a real fit's page: 5 signatures by construction, four plots, no script."""
    doc = _json(_run(BENCH / "bench_html.py", "--rounds", "1"))
    assert (doc["benchmark"], doc["profiled_epochs"], doc["signatures"]) == ("html_report", [1, 2], 5)
    assert set(doc["plot_svg_bytes"]) == {"coverage", "top_ops", "timeline", "compare"}
    assert doc["scripts_on_page"] == 0
    assert sum(doc["plot_svg_bytes"].values()) < doc["page_bytes"]
    assert 0 < doc["page_bytes_gzip"] < doc["page_bytes"]
    assert _positive(doc["first_render_s"], doc["render_s_median"])


def test_stress_multiworker_counts_one_unprofiled_pair():
    """stress_multiworker with one run of the unprofiled loop: one pair, trained, counted ok."""
    doc = _json(
        _run(BENCH / "stress_multiworker.py", "--runs", "1", "--modes", "none", "--scenarios", "loop")
    )
    assert (doc["benchmark"], doc["runs_per_mode"]) == ("stress_multiworker", 1)
    assert (doc["epochs"], doc["steps_per_epoch"], doc["profiled_epochs"]) == (3, 6, [0, 1, 2])
    assert list(doc["summary"]) == ["none/loop"]
    summary = doc["summary"]["none/loop"]
    assert (summary["runs"], summary["ok"], summary["crash"], summary["error"]) == (1, 1, 0, 0)
    assert summary["crashed_workers"] == []
    (run,) = [r for r in doc["runs"] if r["outcome"] != "port"]
    assert (run["mode"], run["scenario"]) == ("none", "loop")
    assert run["report_statuses"] == [{}, {}]  # no guard, no reports
    assert run["traces"] == [0, 0]  # no profiler
    assert _positive(run["wall_s"])


def test_profiler_levels_sees_the_same_xla_runs_at_every_host_tracer_level():
    """profiler_levels: 6 profiled steps give 6 XLA executions and plain ops at levels 1, 2 and 3."""
    doc = _json(_run(BENCH / "profiler_levels.py"))
    assert (doc["benchmark"], doc["steps"]) == ("profiler_levels", 6)
    assert sorted(doc["levels"]) == ["1", "2", "3"]
    for level in doc["levels"].values():
        assert level["xla_executions"] == 6
        assert _positive(level["xla_time_s"], level["non_xla_op_time_s"])
        assert "AssignVariableOp" in level["non_xla_op_types"]  # the optimizer update, outside XLA


def test_tf_crash_reproducer_runs_two_workers_and_counts_signals():
    """tf_profiler_mwms_crash with one tiny attempt: two workers ran; a crash, if any, is a signal."""
    doc = _json(
        _run(BENCH / "tf_profiler_mwms_crash.py", "--attempts", "1", "--windows", "1", "--steps", "1")
    )
    assert (doc["benchmark"], doc["attempts"], doc["windows"], doc["steps"]) == (
        "tf_profiler_mwms_crash",
        1,
        1,
        1,
    )
    (attempt,) = doc["runs"]
    assert len(attempt["returncodes"]) == 2
    # The peer of a worker that died is killed (SIGKILL): not a crash of its own.
    assert attempt["crashed_tasks"] == [t for t, c in enumerate(attempt["returncodes"]) if c < 0 and c != -9]
    assert doc["crashed"] == int(bool(attempt["crashed_tasks"]))
    if not attempt["crashed_tasks"]:
        assert attempt["returncodes"] == [0, 0]


def test_complete_params_events_end_on_grpc_threads_only_on_the_non_chief():
    """complete_params_threads: worker 1's CompleteParams events end on gRPC threads, the chief's never."""
    doc = _json(_run(BENCH / "complete_params_threads.py"))
    assert (doc["benchmark"], doc["event"]) == ("complete_params_threads", "CompleteParams")
    assert sorted(doc["workers"]) == ["worker_0", "worker_1"]
    for worker, windows in doc["workers"].items():
        assert sorted(windows) == ["epoch0", "epoch2"]
        for threads in windows.values():
            assert sum(threads.values()) > 0
            grpc = {t for t in threads if t.startswith("tf_Grpc")}
            assert grpc == (set(threads) if worker == "worker_1" else set())


def test_bench_compile_cost_one_round_shows_warm_up_and_cache_removing_window_compiles():
    """One round: 4 bucket shapes compile 4 programs plain, 0 after warm_up, 0 from a filled cache."""
    doc = _json(_run(BENCH / "bench_compile_cost.py", "--rounds", "1"))
    assert (doc["benchmark"], doc["epochs"], doc["bucket_shapes"]) == ("bench_compile_cost", 3, 4)
    (round_,) = doc["rounds"]
    assert (round_["plain"]["window_compilations"], round_["plain"]["cache_hits"]) == (4, 0)
    assert (round_["warm_up"]["window_compilations"], round_["warm_up"]["cache_hits"]) == (0, 4)
    assert (round_["cache_first"]["window_compilations"], round_["cache_first"]["cache_files_added"]) == (
        4,
        4,
    )
    assert (
        round_["cache_second"]["window_compilations"],
        round_["cache_second"]["cache_files_added"],
        round_["cache_second"]["cache_hits"],
    ) == (0, 0, 4)
    assert round_["cache_second"]["persistent_cache"] == round_["cache_first"]["persistent_cache"]
    assert round_["warm_up_cache_second"]["window_compilations"] == 0
    assert round_["plain"]["persistent_cache"] is None
    assert _positive(
        round_["plain"]["first_epoch_s"], round_["warm_up"]["warm_up_s"], round_["plain"]["window_compile_s"]
    )


def test_cache_key_check_pins_when_tensorflow_s_persistent_cache_hits():
    """TF's XLA cache: a rerun adds no file; tracing other functions first misses (2 new files)."""
    doc = _json(_run(BENCH / "cache_key_check.py"))
    assert doc["benchmark"] == "cache_key_check"
    assert doc["files_added"] == {
        "first": doc["jit_programs"],
        "same_program": 0,
        "other_functions_traced_first": doc["jit_programs"],
        "autoclustering_first": 2,
        "autoclustering_second": 0,
    }
    assert doc["jit_programs"] == 2
