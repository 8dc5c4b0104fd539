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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from keras_xla_guard.signatures.tracker import EpochSignatures
    from keras_xla_guard.trace.compiles import CompileRecord

__all__ = [
    "COUNTED",
    "FUNCTIONS",
    "OTHER",
    "PREDICTED",
    "WARM_UP",
    "Compilation",
    "CompileLog",
    "EpochCompilations",
    "predicted_compilations",
    "program_name",
]

# Keras' compiled functions, in the order outputs list them.
FUNCTIONS = ("train", "test", "predict")
# The model's programs compiled by `warm_up` before the first epoch: kept
# apart from the train step's, which they spare.
WARM_UP = "warm_up"
OTHER = "other"
# Where an epoch's compilations come from: counted as they happened (JAX's
# `jax.monitoring`), or one per new input signature of a function compiled
# with XLA (TensorFlow, which reports no compilation outside the profiler).
COUNTED = "counted"
PREDICTED = "signatures"
_WRAPPED = re.compile(r"^(?:jit|pjit|pmap|xla_pmap)\((.*)\)$")


def program_name(name: str) -> str:
    """`"train_step"` for JAX's `"jit(train_step)"` (and for `"train_step"` itself)."""
    found = _WRAPPED.match(name)
    return found.group(1) if found else name


