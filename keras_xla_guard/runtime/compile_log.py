"""Every compilation of a run, as the framework reported it: function, step, phases.

JAX reports each compilation's phases (trace, lower, compile, and a
persistent-cache hit) as they happen, with no profiler
(`backend/jax_compiles.py`). `CompileLog` turns that stream into one
`Compilation` per compiled program, tagged with the epoch and step the
engine was in and with the Keras function it belongs to (train, test,
predict), told apart by the program's name; the small eager programs Keras
also compiles during `fit` (`jit(equal)`, ...) are `"other"`, never mixed
into a step's count. Pure: no framework import.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from keras_xla_guard.signatures.tracker import EpochSignatures

__all__ = [
    "FUNCTIONS",
    "OTHER",
    "Compilation",
    "CompileLog",
    "EpochCompilations",
    "program_name",
    "with_signatures",
]

# Keras' compiled functions, in the order outputs list them.
FUNCTIONS = ("train", "test", "predict")
OTHER = "other"
_WRAPPED = re.compile(r"^(?:jit|pjit|pmap|xla_pmap)\((.*)\)$")


def program_name(name: str) -> str:
    """`"train_step"` for JAX's `"jit(train_step)"` (and for `"train_step"` itself)."""
    found = _WRAPPED.match(name)
    return found.group(1) if found else name


