"""The text, Markdown and scalars of an epoch's counted compilations (JAX's `jax.monitoring`).

Each epoch of a run on JAX carries every compilation of the process with
its function (train, test, predict, other), step, input signature and
trace/lower/compile seconds (`runtime.compile_log.EpochCompilations`).
Here they become the console's lines and the per-function scalars
(TensorBoard's `xla_guard/compilations` text is `output.tensorboard`'s); pure.
"""

from __future__ import annotations

from keras_xla_guard.runtime.compile_log import FUNCTIONS, OTHER, EpochCompilations
from keras_xla_guard.trace._text import format_ms

__all__ = [
    "UNEXPLAINED_NOTE",
    "compilation_scalars",
    "compilations_headline",
    "compilations_lines",
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


def compilation_scalars(compiled: EpochCompilations) -> dict[str, float]:
    """`{"train/compilations": 2, "train/compile_time_s": 1.9, ...}` for every function."""
    values: dict[str, float] = {}
    for function in (*FUNCTIONS, OTHER):
        values[f"{function}/compilations"] = compiled.count(function)
        values[f"{function}/compile_time_s"] = compiled.seconds(function)
    return values


def _phases(seconds: float | None) -> str:
    return "-" if seconds is None else format_ms(seconds)


def compilations_headline(compiled: EpochCompilations) -> str:
    """`"train 2 (1.90 s), test 1 (0.30 s)"`: count and seconds per function that compiled."""
    parts = []
    for function in (*FUNCTIONS, OTHER):
        count = compiled.count(function)
        if count:
            parts.append(f"{function} {count} ({compiled.seconds(function):.2f} s)")
    return ", ".join(parts) if parts else "none"


def compilations_lines(compiled: EpochCompilations) -> list[str]:
    """The console's lines: a headline per function, then each step function's compilation."""
    lines = [
        f"epoch {compiled.epoch} compilations (counted as they happened): {compilations_headline(compiled)}"
    ]
    steps = [row for row in compiled.rows if row.function != OTHER]
    for row in steps[:_MAX_ROWS]:
        step = "-" if row.step is None else str(row.step)
        hit = "  cache hit" if row.cache_hit else ""
        lines.append(
            f"  {row.function:<8} step {step:>4}  trace {_phases(row.trace_s):>9}  lower {_phases(row.lower_s):>9}"
            f"  compile {format_ms(row.compile_s):>9}{hit}  {row.signature or ''}".rstrip()
        )
    if len(steps) > _MAX_ROWS:
        lines.append(f"  ... {len(steps) - _MAX_ROWS} more")
    note = unexplained_note(compiled)
    if note is not None:
        lines.append(f"  note: {note}")
    return lines
