"""The run's compilations and headline (`output/run_summary.py`), on run data built as the sinks build it."""

from __future__ import annotations

import pytest

from keras_xla_guard.output.run_summary import (
    compilation_violations,
    parse_limit,
    run_compilations,
    run_headline,
)
from keras_xla_guard.output.runfile import RunData
from keras_xla_guard.runtime.compile_log import Compilation, EpochCompilations, predicted_compilations
from keras_xla_guard.runtime.sink import CallRecord
from keras_xla_guard.signatures.signature import Signature
from keras_xla_guard.signatures.tracker import SignatureTracker
from keras_xla_guard.trace.report import CoverageReport


def _sig(length: int, dtype: str = "float32") -> Signature:
    return Signature(("x", "y"), ((8, length, 3), (8, 1)), (dtype, "float32"))


def _epochs(lengths_per_epoch, warmed=()) -> tuple[list, list]:
    """Signature figures and predicted compilations of a jit_compile train step over the given lengths."""
    tracker = SignatureTracker(xla=True)
    tracker.seed([_sig(n) for n in warmed])
    figures, compiled = [], []
    for epoch, lengths in enumerate(lengths_per_epoch):
        tracker.begin_epoch(epoch)
        for step, n in enumerate(lengths):
            tracker.observe(_sig(n), step=step)
        stats = tracker.end_epoch()
        figures.append(stats)
        compiled.append(predicted_compilations(epoch, [stats]))
    return figures, compiled


@pytest.mark.parametrize(
    ("fractions", "level", "start"),
    [
        (
            (0.95, 0.9),
            "good",
            "XLA ran 90.0% or more of op time in every profiled window (lowest: epoch 2);",
        ),
        ((0.95,), "good", "XLA ran 95.0% of op time in epoch 1;"),
        ((0.95, 0.5), "partial", "XLA ran only 50.0% of op time in epoch 2;"),
        ((0.2, 0.5), "low", "XLA ran only 20.0% of op time in epoch 1:"),
    ],
)
def test_without_recompilation_the_headline_is_the_lowest_window(fractions, level, start) -> None:
    """No function compiled twice: the headline names the worst profiled window; levels at 90 % and 50 %."""
    reports = [CoverageReport(epoch=e, xla_time_fraction=f) for e, f in enumerate(fractions, 1)]
    found = run_headline([RunData.of("", reports)])
    assert found.level == level and found.sentence.startswith(start)


def test_nothing_measured_says_why() -> None:
    """No ok report and no compilation: level `none`, with each window's status and reason."""
    section = RunData("", (CoverageReport(status="skipped", reason="empty dataset", epoch=1).to_dict(),))
    found = run_headline([section])
    assert (found.level, found.sentence) == ("none", "Nothing was measured (skipped: empty dataset).")


def test_recompilations_lead_over_a_perfect_window() -> None:
    """4 lengths in epoch 0 and a 100% window in epoch 1: the headline is the 4 compilations and the fix."""
    figures, compiled = _epochs([[4, 6, 8, 10, 4, 6, 8, 10], [4, 6, 8, 10]])
    run = RunData.of("", [CoverageReport(epoch=1, xla_time_fraction=1.0)], figures, (), compiled)
    found = run_headline([run])
    assert found.level == "recompiles"
    assert found.sentence.startswith(
        "The train function compiled 4 times in this run: input x dim 1 varied across 4 values (4, 6, 8, 10). "
        "Fix: pad input x dim 1 to 2 bucket length(s) (6, 10) -> at most 2 compilation(s) instead of 4."
    )
    assert found.sentence.endswith("Compilations: train 4 (every epoch, one per new input signature).")


def test_counts_take_every_epoch_and_calls_outside_fit() -> None:
    """Train rows of every epoch, a validation's test rows, an evaluate's rows: each counted once, by function."""
    figures, compiled = _epochs([[4, 6], [8, 6]])
    validation = SignatureTracker(xla=True, function="test")
    validation.begin_epoch(0)
    validation.observe(_sig(4), step=0)
    with_test = predicted_compilations(0, [figures[0], validation.end_epoch()])
    evaluate = CallRecord(
        "test", 1, None, None, None, (Compilation("test", "test_function", None, 0, None, None, None),)
    )
    run = RunData.of("", [], figures, [evaluate], [with_test, compiled[1]])
    counted = run_compilations(run)
    assert dict(counted.counts) == {"train": 3, "test": 2, "predict": 0, "warm_up": 0, "other": 0}
    assert counted.total == 5 and counted.source == "signatures" and counted.epochs == (0, 1)
    assert counted.seconds["train"] is None  # never timed: not a fake 0


def test_a_run_file_without_rows_counts_its_signatures_then_its_windows() -> None:
    """Version 2 (TensorFlow): the signature figures' expected compilations; a bare trace: its windows."""
    figures, _ = _epochs([[4, 6, 8]])
    assert run_compilations(RunData.of("", [], figures)).counts["train"] == 3
    windows = run_compilations(RunData.of("", [CoverageReport(epoch=1, compilations=2, compile_time_s=0.5)]))
    assert (windows.source, windows.counts["train"], windows.seconds["train"]) == ("windows", 2, 0.5)


def test_warmed_signatures_are_not_new_and_a_dtype_miss_is_named() -> None:
    """Seeded signatures compile nothing in fit; the same shapes in another dtype are named as missed."""
    tracker = SignatureTracker(xla=True)
    tracker.seed([_sig(4)])
    tracker.begin_epoch(0)
    tracker.observe(_sig(4), step=0)
    tracker.observe(_sig(6, "int32"), step=1)
    tracker.observe(Signature(("x", "y"), ((8, 4, 3), (8, 1)), ("int32", "float32")), step=2)
    stats = tracker.end_epoch()
    assert stats.new_signatures == 2 and stats.compilations_so_far == 3
    missed = [e for e in stats.explanations if e.kind == "warm_up_missed"]
    assert [e.step for e in missed] == [2]
    assert missed[0].message.startswith(
        "warm_up compiled x: float32[8,4,3], y: float32[8,1] but the step ran x: int32[8,4,3], y: float32[8,1] "
        "(other dtypes)"
    )


@pytest.mark.parametrize(
    ("text", "parsed"), [("3", (None, 3)), ("train=2", ("train", 2)), ("warm_up=0", ("warm_up", 0))]
)
def test_limits_parse(text, parsed) -> None:
    assert parse_limit(text) == parsed


@pytest.mark.parametrize("text", ["-1", "x", "other=1", "train=", "eval=2", "train=-3"])
def test_bad_limits_name_the_value(text) -> None:
    with pytest.raises(ValueError, match=repr(text).replace("[", r"\[")):
        parse_limit(text)


def test_violations_per_limit_with_what_was_counted() -> None:
    """Each exceeded limit is one violation naming the run, the count and what it counted; a kept one none."""
    _, compiled = _epochs([[4, 6, 8, 10]])
    run = RunData.of("", [], (), (), compiled)
    found = compilation_violations([("logs/run.json", run)], [(None, 4), ("train", 2), ("test", 0)])
    assert [(v["function"], v["value"], v["threshold"]) for v in found] == [("train", 4, 2)]
    assert found[0]["message"] == (
        "logs/run.json: 4 compilations of the train function exceed --max-compilations train=2 "
        "(counted: train 4 (every epoch, one per new input signature))"
    )


def test_epoch_compilations_round_trip_keeps_source_and_untimed_rows() -> None:
    _, compiled = _epochs([[4, 6]])
    again = EpochCompilations.from_dict(compiled[0].to_dict())
    assert again == compiled[0] and again.source == "signatures" and again.seconds("train") is None
