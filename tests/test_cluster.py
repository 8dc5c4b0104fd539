"""Multi-worker output (`keras_xla_guard.cluster`): the cluster layout, the
file exchange between workers, and `XlaGuard` in a Keras 3 custom loop under
`MultiWorkerMirroredStrategy` with two real worker processes.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from _multiworker import run_workers

from keras_xla_guard import CoverageReport, OpStat, XlaGuardWarning, analyze_trace
from keras_xla_guard.cluster import (
    ClusterSink,
    read_reports,
    worker_info_from_tf_config,
)
from keras_xla_guard.distributed import REPORTS_FILE, WorkerInfo

_LOOP_WORKER = Path(__file__).with_name("_multiworker_loop_worker.py")
# The profiler's own stop aborts natively now and then under
# MultiWorkerMirroredStrategy (see docs/multiworker.md); each run stops it
# four times (two windows on two workers), so it gets more tries than one
# window would need.
_LOOP_ATTEMPTS = 5
_PROFILED = (0, 2)
_STEPS = 16  # 2048 rows in global batches of 128, all profiled
_FIGURES = ("xla_time_s", "non_xla_op_time_s", "xla_time_fraction", "xla_executions",
            "compilations", "compile_time_s", "compiled_modules", "input_pipeline_time_s",
            "guard_op_time_s", "top_non_xla_ops", "hosts")


def _tf_config(cluster: dict[str, list[str]], task_type: str, index: int) -> str:
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


_TWO = ["127.0.0.1:1", "127.0.0.1:2"]


# ------------------------------------------------------------ cluster layout


def test_tf_config_of_two_workers_names_both_and_the_chief():
    """TF_CONFIG with two workers: worker 0 is the chief; names follow rank order."""
    info = worker_info_from_tf_config(_tf_config({"worker": _TWO}, "worker", 1))
    assert info == WorkerInfo("worker", 1, 2, False, ("worker_0", "worker_1"))
    assert info.name == "worker_1"
    assert worker_info_from_tf_config(_tf_config({"worker": _TWO}, "worker", 0)).is_chief


def test_tf_config_with_a_chief_job_puts_it_first():
    """With a `chief` job the chief task writes the summaries and ranks first."""
    cluster = {"chief": ["h:0"], "worker": _TWO}
    chief = worker_info_from_tf_config(_tf_config(cluster, "chief", 0))
    worker = worker_info_from_tf_config(_tf_config(cluster, "worker", 0))
    assert chief.is_chief and not worker.is_chief
    assert chief.names == ("chief_0", "worker_0", "worker_1")
    assert worker.num_workers == 3


@pytest.mark.parametrize(
    "tf_config",
    [
        None,
        "",
        _tf_config({"worker": ["h:1"]}, "worker", 0),  # one worker: nothing to combine
        _tf_config({"worker": _TWO, "ps": ["h:3"]}, "worker", 0),  # parameter servers
        _tf_config({"worker": _TWO, "evaluator": ["h:3"]}, "evaluator", 0),
    ],
)
def test_tf_config_without_a_multi_worker_task_is_single_worker(tf_config):
    """No TF_CONFIG, one worker, parameter servers or an evaluator task: the guard works alone."""
    assert worker_info_from_tf_config(tf_config) is None


def test_malformed_tf_config_is_refused_with_its_value():
    """A TF_CONFIG that is not a cluster description is a ValueError quoting it."""
    with pytest.raises(ValueError, match=r"Received: '\{not json'"):
        worker_info_from_tf_config("{not json")


# ------------------------------------------------------------ file exchange


def _report(epoch: int, xla: float, non: float, *, signatures: int = 1) -> CoverageReport:
    return CoverageReport(
        epoch=epoch, steps_profiled=4, xla_time_s=xla, non_xla_op_time_s=non,
        xla_time_fraction=xla / (xla + non), xla_executions=4, compilations=1,
        compile_time_s=0.5, distinct_signatures=signatures, new_signatures=0,
        top_non_xla_ops=(OpStat("CollectiveReduceV2", "CollectiveReduceV2", non, 4),),
    )


def _infos() -> tuple[WorkerInfo, WorkerInfo]:
    names = ("worker_0", "worker_1")
    return WorkerInfo("worker", 0, 2, True, names), WorkerInfo("worker", 1, 2, False, names)


def _tensors(log_dir: Path) -> dict[str, list[tuple[int, Any]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    acc = EventAccumulator(str(log_dir), size_guidance={"tensors": 0})
    acc.Reload()
    return {
        tag: [(e.step, tensor_util.make_ndarray(e.tensor_proto)) for e in acc.Tensors(tag)]
        for tag in acc.Tags()["tensors"]
    }


def _wait_for_tag(log_dir: Path, tag: str, timeout: float = 30) -> dict[str, list[tuple[int, Any]]]:
    """The event files' tensors once `tag` is among them (bounded wait)."""
    deadline = time.monotonic() + timeout
    while True:
        tensors = _tensors(log_dir) if any(log_dir.glob("events.out.tfevents.*")) else {}
        if tag in tensors or time.monotonic() > deadline:
            return tensors
        time.sleep(0.1)


