"""EpochAssembly: an epoch's report, signatures and unavailability joined once, in either order."""

from __future__ import annotations

import dataclasses

import numpy as np

from keras_xla_guard import CompileRecord, CoverageReport, Signature, SignatureTracker
from keras_xla_guard.runtime.epochs import EpochAssembly
from keras_xla_guard.runtime.sink import EpochRecord


def _stats(epoch: int = 1, widths=(3, 3, 4)):
    """Real tracker figures: epoch `epoch` sees one signature per width (XLA on)."""
    tracker = SignatureTracker(xla=True)
    tracker.begin_epoch(epoch)
    for step, width in enumerate(widths):
        tracker.observe(Signature.of(np.zeros((2, width))), step=step)
    return tracker.end_epoch()


def _report(epoch: int = 1) -> CoverageReport:
    compiled = (
        CompileRecord(program="step", module="a_inference_step_1__.1", start_s=0.0, compile_s=0.2, step=2),
    )
    return CoverageReport(
        epoch=epoch,
        steps_profiled=3,
        xla_time_s=0.9,
        non_xla_op_time_s=0.1,
        xla_time_fraction=0.9,
        xla_executions=3,
        compilations=1,
        compile_table=compiled,
    )


def test_report_before_the_epoch_end_is_held_then_joined_once():
    """A report that comes first waits; the epoch end completes one record with both parts joined."""
    assembly = EpochAssembly()
    assembly.begin(1)
    assembly.analyzing(1, (0, 3))
    assert assembly.add_report(_report()) is None
    stats = _stats()
    record = assembly.end(1, stats)
    assert record is not None and (record.epoch, record.signatures) == (1, stats)
    report = record.report
    assert (report.distinct_signatures, report.new_signatures, report.expected_compilations) == (2, 2, 2)
    # Step 2's compilation is the width-4 signature; width 3 (step 0) ran without one.
    assert [(c.step, c.cache_hit, c.signature) for c in record.compile_table] == [
        (0, True, str(Signature.of(np.zeros((2, 3))))),
        (2, False, str(Signature.of(np.zeros((2, 4))))),
    ]
    assert report.cache_hits == 1
    assert assembly.flush() == []


def test_epoch_end_before_the_analysis_waits_for_the_report():
    """An epoch that ended with its analysis still running completes when the report comes, with the same join."""
    stats = _stats()
    first, second = EpochAssembly(), EpochAssembly()
    first.begin(1)
    first.analyzing(1, (0, 3))
    assert first.end(1, stats) is None
    late = first.add_report(_report())
    second.begin(1)
    second.analyzing(1, (0, 3))
    second.add_report(_report())
    early = second.end(1, stats)
    assert late == early and late.report.cache_hits == 1


def test_unavailable_signatures_and_unprofiled_epochs():
    """No signatures: the report says why; an unprofiled epoch is a record without report; an empty one is none."""
    assembly = EpochAssembly()
    assembly.begin(0)
    assembly.add_report(CoverageReport(status="skipped", reason="busy", epoch=0, steps_profiled=0))
    record = assembly.end(0, None, "keras 9")
    assert record.report.signatures_unavailable == "keras 9" == record.signatures_unavailable
    assert record.compile_table == ()
    assembly.begin(1)
    record = assembly.end(1, _stats())
    assert (record.report, record.signatures, record.signatures_unavailable) == (None, _stats(), None)
    # XLA on and no count from the backend: one compilation per new signature, at its step.
    assert record.compilations.source == "signatures"
    assert [(r.function, r.step, r.signature, r.compile_s) for r in record.compilations.rows] == [
        ("train", 0, "input: float64[2,3]", None),
        ("train", 2, "input: float64[2,4]", None),
    ]
    assembly.begin(2)
    assert assembly.end(2, None) is None


def test_flush_publishes_what_an_epoch_that_never_ended_has():
    """At the run's end an open epoch's report goes out without signatures; nothing is kept twice."""
    assembly = EpochAssembly()
    assembly.begin(3)
    assembly.analyzing(3, (0, 3))
    assembly.add_report(_report(3))
    (record,) = assembly.flush()
    assert record == EpochRecord(3, _report(3))
    assert assembly.flush() == []


def test_a_record_waits_for_earlier_epochs_still_being_analyzed():
    """Epoch 2 ends while epoch 1's window is analyzed: released only after epoch 1, in epoch order."""
    assembly = EpochAssembly()
    for epoch in (1, 2):
        assembly.begin(epoch)
    assembly.analyzing(1, (0, 4))
    assert assembly.release(assembly.end(1, _stats())) == []
    assert assembly.release(assembly.end(2, _stats())) == []
    released = assembly.release(assembly.add_report(_report()))
    assert [r.epoch for r in released] == [1, 2]
    assert assembly.release(None) == []


def test_flush_gives_held_and_open_records_in_epoch_order():
    """At run end, records held behind an open epoch and that epoch itself come out in order."""
    assembly = EpochAssembly()
    for epoch in (1, 2):
        assembly.begin(epoch)
    assembly.analyzing(1, (0, 4))
    assembly.release(assembly.end(1, _stats()))
    assembly.release(assembly.end(2, _stats()))
    assert [r.epoch for r in assembly.flush()] == [1, 2]


def test_finish_sees_each_complete_report_with_its_signatures_joined_in_either_order():
    """The finish hook (the engine's epoch notes) gets the joined report, once, and its result is the record's."""
    width_4 = str(Signature.of(np.zeros((2, 4))))
    for report_first in (True, False):
        seen: list[list[str | None]] = []

        def finish(report, seen=seen):
            seen.append([c.signature for c in report.compile_table if not c.cache_hit])
            return dataclasses.replace(report, notes=("finished",))

        assembly = EpochAssembly(finish)
        assembly.begin(1)
        assembly.analyzing(1, (0, 3))
        if report_first:
            assembly.add_report(_report())
            record = assembly.end(1, _stats())
        else:
            assembly.end(1, _stats())
            record = assembly.add_report(_report())
        assert record is not None and record.report.notes == ("finished",)
        assert seen == [[width_4]]