@dataclass(frozen=True)
class Compilation:
    """One compiled program (or one loaded from the persistent cache).

    Attributes:
        function: `"train"`, `"test"`, `"predict"`, or `"other"` for any
            program that is not a Keras step (eager ops, user `jax.jit`s).
        program: The compiled function's name, e.g. `"train_step"`.
        epoch: The epoch it happened in; `None` before the first one.
        step: The training step of the epoch it happened in, for the train
            function; `None` otherwise.
        trace_s: Seconds tracing the Python function to a jaxpr; `None`
            when no trace was reported for it (JAX reuses a trace).
        lower_s: Seconds lowering it to an XLA module; `None` when none was
            reported.
        compile_s: Seconds in XLA's compiler (or loading from the cache).
        cache_hit: Whether the program came from the persistent cache.
        signature: The input signature that caused it, when known.
    """

    function: str
    program: str
    epoch: int | None
    step: int | None
    trace_s: float | None
    lower_s: float | None
    compile_s: float
    cache_hit: bool = False
    signature: str | None = None

    @property
    def total_s(self) -> float:
        """Trace, lower and compile seconds together."""
        return (self.trace_s or 0.0) + (self.lower_s or 0.0) + self.compile_s

    def to_dict(self) -> dict[str, Any]:
        """Returns the compilation as a JSON-serializable dict."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class EpochCompilations:
    """An epoch's compilations, as the framework counted them (exact, every epoch).

    Attributes:
        epoch: 0-based epoch index.
        rows: Every compilation of the epoch, in order.
    """

    epoch: int
    rows: tuple[Compilation, ...] = ()

    def count(self, function: str) -> int:
        """Compilations of `function` (`"train"`, ..., `"other"`) in the epoch, cache hits included."""
        return sum(1 for row in self.rows if row.function == function)

    def seconds(self, function: str) -> float:
        """Trace, lower and compile seconds of `function`'s compilations."""
        return sum(row.total_s for row in self.rows if row.function == function)

    @property
    def without_new_signature(self) -> tuple[Compilation, ...]:
        """Train-step compilations at a step that brought no new input signature.

        The batch did not cause them: another argument of the jitted step
        did (Keras 3.10 on JAX 0.6 compiles the step again at the second
        step and at each epoch's first, when the model state arrives placed
        differently); `jax_explain_cache_misses` names the argument.
        """
        return tuple(row for row in self.rows if row.function == "train" and row.signature is None)

    @property
    def counts(self) -> dict[str, int]:
        """Compilations per function, every function listed (`0` when it compiled nothing)."""
        return {function: self.count(function) for function in (*FUNCTIONS, OTHER)}

    def to_dict(self) -> dict[str, Any]:
        """Returns the epoch's compilations as a JSON-serializable dict."""
        return {"epoch": self.epoch, "counts": self.counts, "rows": [row.to_dict() for row in self.rows]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EpochCompilations:
        """Rebuilds the value `to_dict` gave.

        Raises:
            ValueError: If `data` is not such a dict.
        """
        try:
            return cls(int(data["epoch"]), tuple(Compilation(**row) for row in data.get("rows", ())))
        except (KeyError, TypeError) as e:
            raise ValueError(f"not an EpochCompilations dict ({e}). Received: data={data!r}") from None


@dataclass
class _Pending:
    trace: dict[str, float] = dataclasses.field(default_factory=dict)
    lower: dict[str, float] = dataclasses.field(default_factory=dict)
    cache_hit: bool = False


class CompileLog:
    """Turns a framework's compile-phase events into `Compilation`s, per epoch.

    Feed it `on_phase(phase, name, seconds)` (the backend's
    `watch_compiles` callback, from any thread); tell it where training is
    with `at(epoch, step)` and, inside a test or predict call, `at_call(step)`.
    A `"compile"` phase closes one compilation with the trace and lower
    phases its thread reported for the same program since the last one.
    Besides the per-epoch rows (`take`), the compilations of Keras'
    functions wait in `fresh()` with the step of their function they
    happened at, for a compilation budget to count them as they come.

    Args:
        programs: Program name -> Keras function (`{"train_step": "train"}`);
            other programs are `"other"`.

    Example:

    ```python
    from keras_xla_guard.runtime.compile_log import CompileLog

    log = CompileLog({"train_step": "train"})
    log.at(0, 3)
    log.on_phase("trace", "train_step", 0.2)
    log.on_phase("lower", "jit(train_step)", 0.02)
    log.on_phase("compile", "jit(train_step)", 0.5)
    print(log.take(0).counts["train"])  # 1
    ```
    """

    def __init__(self, programs: Mapping[str, str]) -> None:
        self._programs = dict(programs)
        self._lock = threading.Lock()
        self._local = threading.local()
        self._epoch: int | None = None
        self._step: int | None = None
        self._rows: list[Compilation] = []
        self._call_step: int | None = None
        self._fresh: list[tuple[Compilation, int | None]] = []
        # Compilations so far, the train step's and all: read every step (cheap).
        self.total = 0

    def set_programs(self, programs: Mapping[str, str]) -> None:
        """Replaces the program name -> function map (a model's functions were rebuilt)."""
        with self._lock:
            self._programs = dict(programs)

    def at(self, epoch: int | None, step: int | None) -> None:
        """Training is now in `epoch`, at train `step` (`None`: between steps)."""
        self._epoch, self._step, self._call_step = epoch, step, None

    def at_call(self, step: int | None) -> None:
        """A test or predict call is now at its `step` (`None`: outside its steps)."""
        self._call_step = step

    def fresh(self) -> list[tuple[Compilation, int | None]]:
        """Removes and returns the train, test and predict compilations since the last call.

        Returns:
            `(compilation, step)` pairs in order, `step` the step of its
            function (train step, or test or predict call step) it
            happened at; `None` outside the function's steps.
        """
        if not self._fresh:
            return []
        with self._lock:
            fresh, self._fresh = self._fresh, []
        return fresh

    def on_phase(self, phase: str, name: str, seconds: float) -> None:
        """Takes one phase JAX reported (see `backend.jax_compiles.subscribe`)."""
        pending: _Pending | None = getattr(self._local, "pending", None)
        if pending is None:
            pending = self._local.pending = _Pending()
        program = program_name(name)
        if phase == "trace":
            pending.trace[program] = pending.trace.get(program, 0.0) + seconds
        elif phase == "lower":
            pending.lower[program] = pending.lower.get(program, 0.0) + seconds
        elif phase == "cache_hit":
            pending.cache_hit = True
        elif phase == "compile":
            trace = pending.trace.pop(program, None)
            # JAX before 0.7 names the lowering by its (often empty) name stack.
            lower = pending.lower.pop(program, None)
            if lower is None and len(pending.lower) == 1:
                lower = pending.lower.pop(next(iter(pending.lower)))
            hit, pending.cache_hit = pending.cache_hit, False
            with self._lock:
                function = self._programs.get(program, OTHER)
                row = Compilation(
                    function=function,
                    program=program,
                    epoch=self._epoch,
                    step=self._step if function == "train" else None,
                    trace_s=trace,
                    lower_s=lower,
                    compile_s=seconds,
                    cache_hit=hit,
                )
                self._rows.append(row)
                if function != OTHER:
                    self._fresh.append((row, self._step if function == "train" else self._call_step))
                self.total += 1

    def count(self, epoch: int | None, function: str, *, cache_hits: bool = False) -> int:
        """Compilations of `function` so far in `epoch`; with `cache_hits`, only those loaded from the cache."""
        with self._lock:
            return sum(
                1
                for row in self._rows
                if row.epoch == epoch and row.function == function and (row.cache_hit or not cache_hits)
            )

    def take(self, epoch: int | None) -> EpochCompilations:
        """Removes and returns `epoch`'s compilations (those before any epoch go with the first)."""
        with self._lock:
            mine = [row for row in self._rows if row.epoch == epoch or row.epoch is None]
            self._rows = [row for row in self._rows if not (row.epoch == epoch or row.epoch is None)]
        rows = tuple(dataclasses.replace(row, epoch=epoch) for row in mine)
        return EpochCompilations(epoch if epoch is not None else 0, rows)


def with_signatures(
    compilations: EpochCompilations, stats: EpochSignatures | None, steps_per_call: int = 1
) -> EpochCompilations:
    """The train function's compilations, each with the new input signature of its step.

    A compilation is logged at the first step of its call; with
    `steps_per_call` > 1 the call's compilations take the call's new
    signatures in order, each then at that signature's own step (a
    compilation beyond them shares the last one's, as two programs compiled
    for one step's batch do).
    """
    if stats is None:
        return compilations
    new = {step: str(signature) for signature, step in stats.new if step is not None}
    used: set[int] = set()
    rows = []
    for row in compilations.rows:
        steps = (
            range(row.step, row.step + steps_per_call)
            if row.function == "train" and row.step is not None
            else ()
        )
        step = next((s for s in steps if s in new and s not in used), None)
        step = step if step is not None else next((s for s in reversed(steps) if s in used), None)
        if step is not None:
            used.add(step)
            row = dataclasses.replace(row, step=step, signature=new[step])
        rows.append(row)
    return dataclasses.replace(compilations, rows=tuple(rows))
