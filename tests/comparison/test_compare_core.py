"""The pure core of `compare`: projections, break-even, divergence, verdict, report types.

Figures are built by hand with binary-exact values, so every expected
number is exact.
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from keras_xla_guard.comparison.core import (
    break_even_steps,
    build_report,
    max_loss_divergence,
    one_time_costs,
    projected_run_s,
    steady_step_time,
    validate_modes,
)
from keras_xla_guard.comparison.report import CompareReport, ModeFigures, format_duration


def fig(
    mode: str,
    step: float,
    *,
    startup: float = 0.0,
    per_signature: float = 0.0,
    signatures: int = 1,
    compilations: int | None = None,
    losses: tuple[float, ...] = (1.0, 0.5),
) -> ModeFigures:
    """Hand-made figures of one mode (its compile time: one signature cost per signature)."""
    compile_s = per_signature * signatures
    return ModeFigures(
        mode=mode,
        steps=len(losses),
        step_time_s=step,
        step_times_s=(step,) * len(losses),
        startup_s=startup,
        signature_cost_s=per_signature,
        compilations=signatures if compilations is None else compilations,
        compile_time_s=compile_s,
        compile_thread_time_s=2 * compile_s,
        distinct_signatures=signatures,
        peak_memory_bytes=1 << 20,
        memory_kind="host_rss",
        losses=losses,
    )


def test_steady_step_time_is_the_median():
    """The steady step time is the median of the timed steps; 0 for none."""
    assert steady_step_time([0.5, 0.25, 4.0]) == 0.5
    assert steady_step_time([0.5, 0.25, 4.0, 1.0]) == 0.75
    assert steady_step_time([]) == 0.0


def test_one_time_costs_take_the_median_new_signature_excess():
    """Several signatures: cost = median excess of steps 2.. over a steady step; startup = the rest."""
    # Steps: 4.0 (startup + first signature), then 2.5, 3.0, 2.25 over a 0.25 s step.
    startup, per_signature = one_time_costs(12.5, [4.0, 2.5, 3.0, 2.25], 0.25, 99.0)
    assert (startup, per_signature) == (12.5 - 4 * (0.25 + 2.25), 2.25)


def test_one_time_costs_of_a_single_signature_use_the_trace_compile_time():
    """One signature: its cost is the trace's compile wall time; startup never goes negative."""
    assert one_time_costs(5.0, [4.5], 0.5, 1.5) == (3.0, 1.5)
    assert one_time_costs(1.0, [1.0], 0.5, 1.5) == (0.0, 1.5)
    # A new signature cheaper than a steady step costs nothing, not less.
    assert one_time_costs(2.0, [1.0, 0.25, 0.25], 0.5, 0.0) == (0.5, 0.0)


def test_projected_run_adds_startup_steps_and_one_compilation_per_signature():
    """projected = startup + steps * step + signatures * signature cost."""
    jit = fig("jit_compile", 0.25, startup=2.0, per_signature=1.5, signatures=2)
    assert projected_run_s(jit, 100, 4) == 2.0 + 25.0 + 6.0
    assert projected_run_s(fig("plain", 0.5, startup=1.0), 100, 4) == 51.0


def test_break_even_is_the_extra_one_time_cost_over_the_step_saving():
    """Break-even: ceil(extra compile+startup / per-step saving); 0 if nothing extra; None if never."""
    plain = fig("plain", 0.5, startup=1.0, compilations=0)
    assert break_even_steps(plain, fig("jit_compile", 0.25, startup=1.0, per_signature=2.0), 1) == 8
    assert break_even_steps(plain, fig("jit_compile", 0.25, startup=1.0, per_signature=2.0), 2) == 16
    assert break_even_steps(plain, fig("jit_compile", 0.25, startup=1.125, per_signature=2.0), 1) == 9
    assert break_even_steps(plain, fig("jit_compile", 0.75, per_signature=2.0), 1) is None
    assert break_even_steps(plain, fig("jit_compile", 0.25, startup=0.5), 1) == 0
    assert break_even_steps(plain, fig("jit_compile", 0.75, startup=0.5), 1) is None


def test_loss_divergence_is_the_largest_relative_difference_over_pairs():
    """max |a-b| / max(|a|,|b|) over steps and all mode pairs; 0 where both are 0."""
    assert max_loss_divergence({"a": [1.0, 2.0], "b": [1.0, 2.5]}) == 0.2
    assert max_loss_divergence({"a": [0.0, 4.0], "b": [0.0, 4.0], "c": [0.0, 3.0]}) == 0.25
    assert max_loss_divergence({"a": [1.0], "b": [1.0]}) == 0.0


def test_loss_divergence_of_non_finite_losses():
    """A loss finite in one mode but not another is an infinite divergence; equal non-finite ones agree."""
    assert max_loss_divergence({"a": [1.0, math.nan], "b": [1.0, 2.0]}) == math.inf
    assert max_loss_divergence({"a": [math.nan, 1.0], "b": [math.nan, 1.0]}) == 0.0
    assert max_loss_divergence({"a": [math.inf], "b": [math.nan]}) == math.inf


def test_format_duration_picks_the_unit():
    """Durations read as ms, s, min or h."""
    assert [format_duration(s) for s in (0.25, 12.25, 150.0, 9000.0)] == [
        "250 ms",
        "12.2 s",
        "2.5 min",
        "2.5 h",
    ]