def test_report_survives_the_json_round_trip():
    """A report read back from a worker's reports file equals the one written."""
    report = _report(3, 0.3, 0.1)
    assert CoverageReport.from_dict(json.loads(json.dumps(report.to_dict()))) == report


def test_chief_combines_each_epoch_as_soon_as_every_worker_reported(tmp_path):
    """The chief writes per-worker, combined and worst-worker summaries of an epoch before close."""
    chief_info, peer_info = _infos()
    peer = ClusterSink(peer_info, tmp_path)
    chief = ClusterSink(chief_info, tmp_path, timeout=30)
    peer.epoch_report(_report(1, xla=0.1, non=0.3))  # 25% inside XLA: the worst
    chief.epoch_report(_report(1, xla=0.3, non=0.1))  # 75%
    tensors = _wait_for_tag(tmp_path, "xla_guard/workers")  # written before the run ends
    chief.close()
    peer.close()
    assert tensors["xla_guard/worker_0/xla_time_fraction"][0][1] == pytest.approx(0.75)
    assert tensors["xla_guard/worker_1/xla_time_fraction"][0][1] == pytest.approx(0.25)
    ((step, combined),) = tensors["xla_guard/xla_time_fraction"]
    assert step == 1 and float(combined) == pytest.approx(0.4 / 0.8)
    ((_, worst),) = tensors["xla_guard/worst_worker_xla_time_fraction"]
    assert float(worst) == pytest.approx(0.25)
    ((_, executions),) = tensors["xla_guard/xla_executions"]
    assert float(executions) == 8
    assert "Worst worker: worker&#95;1" in tensors["xla_guard/workers"][0][1].item().decode()
    assert read_reports(tmp_path / "worker_1") == {1: _report(1, xla=0.1, non=0.3)}
    assert chief.by_epoch[1] == {"worker_0": _report(1, 0.3, 0.1), "worker_1": _report(1, 0.1, 0.3)}


