"""The text, Markdown and scalars of an epoch's compilations.

Each epoch of a run carries every compilation with its function (train,
test, predict, warm_up, other), step and input signature
(`runtime.compile_log.EpochCompilations`): counted as they happened with
trace/lower/compile seconds (JAX's `jax.monitoring`), or one per new input
signature (TensorFlow), with compile seconds where a profiled window
measured them.
Here they become the console's lines and the per-function scalars
(TensorBoard's `xla_guard/compilations` text is `output.tensorboard_markdown`'s); pure.
"""

from __future__ import annotations

from keras_xla_guard.runtime.compile_log import COUNTED, FUNCTIONS, OTHER, WARM_UP, EpochCompilations
from keras_xla_guard.trace._text import format_ms

__all__ = [
    "UNEXPLAINED_NOTE",
    "compilation_scalars",
    "compilations_headline",
    "compilations_lines",
    "phase_ms",
    "unexplained_note",
]

_MAX_ROWS = 8
UNEXPLAINED_NOTE = (
    "{n} train-step compilation(s) came at a step with no new input signature: an argument other than "
    "the batch changed (the model state's placement, a dtype); run with "
    "jax.config.update('jax_explain_cache_misses', True) to have JAX name it"
)


def unexplained_note(compiled: EpochCompilations) -> str | None:
    """The note on train-step compilations no new signature caused; `None` when there are none."""
    count = len(compiled.without_new_signature)
    return UNEXPLAINED_NOTE.format(n=count) if count else None


_ORDER = (*FUNCTIONS, WARM_UP, OTHER)
SOURCE_WORDS = {COUNTED: "counted as they happened", "signatures": "one per new input signature"}


def compilation_scalars(compiled: EpochCompilations) -> dict[str, float]:
    """`{"train/compilations": 2, "train/compile_time_s": 1.9, ...}` for every function.

    A function's `compile_time_s` is left out where a compilation of it was
    not timed (TensorFlow outside a profiled window): never a fake 0.
    """
    values: dict[str, float] = {}
    for function in _ORDER:
        values[f"{function}/compilations"] = compiled.count(function)
        seconds = compiled.seconds(function)
        if seconds is not None:
            values[f"{function}/compile_time_s"] = seconds
    return values


def phase_ms(seconds: float | None) -> str:
    """A compilation phase's time for a table cell; `-` for a phase that was not timed."""
    return "-" if seconds is None else format_ms(seconds)


def compilations_headline(compiled: EpochCompilations) -> str:
    """`"train 2 (1.90 s), test 1 (0.30 s)"`: count and seconds per function that compiled."""
    parts = []
    for function in _ORDER:
        count = compiled.count(function)
        if count:
            seconds = compiled.seconds(function)
            parts.append(f"{function} {count}" + ("" if seconds is None else f" ({seconds:.2f} s)"))
    return ", ".join(parts) if parts else "none"


def compilations_lines(compiled: EpochCompilations) -> list[str]:
    """The console's lines: a headline per function, then each step function's compilation."""
    source = SOURCE_WORDS.get(compiled.source, compiled.source)
    lines = [f"epoch {compiled.epoch} compilations ({source}): {compilations_headline(compiled)}"]
    steps = [row for row in compiled.rows if row.function != OTHER]
    for row in steps[:_MAX_ROWS]:
        step = "-" if row.step is None else str(row.step)
        hit = "  cache hit" if row.cache_hit else ""
        # Predicted rows have no trace or lower phase to show.
        phases = (
            f"  trace {phase_ms(row.trace_s):>9}  lower {phase_ms(row.lower_s):>9}"
            if compiled.source == COUNTED
            else ""
        )
        lines.append(
            f"  {row.function:<8} step {step:>4}{phases}  compile {phase_ms(row.compile_s):>9}{hit}"
            f"  {row.signature or ''}".rstrip()
        )
    if len(steps) > _MAX_ROWS:
        lines.append(f"  ... {len(steps) - _MAX_ROWS} more")
    note = unexplained_note(compiled)
    if note is not None:
        lines.append(f"  note: {note}")
    return lines
