"""The engine's per-function API: the test and predict functions' calls, each with its own signatures."""

from __future__ import annotations

import numpy as np
import pytest

from keras_xla_guard import XlaGuardEngine, XlaGuardWarning
from keras_xla_guard.runtime.sink import CallRecord
from keras_xla_guard.signatures import Signature


class _Sink:
    """Keeps epochs, calls and closes in arrival order."""

    def __init__(self) -> None:
        self.events: list[tuple] = []

    def write_epoch(self, record):
        self.events.append(("epoch", record.epoch, record.calls))

    def write_call(self, record):
        self.events.append(("call", record))

    def close(self, records):
        self.events.append(("close", tuple(sorted(records))))


class _EpochOnlySink:
    """A sink written before calls existed: no write_call."""

    def __init__(self) -> None:
        self.closed: list = []

    def write_epoch(self, record):
        pass

    def close(self, records):
        self.closed.append(dict(records))


class _Function:
    """Stands in for one of Keras' cached functions (compared by identity)."""


def _sig(*lengths: int) -> list[Signature]:
    return [Signature.of(np.zeros((2, n))) for n in lengths]


def _call(engine: XlaGuardEngine, function: str, lengths, program=None, xla_mode="jit_compile") -> CallRecord:
    engine.call_begin(function, xla_mode=xla_mode, program=program)
    for step, sig in enumerate(_sig(*lengths)):
        engine.observe_signature(sig, step=step, function=function)
    record = engine.call_end(function)
    assert record is not None
    return record


def test_a_validation_comes_in_its_epochs_record_with_its_own_signatures(tmp_path):
    """A test call inside an epoch is that epoch's validation: its shapes are new to the test function."""
    sink = _Sink()
    engine = XlaGuardEngine(log_dir=tmp_path, profile_epochs=(), sinks=[sink])
    engine.train_begin(epochs=2, xla_mode="jit_compile")
    test_function = _Function()
    for epoch in range(2):
        engine.epoch_begin(epoch)
        for step, sig in enumerate(_sig(3, 4)):
            engine.observe_signature(sig, step=step)
        _call(engine, "test", [3, 5], program=test_function)
        engine.epoch_end(epoch)
    engine.train_end()
    (_, e0, calls0), (_, e1, calls1), close = sink.events
    assert (e0, e1, close) == (0, 1, ("close", (0, 1)))
    assert [(c.function, c.call, c.epoch, c.kind) for c in calls0 + calls1] == [
        ("test", 0, 0, "validation"),
        ("test", 1, 1, "validation"),
    ]
    # Shape 3 was the train function's already, and is still the test function's first.
    assert [c.signatures.expected_compilations for c in calls0 + calls1] == [2, 0]
    assert [c.signatures.compilations_so_far for c in calls0 + calls1] == [2, 2]
    assert calls0[0].signatures.function == "test" and calls0[0].signatures.epoch == 0
    assert [s.expected_compilations for s in engine.signatures.values()] == [2, 0]
    assert engine.calls == calls0 + calls1


def test_calls_outside_a_run_publish_through_fresh_sinks(tmp_path):
    """evaluate/predict after fit: a factory's new sinks get write_call, then close with no epochs."""
    made: list[_Sink] = []

    def factory(config):
        made.append(_Sink())
        return [made[-1]]

    engine = XlaGuardEngine(log_dir=tmp_path, profile_epochs=(), sinks=factory)
    evaluate = _call(engine, "test", [7, 7, 2], program="keras test function")
    predict = _call(engine, "predict", [7, 2], program="keras predict function")
    assert [sink.events for sink in made] == [
        [("call", evaluate), ("close", ())],
        [("call", predict), ("close", ())],
    ]
    assert (evaluate.kind, evaluate.epoch, evaluate.call) == ("evaluate", None, 0)
    assert (
        evaluate.signatures.steps,
        evaluate.signatures.distinct_signatures,
        evaluate.signatures.expected_compilations,
    ) == (3, 2, 2)
    assert (predict.kind, predict.signatures.expected_compilations) == ("predict", 2)


def test_a_sink_without_write_call_still_closes(tmp_path):
    """write_call is optional: a sink without it is closed after the call, nothing else."""
    sink = _EpochOnlySink()
    engine = XlaGuardEngine(log_dir=tmp_path, profile_epochs=(), sinks=[sink])
    _call(engine, "predict", [4])
    assert sink.closed == [{}]


