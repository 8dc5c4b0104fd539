"""seam.tf_data: a dataset copy whose reading leaves the original's later reads as they were.

Each test compares the original's next epochs, after its copy was read,
with those of an identical twin that nobody read: the orders must match
element for element. Each also pins that a plain read of the original
would have changed them, so the comparison can fail.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.compat


def _epochs(dataset, n=2):
    return [[np.asarray(e).tolist() for e in dataset] for _ in range(n)]


def _pinned(make):
    """(twin's epochs, original's epochs after a copy was read, epochs after a plain read, the copy)."""
    from keras_xla_guard.seam.tf_data import detached_copy

    twin = _epochs(make())
    original = make()
    copy = detached_copy(original)
    _epochs(copy.dataset, 1)
    after_copy = _epochs(original)
    plain = make()
    list(plain)
    return twin, after_copy, _epochs(plain), copy


@pytest.mark.parametrize(
    "kind",
    [
        "shuffle",
        "shuffle_repeat",
        "cache_shuffle",
        "shuffle_prefetch",
        "random_rerandomized",
        "generator_variable",
    ],
)
def test_reading_a_copy_leaves_the_original_epochs_unchanged(kind):
    """Seed generators (shuffle, Dataset.random), caches and tf.random.Generator state are the copy's own."""
    import tensorflow as tf

    def make():
        base = tf.data.Dataset.range(24)
        if kind == "shuffle":
            return base.shuffle(24, seed=7).batch(4)
        if kind == "shuffle_repeat":
            return base.shuffle(24, seed=7).repeat(2).batch(4)
        if kind == "cache_shuffle":
            return base.cache().shuffle(24, seed=7).batch(4)
        if kind == "shuffle_prefetch":
            return base.shuffle(24, seed=7).batch(4).prefetch(tf.data.AUTOTUNE)
        if kind == "random_rerandomized":
            return tf.data.Dataset.random(seed=3, rerandomize_each_iteration=True).take(6)
        generator = tf.random.Generator.from_seed(5)
        return base.take(6).map(lambda x: generator.uniform_full_int([], tf.int64))

    twin, after_copy, after_plain_read, copy = _pinned(make)
    assert copy.reason is None and copy.runs_python is False
    assert after_copy == twin
    assert after_plain_read != twin


def test_the_copy_reads_what_the_original_first_epoch_would():
    """A copy of a never-read shuffled dataset yields the original's first-epoch order."""
    import tensorflow as tf

    from keras_xla_guard.seam.tf_data import detached_copy

    def make():
        return tf.data.Dataset.range(24).shuffle(24, seed=7).batch(4)

    assert _epochs(detached_copy(make()).dataset, 1)[0] == _epochs(make(), 1)[0]


def test_a_file_cache_becomes_a_memory_cache_in_the_copy(tmp_path):
    """The copy of `cache(filename)` reads the input and writes no cache file."""
    import tensorflow as tf

    from keras_xla_guard.seam.tf_data import detached_copy

    copy = detached_copy(tf.data.Dataset.range(6).cache(str(tmp_path / "cache")))
    assert [int(v) for v in copy.dataset] == list(range(6))
    assert list(tmp_path.iterdir()) == []


def test_pipelines_that_write_files_are_refused(tmp_path):
    """`snapshot` is not copied: the reason names the op, and nothing is written."""
    import tensorflow as tf

    from keras_xla_guard.seam.tf_data import detached_copy

    copy = detached_copy(tf.data.Dataset.range(6).snapshot(str(tmp_path / "snap")))
    assert copy.dataset is None
    assert copy.reason == "it writes files (SnapshotDatasetV2)"
    assert list(tmp_path.iterdir()) == []


def test_a_generator_pipeline_is_copied_and_flagged_as_running_python():
    """from_generator is copied; runs_python says the generator's Python code is shared."""
    import tensorflow as tf

    from keras_xla_guard.seam.tf_data import detached_copy

    copy = detached_copy(
        tf.data.Dataset.from_generator(lambda: iter([1, 2, 3]), output_signature=tf.TensorSpec((), tf.int32))
    )
    assert copy.runs_python is True
    assert [int(v) for v in copy.dataset] == [1, 2, 3]


def test_the_probe_passes_on_this_tensorflow():
    """The process-wide probe finds copies separate on the TensorFlow under test."""
    from keras_xla_guard.seam.tf_data import _probe

    assert _probe() is None
