"""Pure arithmetic of `compare`: projections, break-even, divergence, verdict.

Nothing here imports Keras or TensorFlow: the adapter (`measure.py`) measures
`ModeFigures`, these functions turn them into a `CompareReport`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from keras_xla_guard._checks import check_int
from keras_xla_guard.comparison.report import CompareReport, ModeFigures, format_duration

__all__ = [
    "MODES",
    "break_even_steps",
    "build_report",
    "max_loss_divergence",
    "one_time_costs",
    "projected_run_s",
    "steady_step_time",
    "validate_modes",
    "verdict",
]

MODES = ("plain", "jit_compile", "autoclustering")


def validate_modes(modes: Any) -> tuple[str, ...]:
    """Checks `modes`: at least two distinct names out of `MODES`.

    Args:
        modes: A sequence of mode names.

    Returns:
        The modes as a tuple, in the order given.

    Raises:
        ValueError: If `modes` is not a sequence of at least two distinct
            known mode names.
    """
    allowed = ", ".join(repr(m) for m in MODES)
    if isinstance(modes, str) or not isinstance(modes, Sequence):
        # ValueError, as for every bad argument of the package.
        raise ValueError(
            f"`modes` must be a sequence of mode names out of {allowed}. Received: modes={modes!r}"
        )
    for mode in modes:
        if mode not in MODES:
            raise ValueError(
                f"Unknown mode {mode!r}: `modes` may hold {allowed}. Received: modes={tuple(modes)!r}"
            )
    if len(set(modes)) != len(modes) or len(modes) < 2:
        raise ValueError(
            f"`modes` must name at least two different modes out of {allowed}, "
            f"each once. Received: modes={tuple(modes)!r}"
        )
    return tuple(modes)


def steady_step_time(step_times_s: Sequence[float]) -> float:
    """The steady-state step time: the median of the timed steps.

    Args:
        step_times_s: Wall times of steps that all ran compiled programs.

    Returns:
        The median; `0.0` for no steps.
    """
    return float(statistics.median(step_times_s)) if step_times_s else 0.0


def one_time_costs(
    compile_pass_s: float, compile_steps_s: Sequence[float], steady_s: float, compile_time_s: float
) -> tuple[float, float]:
    """Splits the compile pass into startup and the cost of one new signature.

    Each step of the compile pass brings a new signature; the first also
    starts the run. A new signature costs what its step took beyond a
    steady step (compiling, converting the graph, retracing): the median
    of that over the steps after the first. With a single signature there
    is nothing to take a median of, and the trace's compile wall time is
    the cost. What the pass took beyond its steps and signatures is the
    startup (starting `fit`, tracing the step, building the optimizer).

    Args:
        compile_pass_s: Wall time of the whole compile pass (`fit` call).
        compile_steps_s: Wall time of each of its steps, in order.
        steady_s: The steady step time.
        compile_time_s: Wall-clock compile time in the pass's trace.

    Returns:
        `(startup_s, signature_cost_s)`, both at least 0.
    """
    n = len(compile_steps_s)
    if n >= 2:
        per_signature = max(0.0, float(statistics.median(t - steady_s for t in compile_steps_s[1:])))
    else:
        per_signature = compile_time_s
    return max(0.0, compile_pass_s - n * (steady_s + per_signature)), per_signature


def projected_run_s(figures: ModeFigures, planned_steps: int, planned_signatures: int) -> float:
    """Projected wall time of a planned run in one mode.

    Args:
        figures: The mode's measured figures.
        planned_steps: Training steps of the planned run.
        planned_signatures: Distinct input signatures its data produces.

    Returns:
        `startup_s + planned_steps * step_time_s + planned_signatures *
        signature_cost_s`.
    """
    return (
        figures.startup_s
        + planned_steps * figures.step_time_s
        + planned_signatures * figures.signature_cost_s
    )


def break_even_steps(baseline: ModeFigures, candidate: ModeFigures, planned_signatures: int) -> int | None:
    """After how many steps `candidate`'s extra one-time cost is repaid.

    The one-time cost of a mode is its startup plus one signature cost per
    planned signature; each step then saves the difference of the steady
    step times.

    Args:
        baseline: The mode compared against (normally `"plain"`).
        candidate: The mode that should pay off.
        planned_signatures: Distinct signatures of the planned run.

    Returns:
        The smallest number of steps after which the candidate's run is no
        longer than the baseline's; `0` when it never costs more; `None`
        when it costs more and never catches up.
    """
    extra = (candidate.startup_s + planned_signatures * candidate.signature_cost_s) - (
        baseline.startup_s + planned_signatures * baseline.signature_cost_s
    )
    if extra <= 0:
        return 0 if candidate.step_time_s <= baseline.step_time_s else None
    saving = baseline.step_time_s - candidate.step_time_s
    if saving <= 0:
        return None
    return math.ceil(extra / saving)


def max_loss_divergence(losses: Mapping[str, Sequence[float]]) -> float:
    """The largest relative loss difference between two modes on one batch.

    Args:
        losses: Mode name -> its per-step losses on the same batches.

    Returns:
        The maximum over steps and mode pairs of `|a - b| / max(|a|, |b|)`
        (0 where both are 0); `inf` when a loss is not finite in one mode
        but is in another, or differs in kind (nan vs inf).
    """
    series = list(losses.values())
    worst = 0.0
    for i, a_losses in enumerate(series):
        for b_losses in series[i + 1 :]:
            for a, b in zip(a_losses, b_losses):
                if not (math.isfinite(a) and math.isfinite(b)):
                    if not (a == b or (math.isnan(a) and math.isnan(b))):
                        return math.inf
                    continue
                scale = max(abs(a), abs(b))
                if scale > 0:
                    worst = max(worst, abs(a - b) / scale)
    return worst


def _per_step(baseline: ModeFigures, other: ModeFigures) -> str:
    if other.step_time_s <= 0 or baseline.step_time_s <= 0:
        return "no faster per step"
    ratio = baseline.step_time_s / other.step_time_s
    if ratio >= 1:
        return f"{ratio:.1f}x faster per step"
    return f"{1 / ratio:.1f}x slower per step"


def verdict(
    modes: Mapping[str, ModeFigures],
    baseline: str,
    best: str,
    projected: Mapping[str, float],
    break_even: int | None,
    planned_steps: int,
    planned_signatures: int,
    divergence: float,
) -> str:
    """The one-sentence answer, with the numbers.

    Args:
        modes: Mode name -> figures.
        baseline: The baseline mode's name.
        best: The best mode's name.
        projected: Mode name -> projected seconds of the planned run.
        break_even: `break_even_steps` of the fastest-stepping other mode.
        planned_steps: Steps of the planned run.
        planned_signatures: Distinct signatures of the planned run.
        divergence: `max_loss_divergence`.

    Returns:
        E.g. `"jit_compile pays after 37 steps: 1.8x faster per step;
        planned run 41.0 min -> 24.0 min; losses agree within 2e-06"`.
    """
    losses = (
        f"losses agree within {divergence:.0e}"
        if math.isfinite(divergence)
        else "losses differ: one mode produced a non-finite loss"
    )
    base = modes[baseline]
    if best != baseline:
        other = modes[best]
        pays = "at once" if break_even == 0 else f"after {break_even} steps"
        return (
            f"{best} pays {pays}: {_per_step(base, other)}; planned run "
            f"{format_duration(projected[baseline])} -> {format_duration(projected[best])}; "
            f"{losses}"
        )
    others = [m for m in modes if m != baseline]
    contender = min(others, key=lambda m: modes[m].step_time_s)
    other = modes[contender]
    if break_even is None:
        when = "it never pays"
    elif break_even == 0:
        when = "it costs no more, but saves nothing either"
    else:
        when = f"it would pay only after {break_even} steps (planned: {planned_steps})"
    up_front = other.startup_s + planned_signatures * other.signature_cost_s
    return (
        f"{baseline} is best: {contender} is {_per_step(base, other)} but costs "
        f"{format_duration(up_front)} up front (startup and {planned_signatures} "
        f"signature(s) to compile), so the planned run takes "
        f"{format_duration(projected[contender])} instead of "
        f"{format_duration(projected[baseline])}; {when}; {losses}"
    )


def build_report(
    figures: Sequence[ModeFigures],
    *,
    planned_steps: int,
    planned_signatures: int,
    signatures_counted_from: str = "data",
    wall_s: float = 0.0,
) -> CompareReport:
    """Combines each mode's figures into the `CompareReport`.

    Args:
        figures: One `ModeFigures` per mode, at least two, in the order
            compared.
        planned_steps: Training steps of the planned run.
        planned_signatures: Distinct signatures its data produces.
        signatures_counted_from: `"data"` or `"compared batches"`.
            Defaults to `"data"`.
        wall_s: Wall time of the whole comparison. Defaults to `0.0`.

    Returns:
        The report; `best_mode` is the shortest projected run (the earlier
        mode on a tie).

    Raises:
        ValueError: If fewer than two modes or a mode twice is given.
    """
    modes = {f.mode: f for f in figures}
    if len(modes) < 2 or len(modes) != len(figures):
        raise ValueError(
            f"`figures` must hold at least two different modes. Received: modes={[f.mode for f in figures]!r}"
        )
    check_int("planned_steps", planned_steps, minimum=1)
    check_int("planned_signatures", planned_signatures, minimum=0)
    baseline = "plain" if "plain" in modes else figures[0].mode
    projected = {m: projected_run_s(f, planned_steps, planned_signatures) for m, f in modes.items()}
    best = min(modes, key=lambda m: projected[m])
    others = [m for m in modes if m != baseline]
    contender = best if best != baseline else min(others, key=lambda m: modes[m].step_time_s)
    even = break_even_steps(modes[baseline], modes[contender], planned_signatures)
    divergence = max_loss_divergence({m: f.losses for m, f in modes.items()})
    return CompareReport(
        best_mode=best,
        baseline=baseline,
        modes=modes,
        break_even_steps=even,
        projected_run_s=projected,
        planned_steps=planned_steps,
        planned_signatures=planned_signatures,
        signatures_counted_from=signatures_counted_from,
        max_loss_divergence=divergence,
        verdict=verdict(
            modes, baseline, best, projected, even, planned_steps, planned_signatures, divergence
        ),
        wall_s=wall_s,
    )
