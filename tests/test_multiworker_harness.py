"""The multi-worker harness (tests/_multiworker.py) runs the default mode once
and reports every failed attempt with its signal; only the opt-in all-workers
mode may retry. Its workers here are tiny scripts, no TensorFlow."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from _multiworker import FailedAttempt, run_workers

# Worker 1 aborts (SIGABRT, no core file) while the crash counter beside the
# attempts' log dirs is below CRASHES; a worker exits 3 with --fail.
_WORKER = textwrap.dedent(
    """
    import json, os, resource, signal, sys
    from pathlib import Path

    task, log_dir = int(sys.argv[1]), Path(sys.argv[3])
    crashes = int(sys.argv[4])
    counter = log_dir.parent / "crashes"
    done = int(counter.read_text()) if counter.exists() else 0
    if "--fail" in sys.argv and task == 1:
        sys.exit(3)
    if task == 1 and done < crashes:
        counter.write_text(str(done + 1))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.kill(os.getpid(), signal.SIGABRT)
    print(json.dumps({"task": task}))
    """
)


@pytest.fixture
def worker(tmp_path: Path) -> Path:
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    return script


def _runs(tmp_path: Path) -> int:
    """Attempts started: one log dir name each (`run_0`, `run_1`, ...)."""
    return len(list(tmp_path.glob("logs/run_*_worker0.out")))


def test_default_mode_fails_on_the_first_signal_without_a_retry(worker, tmp_path, capsys):
    """A worker dead by SIGABRT in the default mode fails the run at once, naming the signal."""
    with pytest.warns(FailedAttempt, match=r"attempt 1 failed: worker 1 died by SIGABRT \(exit -6\)"):
        with pytest.raises(AssertionError, match="worker 1 died by SIGABRT") as failure:
            run_workers(worker, tmp_path / "logs" / "run", "1")
    assert _runs(tmp_path) == 1
    assert "attempts:\nmulti-worker attempt 1 failed: worker 1 died by SIGABRT" in str(failure.value)
    assert "attempt 1 failed: worker 1 died by SIGABRT" in capsys.readouterr().err


def test_all_workers_mode_retries_and_reports_every_failed_attempt(worker, tmp_path, capsys):
    """The opt-in mode retries a crash; each failed attempt is warned and printed with its signal."""
    with pytest.warns(FailedAttempt) as warned:
        run = run_workers(worker, tmp_path / "logs" / "run", "2", "--all-workers", crash_attempts=3)
    expected = [f"multi-worker attempt {k} failed: worker 1 died by SIGABRT (exit -6)" for k in (1, 2)]
    assert [str(w.message) for w in warned] == expected
    assert (run["attempts"], run["failed_attempts"], run["port_retries"]) == (3, expected, 0)
    assert [w["task"] for w in run["workers"]] == [0, 1]
    assert run["log_dir"] == tmp_path / "logs" / "run_2"
    assert capsys.readouterr().err.splitlines() == expected
    assert _runs(tmp_path) == 3


def test_all_workers_mode_fails_when_every_attempt_crashed(worker, tmp_path):
    """After its last allowed attempt the run fails, listing each attempt's signal."""
    with pytest.warns(FailedAttempt), pytest.raises(AssertionError) as failure:
        run_workers(worker, tmp_path / "logs" / "run", "5", "--all-workers", crash_attempts=2)
    message = str(failure.value)
    assert message.count("died by SIGABRT") >= 2 and "attempt 2 failed" in message
    assert _runs(tmp_path) == 2


def test_an_error_exit_is_never_retried(worker, tmp_path):
    """A worker exiting with an error (no signal) fails the run at once, in any mode."""
    with pytest.raises(AssertionError, match=r"worker 1 failed \(3\)"):
        run_workers(worker, tmp_path / "logs" / "run", "0", "--all-workers", "--fail", crash_attempts=3)
    assert _runs(tmp_path) == 1


def test_only_the_all_workers_mode_may_retry_crashes(worker, tmp_path):
    """Asking for retries of the default mode is refused, naming the value."""
    with pytest.raises(ValueError, match="crash_attempts=6"):
        run_workers(worker, tmp_path / "logs" / "run", "0", crash_attempts=6)
