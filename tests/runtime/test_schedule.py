"""Tests for keras_xla_guard.runtime.schedule: which epochs and steps are profiled."""

from __future__ import annotations

import pytest

from keras_xla_guard.runtime.schedule import ProfileSchedule


def test_int_iterable_and_range_select_epochs():
    """profile_epochs accepts an int, an iterable of ints and a range."""
    assert ProfileSchedule.create(3, None).epochs == {3}
    assert ProfileSchedule.create((0, 2), None).epochs == {0, 2}
    assert ProfileSchedule.create(range(2, 5), None).epochs == {2, 3, 4}
    assert ProfileSchedule.create(iter([1]), None).epochs == {1}


def test_profile_every_counts_from_the_first_epoch():
    """profile_every=N selects epochs first, first+N, ... and adds to listed epochs."""
    s = ProfileSchedule.create(7, 3)
    assert [e for e in range(10) if s.profiles_epoch(e)] == [0, 3, 6, 7, 9]
    assert [e for e in range(5, 12) if s.profiles_epoch(e, first_epoch=5)] == [5, 7, 8, 11]


def test_window_start_skips_steps_unless_the_epoch_is_too_short():
    """The window starts at skip_steps, or at 0 when the epoch has no more steps than that."""
    s = ProfileSchedule.create(0, None, skip_steps=2)
    assert s.start_step(None) == 2
    assert s.start_step(10) == 2
    assert s.start_step(2) == 0


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ((True, None), "profile_epochs=True"),
        (("12", None), "profile_epochs='12'"),
        (([1, -3], None), "profile_epochs=[1, -3]"),
        ((None, 0), "profile_every=0"),
        ((None, 1.5), "profile_every=1.5"),
        ((None, None, -1), "skip_steps=-1"),
        ((None, None, 0, 0), "max_steps=0"),
    ],
)
def test_invalid_arguments_name_the_value(args, needle):
    """Each invalid argument is a ValueError quoting the received value."""
    with pytest.raises(ValueError) as info:
        ProfileSchedule.create(*args)
    assert needle in str(info.value)


def test_defaults_bound_the_trace():
    """By default two steps are skipped and at most 20 profiled."""
    s = ProfileSchedule.create(None, None)
    assert (s.skip_steps, s.max_steps) == (2, 20)
    assert not s.profiles_epoch(0)