def test_missing_worker_costs_one_bounded_wait_and_a_warning(tmp_path):
    """A worker that never reports delays the chief once by the timeout, then is not waited for."""
    chief_info, _ = _infos()
    chief = ClusterSink(chief_info, tmp_path, timeout=0.5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        started = time.monotonic()
        chief.epoch_report(_report(0, 0.3, 0.1))
        chief.epoch_report(_report(1, 0.3, 0.1))
        chief.close()
        elapsed = time.monotonic() - started
    messages = [str(w.message) for w in caught if issubclass(w.category, XlaGuardWarning)]
    assert len(messages) == 1 and "no report of epoch 0 from worker_1 within 0.5 s" in messages[0]
    assert 0.5 <= elapsed < 5
    tensors = _tensors(tmp_path)
    # Only the chief's own figures, under the single-worker tags.
    assert [step for step, _ in tensors["xla_guard/xla_time_fraction"]] == [0, 1]
    assert not any(tag.startswith("xla_guard/worker_") for tag in tensors)


def test_reports_file_of_an_earlier_run_is_not_taken_for_this_one(tmp_path):
    """A worker's file saved before the chief's run began is stale: the chief waits it out and warns."""
    chief_info, _ = _infos()
    stale = tmp_path / "worker_1" / REPORTS_FILE
    stale.parent.mkdir(parents=True)
    stale.write_text(json.dumps({"saved_at": time.time() - 3600,
                                 "reports": {"1": _report(1, 0.1, 0.3).to_dict()}}))
    chief = ClusterSink(chief_info, tmp_path, timeout=0.3)
    with pytest.warns(XlaGuardWarning, match="no report of epoch 1 from worker_1"):
        chief.epoch_report(_report(1, 0.3, 0.1))
        chief.close()
    assert chief.by_epoch == {}


# ------------------------------------------- two worker processes, Keras 3 loop


@pytest.fixture(scope="module")
def loop_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two workers run the Keras 3 custom loop with XlaGuard, epochs 0 and 2 profiled."""
    return run_workers(_LOOP_WORKER, tmp_path_factory.mktemp("mw_loop") / "xla_guard",
                       attempts=_LOOP_ATTEMPTS)


@pytest.mark.slow
def test_each_worker_finds_itself_in_the_strategy(loop_run):
    """Worker 0 is the chief; the guard's log_dir stays the shared one."""
    chief, other = loop_run["workers"]
    assert (chief["worker"], chief["is_chief"]) == ("worker_0", True)
    assert (other["worker"], other["is_chief"]) == ("worker_1", False)
    assert chief["log_dir_after"] == other["log_dir_after"] == str(loop_run["log_dir"])
    # Each worker is told once that TensorFlow's profiler can abort it.
    for result in (chief, other):
        assert sum("profiler stop" in w for w in result["warnings"]) == 1
    # Both workers train the same model on the same global batches.
    assert chief["losses"] == other["losses"]
    assert chief["losses"][-1] < chief["losses"][0]


@pytest.mark.slow
def test_each_workers_report_is_its_own_trace_exactly(loop_run):
    """Every report equals analyze_trace of that worker's own trace file, in its own directory."""
    log_dir = loop_run["log_dir"]
    traces = set()
    for result in loop_run["workers"]:
        own = log_dir / result["worker"]
        assert sorted(result["reports"]) == [str(e) for e in _PROFILED]
        for epoch in _PROFILED:
            report = CoverageReport.from_dict(result["reports"][str(epoch)])
            assert report.status == "ok", report.reason
            (trace,) = report.trace_paths
            assert Path(trace).is_relative_to(own / "plugins" / "profile")
            assert Path(trace).parent.name.endswith(f"_epoch{epoch}")
            traces.add(trace)
            alone = analyze_trace(trace)
            for figure in _FIGURES:
                assert getattr(report, figure) == getattr(alone, figure), figure
        assert read_reports(own) == {
            e: CoverageReport.from_dict(r) for e, r in ((int(k), v) for k, v in result["reports"].items())
        }
    assert len(traces) == 4
    # No trace lands outside a worker's own directory.
    assert not (log_dir / "plugins").exists()


@pytest.mark.slow
def test_each_worker_runs_one_xla_step_per_replica_step_and_collectives_outside(loop_run):
    """One replica per worker: one XLA run per step, one compilation in epoch 0, all-reduce outside XLA."""
    for result in loop_run["workers"]:
        first, last = (result["reports"][str(e)] for e in _PROFILED)
        for report in (first, last):
            assert report["steps_profiled"] == report["xla_executions"] == _STEPS
            assert report["distinct_signatures"] == 1
            assert 0 < report["xla_time_fraction"] < 1
            outside = {op["op_type"] for op in report["top_non_xla_ops"]}
            assert "CollectiveReduceV2" in outside
            assert not any("MatMul" in t for t in outside)
        assert (first["compilations"], last["compilations"]) == (1, 0)
        assert (first["new_signatures"], last["new_signatures"]) == (1, 0)


@pytest.mark.slow
def test_chief_writes_every_profiled_epoch_while_training_runs(loop_run):
    """Summaries of epochs 0 and 2 are on disk before the chief's guard is closed."""
    chief, other = loop_run["workers"]
    assert chief["summaries_before_close"] == list(_PROFILED)
    assert other["summaries_before_close"] == []
    log_dir = loop_run["log_dir"]
    files = sorted(log_dir.rglob("events.out.tfevents.*"))
    assert files and all(f.parent == log_dir and f".{chief['pid']}." in f.name for f in files)


@pytest.mark.slow
def test_chief_summaries_equal_each_workers_figures(loop_run):
    """Per-worker tags are each worker's own report; combined figures are their sums; worst is named."""
    tensors = _tensors(loop_run["log_dir"])
    workers = {r["worker"]: r["reports"] for r in loop_run["workers"]}
    for epoch in _PROFILED:
        at = {tag: dict(points).get(epoch) for tag, points in tensors.items()}
        reports = {name: reports[str(epoch)] for name, reports in workers.items()}
        for name, report in reports.items():
            for figure in ("xla_time_fraction", "xla_time_s", "compilations"):
                # Summaries store float32.
                assert float(at[f"xla_guard/{name}/{figure}"]) == pytest.approx(report[figure], rel=1e-6)
        xla = sum(r["xla_time_s"] for r in reports.values())
        ops = xla + sum(r["non_xla_op_time_s"] for r in reports.values())
        assert float(at["xla_guard/xla_time_fraction"]) == pytest.approx(xla / ops, rel=1e-6)
        assert float(at["xla_guard/xla_executions"]) == 2 * _STEPS
        assert float(at["xla_guard/compilations"]) == (2 if epoch == 0 else 0)
        worst = min(reports, key=lambda n: reports[n]["xla_time_fraction"])
        assert float(at["xla_guard/worst_worker_xla_time_fraction"]) == pytest.approx(
            reports[worst]["xla_time_fraction"], rel=1e-6
        )
        assert f"Worst worker: {worst.replace('_', '&#95;')}" in at["xla_guard/workers"].item().decode()


@pytest.mark.slow
def test_stalled_worker_never_holds_the_chief(tmp_path):
    """A worker whose last report comes late: the chief warns after the timeout and finishes first."""
    run = run_workers(_LOOP_WORKER, tmp_path / "xla_guard", "--peer-stalls", attempts=_LOOP_ATTEMPTS)
    chief, other = run["workers"]
    (warning,) = [w for w in chief["warnings"] if "no report of epoch 2 from worker_1" in w]
    assert "within 3 s" in warning
    # The chief closed its guard before the stalled worker had even ended
    # its epoch (it stalls 9 s; the chief waits 3 s of them).
    assert chief["closed_at"] < other["closed_at"] - 3
    assert other["reports"]["2"]["status"] == "ok"
    tensors = _tensors(run["log_dir"])
    # Epoch 0 combines both workers; epoch 2 holds the chief's own figures.
    assert [step for step, _ in tensors["xla_guard/workers"]] == [0]
    fractions = dict(tensors["xla_guard/xla_time_fraction"])
    assert float(fractions[2]) == pytest.approx(chief["reports"]["2"]["xla_time_fraction"], rel=1e-6)
    assert os.path.exists(run["log_dir"] / "worker_1" / REPORTS_FILE)


def test_docs_page_shows_the_example_as_it_is():
    """docs/multiworker.md holds examples/multiworker_custom_loop.py verbatim."""
    root = Path(__file__).resolve().parents[1]
    example = (root / "examples" / "multiworker_custom_loop.py").read_text()
    assert f"```python\n{example}```" in (root / "docs" / "multiworker.md").read_text()
