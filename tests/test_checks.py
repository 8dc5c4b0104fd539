"""_checks: one wording for a bad integer argument, wherever it is raised."""

from __future__ import annotations

import pytest

from keras_xla_guard._checks import check_bool, check_int, check_model, is_int


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


@pytest.mark.parametrize("value", ["no", "False", 0, 1, None, [True]])
def test_check_bool_refuses_what_python_would_read_as_a_flag(value):
    """A flag is True or False: "no" would be True to `bool`, 0 and None False; each is refused, quoted."""
    with pytest.raises(ValueError) as caught:
        check_bool("fail_fast", value)
    assert str(caught.value) == f"`fail_fast` must be True or False. Received: fail_fast={value!r}"


def test_check_bool_passes_booleans_through():
    assert check_bool("flag", True) is True and check_bool("flag", False) is False


def _flag_takers():
    """Every public entry point's flag, as a call taking the flag's value."""
    from keras_xla_guard import (
        GuardConfig,
        SignatureTracker,
        XlaGuard,
        XlaGuardCallback,
        doctor,
        max_compilations,
        pad_to_buckets,
    )

    def dataset():
        import tensorflow as tf

        return tf.data.Dataset.from_tensor_slices(tf.zeros((4, 3), tf.int32))

    return {
        "fail_fast": lambda v: max_compilations(1, fail_fast=v),
        "write_summaries": lambda v: GuardConfig(write_summaries=v),
        "async_analysis": lambda v: XlaGuard(async_analysis=v),
        "track_signatures": lambda v: XlaGuardCallback(track_signatures=v),
        "xla": lambda v: SignatureTracker(xla=v),
        "probe": lambda v: doctor(probe=v),
        "check_devices": lambda v: doctor(check_devices=v),
        "resolve_keras": lambda v: doctor(resolve_keras=v),
        "drop_remainder": lambda v: pad_to_buckets(dataset(), (4,), 2, drop_remainder=v),
    }


_FLAGS = [
    "fail_fast",
    "write_summaries",
    "async_analysis",
    "track_signatures",
    "xla",
    "probe",
    "check_devices",
    "resolve_keras",
    "drop_remainder",
]


def test_the_flag_list_is_every_flag_taker():
    assert sorted(_flag_takers()) == sorted(_FLAGS)


@pytest.mark.parametrize("flag", _FLAGS)
@pytest.mark.parametrize("value", ["no", 1, None])
def test_every_public_flag_takes_only_a_boolean(flag, value):
    """`max_compilations(1, fail_fast="no")` turned fail-fast on; now it and every other flag raise."""
    with pytest.raises(ValueError) as caught:
        _flag_takers()[flag](value)
    assert str(caught.value) == f"`{flag}` must be True or False. Received: {flag}={value!r}"


def test_check_model_takes_only_a_built_keras_model_instance():
    """The class, a subclass, a duck type and an unbuilt model are refused naming the value; a built one passes."""
    import keras

    class Mine(keras.Sequential):
        pass

    class Duck:
        layers: list = []

        def count_params(self) -> int:
            return 0

    built = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    assert check_model("model", built) is built and check_model("model", None) is None
    for value, said in [
        (keras.Sequential, "got a model class"),
        (Mine, "got a model class"),
        (Duck(), "got a Duck, not a Keras model"),
        ("mlp", "got a str, not a Keras model"),
    ]:
        with pytest.raises(ValueError) as caught:
            check_model("model", value)
        assert str(caught.value) == (
            f"`model` must be a Keras model instance (keras.Model or tf_keras.Model) or None; {said}. "
            f"Received: model={value!r}"
        )
    unbuilt = keras.Sequential([keras.layers.Dense(1)])
    with pytest.raises(ValueError, match=r"must be a built Keras model: build it first"):
        check_model("model", unbuilt)
