"""GuardConfig: one validated config for the callback, the loop guard and the engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from keras_xla_guard import XlaGuard, XlaGuardEngine
from keras_xla_guard.runtime.config import CONFIG_ARGS, GuardConfig


def test_defaults_are_normalised_once():
    """Defaults: log_dir a Path, profile_epochs None (the run's second epoch), 8 compilations."""
    config = GuardConfig()
    assert config.log_dir == Path("logs/xla_guard")
    assert (config.profile_epochs, config.explicit_schedule) == (None, False)
    assert (config.skip_steps, config.max_steps, config.top_k) == (2, 20, 10)
    assert (config.max_compilations, config.on_violation, config.verbose) == (8, "warn", 1)
    assert config.schedule.epochs == frozenset()


def test_profile_epochs_from_a_generator_are_kept_sorted():
    """An iterator is consumed once by validation; the config keeps its epochs sorted."""
    config = GuardConfig(profile_epochs=iter([3, 1]))
    assert config.profile_epochs == (1, 3)
    assert config.schedule.epochs == frozenset({1, 3})
    assert GuardConfig(profile_epochs=()).explicit_schedule is True


def test_config_is_frozen():
    """A config cannot change after validation."""
    config = GuardConfig()
    with pytest.raises(AttributeError):
        config.top_k = 3  # type: ignore[misc]  # why: writing a frozen field is the test


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"top_k": -1}, "`top_k` must be an integer >= 0. Received: top_k=-1"),
        ({"max_trace_bytes": 0}, "`max_trace_bytes` must be an integer >= 1. Received: max_trace_bytes=0"),
        (
            {"max_compilations": True},
            "`max_compilations` must be an integer >= 1 or None. Received: max_compilations=True",
        ),
        ({"skip_steps": -2}, "`skip_steps` must be an integer >= 0. Received: skip_steps=-2"),
        ({"max_steps": 0}, "`max_steps` must be an integer >= 1 or None. Received: max_steps=0"),
        ({"profile_every": 0}, "`profile_every` must be an integer >= 1 or None. Received: profile_every=0"),
        ({"verbose": 2}, "`verbose` must be 0 or 1. Received: verbose=2"),
        (
            {"on_violation": "ignore"},
            "`on_violation` must be one of ('warn', 'raise', 'stop'). Received: on_violation='ignore'",
        ),
        ({"log_dir": ""}, "`log_dir` must be a non-empty path. Received: log_dir=''"),
        ({"html_report": 1}, "`html_report` must be None or a file path. Received: html_report=1"),
        (
            {"profile_workers": "worker_1"},
            "`profile_workers` must be one of ('chief', 'all'). Received: profile_workers='worker_1'",
        ),
    ],
)
def test_bad_values_are_named_with_what_is_allowed(kwargs, message):
    """Each bad field gets one ValueError with the field, what is allowed and the value."""
    with pytest.raises(ValueError) as caught:
        GuardConfig(**kwargs)
    assert str(caught.value) == message


def test_remote_log_dir_is_refused():
    """gs:// and friends are refused (pathlib would fold them into a local path)."""
    with pytest.raises(ValueError, match=r"not a URL.*Received: log_dir='gs://bucket/logs'"):
        GuardConfig(log_dir="gs://bucket/logs")


def test_one_config_serves_the_loop_guard_and_the_engine(tmp_path):
    """config= hands the same validated value to the loop guard and to its engine."""
    config = GuardConfig(log_dir=tmp_path, profile_epochs=(2,), verbose=0)
    guard = XlaGuard(config=config)
    assert guard.config is config and guard.engine.config is config
    assert guard.log_dir == str(tmp_path)
    assert XlaGuardEngine(config).config is config


def test_config_and_changed_keywords_together_are_refused(tmp_path):
    """Passing config= and a field that differs from its default is ambiguous: ValueError."""
    config = GuardConfig(log_dir=tmp_path)
    with pytest.raises(ValueError, match=r"XlaGuard takes `config` or .* Received: .* and max_steps, top_k"):
        XlaGuard(config=config, top_k=3, max_steps=5)
    with pytest.raises(ValueError, match=r"`config` must be a GuardConfig or None. Received: config='x'"):
        XlaGuard(config="x")  # type: ignore[arg-type]  # why: the wrong type is the test
    with pytest.raises(ValueError, match="XlaGuardEngine takes a GuardConfig or its fields"):
        XlaGuardEngine(config, top_k=3)


def test_adapters_document_the_fields_with_the_one_text():
    """The callback, the loop guard and GuardConfig include CONFIG_ARGS verbatim; the engine points to it."""
    from keras_xla_guard import XlaGuardCallback

    first_entry = CONFIG_ARGS.splitlines()[0]
    assert "**fields: `GuardConfig`'s fields" in (XlaGuardEngine.__doc__ or "")
    for cls in (GuardConfig, XlaGuard, XlaGuardCallback):
        doc = cls.__doc__ or ""
        assert "{config_args}" not in doc
        assert "        " + first_entry in doc, cls
        assert "            profiles the whole epoch. Defaults to `20`." in doc, cls


def test_adapters_take_every_config_field_from_one_list(tmp_path):
    """XlaGuard and XlaGuardCallback accept and show exactly GuardConfig's fields; an unknown one is a TypeError."""
    import dataclasses
    import inspect

    from keras_xla_guard import XlaGuardCallback

    fields = [f.name for f in dataclasses.fields(GuardConfig) if f.init]
    for cls, own in (
        (XlaGuard, ["config", "strategy", "model", "backend"]),
        (XlaGuardCallback, ["explain", "track_signatures", "warm_up", "config"]),
    ):
        assert list(inspect.signature(cls).parameters) == fields + own
    guard = XlaGuard(tmp_path, max_steps=5, profile_workers="all")
    assert (guard.config.log_dir, guard.config.max_steps, guard.config.profile_workers) == (
        tmp_path,
        5,
        "all",
    )
    with pytest.raises(
        TypeError,
        match=r"^XlaGuard got unexpected keyword argument\(s\) 'explain', 'topk'; "
        r"its config fields are log_dir, profile_epochs, ",
    ):
        XlaGuard(topk=3, explain=True)
