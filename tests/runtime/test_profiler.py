"""Tests for ProfilerSession with TensorFlow's real profiler.

Faults are injected by patching `tf.profiler.experimental.stop`; the
profiler itself and the traces it writes are real.
"""

from __future__ import annotations

import errno
import gc
import threading
from pathlib import Path

import pytest
from _fit_helpers import profiler_is_free

from keras_xla_guard.errors import ProfilerBusyError
from keras_xla_guard.runtime.profiler import (
    STAGING_DIR,
    ProfilerSession,
    SessionLostError,
    stop_stale_session,
)

pytestmark = pytest.mark.slow


def _work() -> None:
    """A few real ops, so the trace has events."""
    import tensorflow as tf

    tf.reduce_sum(tf.matmul(tf.ones((8, 8)), tf.ones((8, 8)))).numpy()


def _fake_stop(monkeypatch: pytest.MonkeyPatch, exc: BaseException, *, stop_first: bool) -> None:
    """Makes TF's stop raise `exc` once, after really stopping if `stop_first`."""
    import tensorflow as tf

    real_stop = tf.profiler.experimental.stop

    def stop(*args, **kwargs):
        monkeypatch.setattr(tf.profiler.experimental, "stop", real_stop)
        if stop_first:
            real_stop(*args, **kwargs)
        raise exc

    monkeypatch.setattr(tf.profiler.experimental, "stop", stop)


def test_sessions_with_one_name_each_get_their_own_run_dir(tmp_path):
    """Back-to-back sessions named alike write three run dirs; no trace is overwritten."""
    files, contents = [], []
    for _ in range(3):
        session = ProfilerSession(tmp_path, run_name="epoch0")
        session.start()
        _work()
        (trace,) = session.stop()
        files.append(trace)
        contents.append(trace.read_bytes())
    assert len({f.parent for f in files}) == 3
    assert all(f.parent.parent == tmp_path / "plugins" / "profile" for f in files)
    assert all("_epoch0" in f.parent.name for f in files)
    assert [f.read_bytes() for f in files] == contents
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(STAGING_DIR)]
    assert profiler_is_free()


def test_interrupt_inside_tf_stop_keeps_the_session_for_a_retry(tmp_path, monkeypatch):
    """KeyboardInterrupt in TF's stop leaves the session tracked; the stale stop finishes it."""
    session = ProfilerSession(tmp_path)
    session.start()
    _work()
    _fake_stop(monkeypatch, KeyboardInterrupt(), stop_first=False)
    with pytest.raises(KeyboardInterrupt):
        session.stop()
    assert session.running
    assert not profiler_is_free()
    with pytest.warns(UserWarning, match="left running"):
        assert stop_stale_session() is True
    assert not session.running
    assert len(session.trace_files) == 1
    assert session.trace_files[0].is_file()
    assert profiler_is_free()


def test_interrupt_after_tf_stopped_still_publishes_the_trace(tmp_path, monkeypatch):
    """An interrupt after TF wrote the trace: the retry finds no profiler and keeps the trace."""
    session = ProfilerSession(tmp_path)
    session.start()
    _work()
    _fake_stop(monkeypatch, KeyboardInterrupt(), stop_first=True)
    with pytest.raises(KeyboardInterrupt):
        session.stop()
    assert session.running
    (trace,) = session.stop()
    assert trace.parent.parent == tmp_path / "plugins" / "profile"
    assert profiler_is_free()


def test_a_second_guard_session_is_refused_while_one_runs(tmp_path):
    """Starting while another guard session runs raises ProfilerBusyError naming its log dir and thread."""
    first = ProfilerSession(tmp_path / "a")
    first.start()
    second = ProfilerSession(tmp_path / "b")
    with pytest.raises(ProfilerBusyError) as info:
        second.start()
    assert str(info.value) == (
        "another keras-xla-guard profiling window is running in this process "
        f"(log_dir={str(tmp_path / 'a')!r}, started on thread 'MainThread'); one profiler runs at a time"
    )
    assert first.running
    assert len(first.stop()) == 1
    assert profiler_is_free()


def test_session_replaced_by_someone_else_is_not_stopped(tmp_path):
    """If the user stopped ours and started their own, stop() raises SessionLostError and leaves theirs."""
    import tensorflow as tf

    session = ProfilerSession(tmp_path / "guard")
    session.start()
    tf.profiler.experimental.stop()
    tf.profiler.experimental.start(str(tmp_path / "user"))
    with pytest.raises(SessionLostError, match="stopped by someone else"):
        session.stop()
    assert not session.running
    assert not profiler_is_free()
    tf.profiler.experimental.stop()
    assert len(list((tmp_path / "user").rglob("*.xplane.pb"))) == 1
    assert not (tmp_path / "guard" / "plugins").exists()


