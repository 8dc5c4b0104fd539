"""_checks: one wording for a bad integer argument, wherever it is raised."""

from __future__ import annotations

import pytest

from keras_xla_guard._checks import check_int, is_int


def test_is_int_excludes_bool():
    """True is an int to Python but never a count to the guard."""
    assert is_int(3) and is_int(0) and not is_int(True) and not is_int(2.0) and not is_int("2")


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "3", None])
def test_check_int_names_the_argument_and_the_value(value):
    """Below the minimum, not an int, a bool or a disallowed None: one ValueError, quoted."""
    with pytest.raises(ValueError) as caught:
        check_int("steps", value, minimum=1)
    assert str(caught.value) == f"`steps` must be an integer >= 1. Received: steps={value!r}"


def test_check_int_allows_none_when_asked():
    """allow_none passes None through and says so in the error."""
    assert check_int("max_steps", None, minimum=1, allow_none=True) is None
    assert check_int("max_steps", 4, minimum=1, allow_none=True) == 4
    with pytest.raises(
        ValueError, match=r"^`max_steps` must be an integer >= 1 or None. Received: max_steps=0$"
    ):
        check_int("max_steps", 0, minimum=1, allow_none=True)