def test_a_function_keeps_its_signatures_while_its_program_stays_the_same(tmp_path):
    """Same program: seen shapes cost nothing again; a new program (recompiled model) starts afresh."""
    engine = XlaGuardEngine(log_dir=tmp_path, profile_epochs=())
    first, second = _Function(), _Function()
    counts = [
        _call(engine, "test", lengths, program=program).signatures.expected_compilations
        for lengths, program in [([3, 5], first), ([3, 5, 6], first), ([3], second), ([3], None), ([3], None)]
    ]
    assert counts == [2, 1, 1, 1, 1]
    assert [c.call for c in engine.calls] == [0, 1, 2, 3, 4]
    # The predict function is another function: the test function's shapes are new to it.
    assert _call(engine, "predict", [3], program=first).signatures.expected_compilations == 1


def test_a_second_run_of_the_same_train_function_counts_no_seen_signature_again(tmp_path):
    """train_begin(program=...): Keras' cached train function compiles a seen shape once per process."""
    engine = XlaGuardEngine(log_dir=tmp_path, profile_epochs=())
    function = _Function()

    def run(program):
        engine.train_begin(epochs=1, xla_mode="jit_compile", program=program)
        engine.epoch_begin(0)
        for step, sig in enumerate(_sig(3, 4)):
            engine.observe_signature(sig, step=step)
        engine.epoch_end(0)
        engine.train_end()
        return engine.signatures[0]

    assert (run(function).expected_compilations, run(function).expected_compilations) == (2, 0)
    assert run(function).compilations_so_far == 2
    assert run(_Function()).expected_compilations == 2
    assert (run(None).expected_compilations, run(None).expected_compilations) == (2, 2)


def test_a_function_not_compiled_by_xla_expects_no_compilation(tmp_path):
    """xla_mode=None: signatures are counted, expected_compilations is None (not 0)."""
    engine = XlaGuardEngine(log_dir=tmp_path, profile_epochs=())
    stats = _call(engine, "test", [3, 5], xla_mode=None).signatures
    assert (stats.distinct_signatures, stats.new_signatures, stats.expected_compilations) == (2, 2, None)


def test_unavailable_call_figures_are_none_with_the_reason_and_warn_once_per_function(tmp_path):
    """signatures_unavailable(function=...) empties that call only; one warning per function."""
    engine = XlaGuardEngine(log_dir=tmp_path, profile_epochs=())
    with pytest.warns(
        XlaGuardWarning, match="input signatures of the test function are unavailable: keras 9"
    ):
        engine.call_begin("test", xla_mode="jit_compile")
        engine.signatures_unavailable("keras 9", function="test")
        first = engine.call_end("test")
    engine.call_begin("test", xla_mode="jit_compile")
    engine.signatures_unavailable("keras 9 again", function="test")
    second = engine.call_end("test")
    assert (first.signatures, first.signatures_unavailable) == (None, "keras 9")
    assert (second.signatures, second.signatures_unavailable) == (None, "keras 9 again")
    assert _call(engine, "test", [3]).signatures.expected_compilations == 1


def test_call_begin_rejects_the_train_function_and_a_bad_xla_mode(tmp_path):
    """function and xla_mode are checked with the allowed values named."""
    engine = XlaGuardEngine(log_dir=tmp_path, profile_epochs=())
    with pytest.raises(
        ValueError,
        match=r"`function` must be one of \('test', 'predict'\) \(the train "
        r"function's calls are epochs\). Received: function='train'",
    ):
        engine.call_begin("train")
    with pytest.raises(ValueError, match=r"Received: xla_mode='xla'"):
        engine.call_begin("test", xla_mode="xla")


def test_steps_of_a_function_without_an_open_call_warn_and_count_nowhere(tmp_path):
    """observe_signature(function='predict') outside call_begin/call_end is a warning, never an error."""
    engine = XlaGuardEngine(log_dir=tmp_path, profile_epochs=())
    with pytest.warns(XlaGuardWarning, match=r"no call of the 'predict' function is open"):
        engine.observe_signature(_sig(3)[0], function="predict")
    assert engine.call_end("predict") is None
    assert engine.calls == ()


def test_a_call_record_serializes_with_its_kind(tmp_path):
    """CallRecord.to_dict: the fields, the kind, and the signature figures as EpochSignatures.to_dict."""
    engine = XlaGuardEngine(log_dir=tmp_path, profile_epochs=())
    record = _call(engine, "predict", [3])
    data = record.to_dict()
    assert {k: data[k] for k in ("function", "call", "epoch", "kind", "signatures_unavailable")} == {
        "function": "predict",
        "call": 0,
        "epoch": None,
        "kind": "predict",
        "signatures_unavailable": None,
    }
    assert data["signatures"] == record.signatures.to_dict()
    assert data["signatures"]["function"] == "predict"
