"""Frozen result types of `keras_xla_guard.compare` and their text (pure: no Keras, no TensorFlow)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

__all__ = [
    "CompareReport",
    "ModeFigures",
    "describe_model",
    "format_compare",
    "format_duration",
    "model_description",
    "same_model",
]


@dataclass(frozen=True)
class ModeFigures:
    """What one training mode measured on the compared batches.

    Attributes:
        mode: `"plain"`, `"jit_compile"` or `"autoclustering"`.
        steps: Training steps timed (the compared batches).
        step_time_s: Steady-state step time: the median wall time of the
            timed steps, every one of them running an already compiled
            program.
        step_times_s: Wall time of each timed step, in order.
        startup_s: One-time cost beyond steady steps and new signatures:
            starting `fit`, tracing the step function, building the
            optimizer.
        signature_cost_s: Wall time one new input signature costs beyond a
            steady step: the median over the compile pass's steps after
            the first (each a new signature) of their excess over a steady
            step; with a single signature, the trace's compile wall time.
        compilations: XLA programs compiled, counted in a real profiler
            trace of one step per distinct signature.
        compile_time_s: Wall time those compilations took in that trace
            (the union over threads of the compile events' intervals: what
            training waited).
        compile_thread_time_s: Their compile time summed over threads
            (`CoverageReport.compile_thread_time_s`); XLA:CPU compiles on several
            threads at once, so this exceeds `compile_time_s`.
        distinct_signatures: Distinct input signatures (shapes and dtypes
            of the batch) among the compared batches.
        peak_memory_bytes: Peak memory over this mode's compile pass
            (building its clone, compiling, its first steps): host peak
            RSS growth on CPU, the device's peak on an accelerator; `None`
            when it could not be read.
        memory_kind: `"host_rss"` or `"device"`.
        losses: The training loss of each timed step, in order.
        trace_paths: The profiler trace file(s) the compilations were
            counted in.
    """

    mode: str
    steps: int
    step_time_s: float
    step_times_s: tuple[float, ...]
    startup_s: float
    signature_cost_s: float
    compilations: int
    compile_time_s: float
    compile_thread_time_s: float
    distinct_signatures: int
    peak_memory_bytes: int | None
    memory_kind: str
    losses: tuple[float, ...]
    trace_paths: tuple[str, ...] = ()

    @property
    def final_loss(self) -> float:
        """The loss of the last timed step (`nan` when no step ran)."""
        return self.losses[-1] if self.losses else float("nan")

    def to_dict(self) -> dict[str, Any]:
        """Returns the figures as a JSON-serializable dict (with `final_loss`)."""
        d = dataclasses.asdict(self)
        for key in ("step_times_s", "losses", "trace_paths"):
            d[key] = list(d[key])
        d["final_loss"] = self.final_loss
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ModeFigures:
        """Rebuilds figures from `to_dict()`'s output (e.g. a worker process's JSON)."""
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in d.items() if k in names}
        for key in ("step_times_s", "losses", "trace_paths"):
            values[key] = tuple(values.get(key, ()))
        return cls(**values)


@dataclass(frozen=True)
class CompareReport:
    """The measured answer to "is XLA worth it for this model and data?".

    Attributes:
        best_mode: The mode with the shortest projected run.
        baseline: The mode the others are compared with (`"plain"` when
            compared, else the first mode).
        modes: Mode name -> its `ModeFigures`, in the order compared.
        break_even_steps: After how many steps of the planned run the
            fastest-stepping other mode's extra compile and startup time is
            repaid against the baseline; `None` if it never is.
        projected_run_s: Mode name -> projected seconds of the planned run:
            startup, plus steady steps, plus one compilation per distinct
            signature the data produces.
        planned_steps: Training steps of the planned run.
        planned_signatures: Distinct input signatures the planned run's
            data produces.
        signatures_counted_from: `"data"` when `planned_signatures` was
            counted from every batch of finite data, `"compared batches"`
            when only the compared batches were seen (data of unknown
            length).
        max_loss_divergence: Largest relative difference between two
            modes' losses on the same batch.
        verdict: One sentence with the numbers.
        wall_s: Wall time `compare` itself took.
        model: What was compared (`describe_model`): its class, name and
            parameter count, so that a guard reading the saved result
            can tell whether it measured the model it trains; `None` when
            unknown (results saved before it was recorded).
    """

    best_mode: str
    baseline: str
    modes: Mapping[str, ModeFigures]
    break_even_steps: int | None
    projected_run_s: Mapping[str, float]
    planned_steps: int
    planned_signatures: int
    signatures_counted_from: str
    max_loss_divergence: float
    verdict: str
    wall_s: float = 0.0
    model: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        # Frozen all the way down: the mappings are read-only views of copies.
        object.__setattr__(self, "modes", MappingProxyType(dict(self.modes)))
        object.__setattr__(self, "projected_run_s", MappingProxyType(dict(self.projected_run_s)))
        if self.model is not None:
            object.__setattr__(self, "model", MappingProxyType(dict(self.model)))

    def to_dict(self) -> dict[str, Any]:
        """Returns the report as a JSON-serializable dict."""
        return {
            "best_mode": self.best_mode,
            "baseline": self.baseline,
            "modes": {name: figures.to_dict() for name, figures in self.modes.items()},
            "break_even_steps": self.break_even_steps,
            "projected_run_s": dict(self.projected_run_s),
            "planned_steps": self.planned_steps,
            "planned_signatures": self.planned_signatures,
            "signatures_counted_from": self.signatures_counted_from,
            "max_loss_divergence": self.max_loss_divergence,
            "verdict": self.verdict,
            "wall_s": self.wall_s,
            "model": dict(self.model) if self.model is not None else None,
        }

    def __str__(self) -> str:
        return format_compare(self)


def format_duration(seconds: float) -> str:
    """A duration for a sentence: `"850 ms"`, `"12.3 s"`, `"4.1 min"`, `"2.3 h"`."""
    if seconds < 1:
        return f"{seconds * 1e3:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def format_compare(report: CompareReport) -> str:
    """A plain-text table of the modes' figures followed by the verdict.

    Args:
        report: The report.

    Returns:
        Lines separated by newlines.
    """
    header = (
        "mode",
        "step",
        "compiles",
        "compile",
        "per signature",
        "startup",
        "signatures",
        "peak mem",
        "final loss",
        "projected",
    )
    rows = [header]
    for name, f in report.modes.items():
        mem = "n/a" if f.peak_memory_bytes is None else f"{f.peak_memory_bytes / 2**20:.0f} MiB"
        rows.append(
            (
                name,
                format_duration(f.step_time_s),
                str(f.compilations),
                format_duration(f.compile_time_s),
                format_duration(f.signature_cost_s),
                format_duration(f.startup_s),
                str(f.distinct_signatures),
                mem,
                f"{f.final_loss:.6g}",
                format_duration(report.projected_run_s[name]),
            )
        )
    # The layout of `output.table.text_table`, written out: output/ renders
    # `CompareReport`s (output/compare_summaries.py), so importing it into
    # this pure result module would point upward.
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    lines.append(
        f"planned run: {report.planned_steps} steps, {report.planned_signatures} "
        f"signature(s) (counted from {report.signatures_counted_from}); "
        f"compare took {format_duration(report.wall_s)}"
    )
    lines.append(report.verdict)
    return "\n".join(lines)


def describe_model(model: Any) -> dict[str, Any] | None:
    """A model's class, name and parameter count: what a saved `compare` result is matched on.

    Args:
        model: A built Keras model (Keras 3 or tf_keras).

    Returns:
        `{"class": ..., "name": ..., "params": ...}`, or `None` when the
        model cannot say (not built yet).
    """
    try:
        params = int(model.count_params())
    except Exception:  # noqa: BLE001 - an unbuilt model has no parameter count yet
        return None
    return {"class": type(model).__name__, "name": str(getattr(model, "name", "")), "params": params}


def same_model(saved: Any, model: Any) -> tuple[bool, str, str]:
    """Whether a saved `compare` result measured `model`, and what each is.

    Matched on class and parameter count (a model's name changes from
    process to process: `sequential_3`). A result that recorded no model
    (saved by an older keras-xla-guard) or a model that cannot say is
    taken as a match.

    Args:
        saved: `CompareReport.to_dict()` as read back.
        model: The model a guard trains.

    Returns:
        `(match, measured, here)`: whether they match, and both models
        described, e.g. `"Sequential 'mlp' (1,234 parameters)"` (`""` when
        unknown).
    """
    recorded = saved.get("model") if isinstance(saved, Mapping) else None
    here = describe_model(model)
    if not isinstance(recorded, Mapping) or here is None:
        return True, "", ""
    match = recorded.get("class") == here["class"] and recorded.get("params") == here["params"]
    return match, model_description(recorded), model_description(here)


def model_description(model: Mapping[str, Any]) -> str:
    """A model as `describe_model` recorded it, in words.

    Args:
        model: `describe_model`'s dict (as saved in a `compare` result).

    Returns:
        E.g. `"Sequential 'mlp' (1,234 parameters)"`.
    """
    params = model.get("params")
    counted = f" ({params:,} parameters)" if isinstance(params, int) else ""
    return f"{model.get('class')} {model.get('name')!r}{counted}"