def test_failed_trace_write_raises_and_forgets_the_session(tmp_path, monkeypatch):
    """A disk-full error from TF's stop propagates; the session is over and staging removed."""
    session = ProfilerSession(tmp_path)
    session.start()
    _fake_stop(monkeypatch, OSError(errno.ENOSPC, "No space left on device"), stop_first=True)
    with pytest.raises(OSError, match="No space left"):
        session.stop()
    assert not session.running
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(STAGING_DIR)]
    assert stop_stale_session() is False
    assert profiler_is_free()


def test_run_dir_names_keep_tf_timestamp_and_the_run_name(tmp_path):
    """The run dir is `<TF timestamp>_<run_name>`, where TensorBoard lists runs."""
    session = ProfilerSession(tmp_path, run_name="epoch3")
    session.start()
    (trace,) = session.stop()
    name = Path(trace).parent.name
    assert name.endswith("_epoch3")
    assert len(name.split("_")) == 7  # YYYY_MM_DD_HH_MM_SS_epoch3


def test_a_live_session_is_never_stale_from_any_thread(tmp_path):
    """A running session of a live owner on a live thread: no stale stop, from this thread or another."""
    owner = type("Guard", (), {})()
    session = ProfilerSession(tmp_path, owner=owner)
    session.start()
    assert session.stale_reason() is None
    assert stop_stale_session() is False
    elsewhere: list[bool] = []
    thread = threading.Thread(target=lambda: elsewhere.append(stop_stale_session()))
    thread.start()
    thread.join()
    assert elsewhere == [False]
    assert session.running
    _work()
    assert len(session.stop()) == 1
    assert profiler_is_free()


def test_a_session_whose_thread_ended_is_stopped_and_its_owner_told(tmp_path):
    """Started on a thread that ended: stopped as stale with a warning; the owner's stop() says lost."""
    session = ProfilerSession(tmp_path)
    thread = threading.Thread(target=session.start, name="trainer")
    thread.start()
    thread.join()
    assert session.stale_reason() == "the thread that started it ('trainer') has ended"
    with pytest.warns(
        UserWarning, match=r"left running by an interrupted training \(the thread that started"
    ):
        assert stop_stale_session() is True
    assert profiler_is_free()
    with pytest.raises(
        SessionLostError, match="stopped by keras-xla-guard as stale .* before the window ended"
    ):
        session.stop()


def test_a_session_whose_owner_is_gone_is_stale(tmp_path):
    """Once the owning guard is garbage-collected, its running session is stale and stopped."""
    owner = type("Guard", (), {})()
    session = ProfilerSession(tmp_path, owner=owner)
    session.start()
    assert session.stale_reason() is None
    del owner
    gc.collect()
    assert session.stale_reason() == "the guard that started it is gone"
    with pytest.warns(UserWarning, match="the guard that started it is gone"):
        assert stop_stale_session() is True
    assert not session.running
    assert profiler_is_free()


def test_a_stop_that_hangs_is_waited_for_a_bounded_time_and_frees_the_profiler_when_it_ends(
    tmp_path, monkeypatch
):
    """TF's stop blocked (a hung disk): stop(timeout) raises StopTimeoutError in time, the session counts
    as running meanwhile (a second guard is refused), and when the stop ends the profiler is free and the
    trace published."""
    import time

    import tensorflow as tf

    from keras_xla_guard.runtime.profiler import StopTimeoutError

    real_stop = tf.profiler.experimental.stop
    disk = threading.Event()

    def hung_stop(*args, **kwargs):
        disk.wait(30)
        return real_stop(*args, **kwargs)

    monkeypatch.setattr(tf.profiler.experimental, "stop", hung_stop)
    session = ProfilerSession(tmp_path / "a")
    session.start()
    _work()
    started = time.perf_counter()
    with pytest.raises(
        StopTimeoutError, match=r"did not finish within 0.3 s .* frees the profiler when it ends"
    ):
        session.stop(timeout=0.3)
    assert time.perf_counter() - started < 5
    assert session.running and session.stale_reason() == "its stop was interrupted"
    with pytest.raises(ProfilerBusyError):
        ProfilerSession(tmp_path / "b").start()
    disk.set()
    (trace,) = session.stop(timeout=30)
    assert trace.is_file() and trace.parent.parent == tmp_path / "a" / "plugins" / "profile"
    assert not session.running
    assert profiler_is_free()