@dataclass(frozen=True)
class Compilation:
    """One compiled program (or one loaded from the persistent cache).

    Attributes:
        function: `"train"`, `"test"`, `"predict"`, `"warm_up"` (one of
            them compiled by `warm_up` before the first epoch), or
            `"other"` for any program that is not a Keras step (eager ops,
            user `jax.jit`s).
        program: The compiled function's name, e.g. `"train_step"`.
        epoch: The epoch it happened in; `None` before the first one.
        step: The step it happened at: of the epoch for the train
            function, of its call for the test or predict function
            (a validation's, an `evaluate`'s); `None` otherwise.
        trace_s: Seconds tracing the Python function to a jaxpr; `None`
            when no trace was reported for it (JAX reuses a trace).
        lower_s: Seconds lowering it to an XLA module; `None` when none was
            reported.
        compile_s: Seconds in XLA's compiler (or loading from the cache);
            `None` when not measured (a compilation TensorFlow made outside
            a profiled window).
        cache_hit: Whether the program came from the persistent cache.
        signature: The input signature that caused it, when known.
    """

    function: str
    program: str
    epoch: int | None
    step: int | None
    trace_s: float | None
    lower_s: float | None
    compile_s: float | None
    cache_hit: bool = False
    signature: str | None = None

    @property
    def total_s(self) -> float | None:
        """Trace, lower and compile seconds together; `None` when the compile time was not measured."""
        if self.compile_s is None:
            return None
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
        source: `"counted"` (the backend reported each compilation as it
            happened: JAX) or `"signatures"` (one per new input signature
            of a function compiled with XLA: TensorFlow, where a
            compilation a tensor's *value* keys is not seen).
    """

    epoch: int
    rows: tuple[Compilation, ...] = ()
    source: str = COUNTED

    def count(self, function: str) -> int:
        """Compilations of `function` (`"train"`, ..., `"other"`) in the epoch, cache hits included."""
        return sum(1 for row in self.rows if row.function == function)

    def seconds(self, function: str) -> float | None:
        """Trace, lower and compile seconds of `function`'s compilations; `None` if one was not measured."""
        times = [row.total_s for row in self.rows if row.function == function]
        if any(t is None for t in times):
            return None
        return sum(t for t in times if t is not None)

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
        return {function: self.count(function) for function in (*FUNCTIONS, WARM_UP, OTHER)}

    def to_dict(self) -> dict[str, Any]:
        """Returns the epoch's compilations as a JSON-serializable dict."""
        return {
            "epoch": self.epoch,
            "source": self.source,
            "counts": self.counts,
            "rows": [row.to_dict() for row in self.rows],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EpochCompilations:
        """Rebuilds the value `to_dict` gave.

        Raises:
            ValueError: If `data` is not such a dict.
        """
        try:
            return cls(
                int(data["epoch"]),
                tuple(Compilation(**row) for row in data.get("rows", ())),
                str(data.get("source", COUNTED)),
            )
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
        self._warming = False
        # Compilations so far, the train step's and all: read every step (cheap).
        self.total = 0

    def set_programs(self, programs: Mapping[str, str]) -> None:
        """Replaces the program name -> function map (a model's functions were rebuilt)."""
        with self._lock:
            self._programs = dict(programs)

    def at(self, epoch: int | None, step: int | None) -> None:
        """Training is now in `epoch`, at train `step` (`None`: between steps)."""
        self._epoch, self._step, self._call_step = epoch, step, None

    def warming_up(self, on: bool) -> None:
        """`warm_up` runs now (`on`) or no longer: the model's programs compiled meanwhile are `"warm_up"`'s."""
        self._warming = on

    def inside(self, function: str | None) -> None:
        """The calling thread is now inside a watched step of `function` (`None`: no longer).

        A program compiled on this thread meanwhile that `programs` does
        not name is `function`'s (a custom loop's step calls jitted code
        of any name).
        """
        self._local.inside = function

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
                function = self._programs.get(program) or getattr(self._local, "inside", None) or OTHER
                if self._warming and function != OTHER:
                    function = WARM_UP
                row = Compilation(
                    function=function,
                    program=program,
                    epoch=self._epoch,
                    # A test or predict step of its call; a warm-up's: before any step.
                    step=self._step
                    if function == "train"
                    else self._call_step
                    if function != WARM_UP
                    else None,
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
        # A warm-up's rows keep `None`: they came before any epoch.
        rows = tuple(
            row if row.function == WARM_UP else dataclasses.replace(row, epoch=epoch) for row in mine
        )
        return EpochCompilations(epoch if epoch is not None else 0, rows)


def predicted_compilations(
    epoch: int, figures: Sequence[EpochSignatures], window: Sequence[CompileRecord] = ()
) -> EpochCompilations | None:
    """An epoch's compilations as its new input signatures predict them: one each.

    TensorFlow reports no compilation outside the profiler, but a function
    compiled with XLA (Keras' `jit_compile=True` step, traced with
    `reduce_retracing`) compiles one program per concrete input signature
    it had not run before, and the guard sees every signature. So each new
    signature of the epoch's train steps, of its validation's test steps
    (or of an `evaluate`/`predict` call), is one compilation at the step it
    first came (checked against XLA's dump files in
    tests/test_run_compilations.py). A compilation a tensor's *value* keys
    is not seen (docs/budgets.md).

    Args:
        epoch: The epoch (or `0` for a call outside `fit`).
        figures: The signature figures of the epoch's functions (the train
            steps' and each test or predict call's).
        window: The compile table of the epoch's profiled window (train
            steps), its rows' signatures joined: a new signature found
            there takes its program name, compile seconds and cache hit;
            else the program is named after Keras' function
            (`"train_function"`) and its time is `None`. Defaults to `()`.

    Returns:
        The compilations (`source="signatures"`), `None` when no function
        of `figures` is compiled with XLA (nothing to predict).
    """
    xla = [f for f in figures if f.expected_compilations is not None]
    if not xla:
        return None
    measured = {row.signature: row for row in window if row.signature is not None}
    rows = []
    for f in xla:
        for signature, step in f.new:
            found = measured.get(str(signature)) if f.function == "train" else None
            rows.append(
                Compilation(
                    function=f.function,
                    program=found.program if found is not None else f"{f.function}_function",
                    epoch=epoch,
                    step=step,
                    trace_s=None,
                    lower_s=None,
                    compile_s=None
                    if found is None
                    else found.compile_s or (0.0 if found.cache_hit else None),
                    cache_hit=found.cache_hit if found is not None else False,
                    signature=str(signature),
                )
            )
    return EpochCompilations(epoch, tuple(rows), PREDICTED)
