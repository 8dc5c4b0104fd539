"""Profiler sessions of several processes sharing one log dir: one session
ending (its staging removed) while another creates its staging must not fail
the other's start. The other process is played in this one, at the exact
moment, by a second session's own discard; the profiler is TensorFlow's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _fit_helpers import profiler_is_free

from keras_xla_guard.runtime.profiler import STAGING_DIR, ProfilerSession

pytestmark = pytest.mark.slow


def test_start_survives_another_process_discarding_its_staging_meanwhile(tmp_path, monkeypatch):
    """A session whose staging is being created while another's window ends still starts and publishes."""
    import tensorflow as tf

    other = ProfilerSession(tmp_path, run_name="other")
    real_mkdir = Path.mkdir
    interleaved: list[Path] = []

    def mkdir(self: Path, *args: Any, **kwargs: Any) -> None:
        real_mkdir(self, *args, **kwargs)
        if not interleaved and self != other._staging:
            # Right after this session made a directory on the way to its
            # staging, the other process's window starts and ends.
            interleaved.append(self)
            other._staging.mkdir(parents=True)
            other._discard_staging()

    monkeypatch.setattr(Path, "mkdir", mkdir)
    session = ProfilerSession(tmp_path, run_name="epoch0")
    session.start()
    monkeypatch.undo()
    assert interleaved and not other._staging.exists()
    tf.reduce_sum(tf.ones((4, 4))).numpy()
    (trace,) = session.stop()
    assert trace.parent.parent == tmp_path / "plugins" / "profile"
    assert trace.parent.name.endswith("_epoch0")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(STAGING_DIR)] == []
    assert profiler_is_free()


def test_staging_dirs_of_sessions_share_no_parent_but_the_log_dir(tmp_path):
    """Each session stages in a directory of its own directly under the log dir, so no
    session ever removes a directory another one needs."""
    first, second = ProfilerSession(tmp_path, "a"), ProfilerSession(tmp_path, "a")
    assert first._staging.parent == second._staging.parent == tmp_path
    assert first._staging != second._staging
    assert first._staging.name.startswith(f"{STAGING_DIR}-a-")