def test_report_when_xla_pays():
    """A faster-stepping XLA mode that repays its compilation is best; the verdict says when and by how much."""
    report = build_report(
        [
            fig("plain", 0.5, startup=1.0, compilations=0, losses=(1.0, 0.5)),
            fig("jit_compile", 0.25, startup=1.0, per_signature=2.0, losses=(1.0, 0.5000005)),
        ],
        planned_steps=1000,
        planned_signatures=1,
        wall_s=3.5,
    )
    assert (report.best_mode, report.baseline, report.break_even_steps) == ("jit_compile", "plain", 8)
    assert dict(report.projected_run_s) == {"plain": 501.0, "jit_compile": 253.0}
    assert report.max_loss_divergence == pytest.approx(1e-6, rel=1e-3)
    assert report.verdict == (
        "jit_compile pays after 8 steps: 2.0x faster per step; planned run "
        "8.3 min -> 4.2 min; losses agree within 1e-06"
    )


def test_report_when_compilations_are_not_repaid():
    """Many signatures over a short run: plain is best and the verdict gives the cost and the break-even."""
    report = build_report(
        [
            fig("plain", 0.5, startup=1.0, compilations=0, signatures=4),
            fig("jit_compile", 0.25, startup=1.0, per_signature=2.0, signatures=4),
        ],
        planned_steps=20,
        planned_signatures=10,
    )
    assert report.best_mode == "plain" and report.break_even_steps == 80
    assert dict(report.projected_run_s) == {"plain": 11.0, "jit_compile": 26.0}
    assert report.verdict == (
        "plain is best: jit_compile is 2.0x faster per step but costs 21.0 s up front (startup "
        "and 10 signature(s) to compile), so the planned run takes 26.0 s instead of 11.0 s; it "
        "would pay only after 80 steps (planned: 20); losses agree within 0e+00"
    )


def test_report_when_xla_never_pays():
    """An XLA mode slower per step never pays; the baseline is plain even when listed last."""
    report = build_report(
        [fig("jit_compile", 0.75, per_signature=1.0), fig("plain", 0.5, compilations=0)],
        planned_steps=4,
        planned_signatures=1,
    )
    assert (report.baseline, report.best_mode, report.break_even_steps) == ("plain", "plain", None)
    assert report.verdict.endswith("it never pays; losses agree within 0e+00")
    assert "jit_compile is 1.5x slower per step" in report.verdict


def test_best_mode_tie_goes_to_the_earlier_mode_and_baseline_without_plain_is_the_first():
    """Equal projections keep the first mode; without plain the first mode is the baseline."""
    report = build_report(
        [fig("jit_compile", 0.5), fig("autoclustering", 0.5)], planned_steps=10, planned_signatures=1
    )
    # Costing nothing extra, the other mode breaks even at once.
    assert (report.baseline, report.best_mode, report.break_even_steps) == ("jit_compile", "jit_compile", 0)


def test_report_is_frozen_and_round_trips_through_json():
    """CompareReport and its mappings are read-only; to_dict is JSON; ModeFigures.from_dict inverts to_dict."""
    plain, jit = fig("plain", 0.5, compilations=0), fig("jit_compile", 0.25, per_signature=1.0)
    report = build_report([plain, jit], planned_steps=10, planned_signatures=1, wall_s=2.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.best_mode = "plain"  # type: ignore[misc]  # why: writing a frozen field is the test
    with pytest.raises(TypeError):
        report.modes["plain"] = jit  # type: ignore[index]  # why: writing a read-only mapping is the test
    doc = json.loads(json.dumps(report.to_dict()))
    assert doc["best_mode"] == report.best_mode and doc["wall_s"] == 2.0
    assert doc["modes"]["jit_compile"]["final_loss"] == 0.5
    assert doc["modes"]["jit_compile"]["signature_cost_s"] == 1.0
    assert ModeFigures.from_dict(doc["modes"]["jit_compile"]) == jit
    assert set(doc) == {f.name for f in dataclasses.fields(CompareReport)}
    assert str(report).splitlines()[-1] == report.verdict


def test_build_report_needs_two_different_modes():
    """One mode, or a mode twice, is refused."""
    with pytest.raises(ValueError, match=r"at least two different modes. Received: modes=\['plain'\]"):
        build_report([fig("plain", 0.5)], planned_steps=1, planned_signatures=1)
    with pytest.raises(ValueError, match="Received: modes=\\['plain', 'plain'\\]"):
        build_report([fig("plain", 0.5), fig("plain", 0.5)], planned_steps=1, planned_signatures=1)


@pytest.mark.parametrize(
    ("modes", "message"),
    [
        ("plain", "must be a sequence of mode names"),
        (("plain", "xla"), "Unknown mode 'xla'"),
        (("plain",), "at least two different modes"),
        (("plain", "plain"), "at least two different modes"),
    ],
)
def test_validate_modes_names_the_bad_value(modes, message):
    """Bad `modes` raise ValueError naming the value and the allowed modes."""
    with pytest.raises(ValueError, match=message) as info:
        validate_modes(modes)
    assert "'jit_compile'" in str(info.value) and f"Received: modes={modes!r}" in str(info.value)


def test_a_saved_result_matches_a_model_by_class_and_parameter_count():
    """same_model: class and parameter count decide (names differ per process); no record matches."""
    from keras_xla_guard.comparison.report import same_model

    class Sequential:
        """Stands for a built Keras model: what describe_model reads."""

        name = "sequential_7"

        def count_params(self) -> int:
            return 161

    saved = {"model": {"class": "Sequential", "name": "sequential", "params": 161}}
    assert same_model(saved, Sequential()) == (
        True,
        "Sequential 'sequential' (161 parameters)",
        "Sequential 'sequential_7' (161 parameters)",
    )
    other = {"model": {"class": "Sequential", "name": "deep", "params": 1161}}
    assert same_model(other, Sequential())[0] is False
    assert same_model({"verdict": "saved before models were recorded"}, Sequential()) == (True, "", "")
