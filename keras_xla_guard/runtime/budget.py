"""Compilation budgets: every XLA compilation inside a `max_compilations` block, with its reason.

A budget (`keras_xla_guard.budget.max_compilations`) enters a
`CompilationLedger` here for the thread that opened it. Every
`XlaGuardEngine` reports to this module, whoever drives it (the callback a
budget adds to `fit`, the user's own `XlaGuardCallback`, a custom loop's
`XlaGuard`): each compilation it counts (`report_compilation`), each
epoch's final explanations (`report_epoch`) and input signatures it could
not record (`report_unavailable`). The ledgers of the reporting thread keep
them; with no budget open a report costs one thread-local lookup.

An engine counts a compilation either from its input signatures (one per
signature new to a function compiled with XLA: `report_compilation`), or,
where the backend reports its compilations as they happen (JAX's
`jax.monitoring`), as the backend counted it (`report_counted`): the
compilation a new signature would cause is described when the signature
arrives (`pending_compilation`) and counted when the backend's compilation
of that step comes; a compilation no new signature caused is counted with
its program's name and a hedged note.

Pure: no Keras, no TensorFlow, and no engine named; the engine calls it.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from keras_xla_guard._checks import check_bool, check_int
from keras_xla_guard.errors import RecompilationLimitError
from keras_xla_guard.signatures.explanation import (
    BUCKETING_FIX,
    DIM_VARIED,
    FIRST_SIGNATURE,
    SHORT_LAST_BATCH,
    STRUCTURE_CHANGED,
    Explanation,
)
from keras_xla_guard.signatures.signature import Signature, closest, input_name
from keras_xla_guard.signatures.tracker import EpochSignatures, SignatureTracker

__all__ = [
    "BudgetCompilation",
    "CompilationLedger",
    "active_ledgers",
    "enter_ledger",
    "leave_ledger",
    "note_unseen_history",
    "pending_compilation",
    "report_compilation",
    "report_counted",
    "report_epoch",
    "report_unavailable",
]

# Explanations that say why a compilation happened or how to avoid it.
_CAUSES = (STRUCTURE_CHANGED, DIM_VARIED, SHORT_LAST_BATCH)
_FIXES = (BUCKETING_FIX, SHORT_LAST_BATCH)

_local = threading.local()
# Reporter -> function -> returns, while it holds, why that function may have
# compiled before the reporter first saw it (see note_unseen_history).
_unseen: weakref.WeakKeyDictionary[object, dict[str, Callable[[], str | None]]] = weakref.WeakKeyDictionary()
_unseen_lock = threading.Lock()


@dataclass(frozen=True)
class BudgetCompilation:
    """One XLA compilation a compilation budget counted, with its reason.

    Attributes:
        function: The Keras function compiled: `"train"` (also a custom
            loop's watched step), `"test"` or `"predict"`; `"warm_up"` for
            a program `warm_up` compiled ahead of the first epoch.
        epoch: The epoch it happened in; `None` when not in an epoch.
        step: The step (of the epoch, or of the test or predict call) whose
            new input signature caused it, or, for a compilation the
            backend counted, the step it happened in; `None` when not known.
        signature: That input signature; `None` for a compilation the
            backend counted that no new input signature caused (see `note`).
        change: What it changed against the closest signature the function
            saw before (a `"new_signature"` `Explanation`), or
            `"first_signature"` for the function's first compilation;
            `None` with `signature`.
        changed: `(input path, dimension)` of every dimension that differs
            from that closest earlier signature; `()` for a first
            signature or a changed structure.
        reasons: The explanations of its epoch that concern it: what varied
            (`"dim_varied"`, `"short_last_batch"`, `"structure_changed"`)
            and the fix (`"bucketing_fix"`, with `fix_code`), the same
            `Explanation`s the guard prints for the epoch.
        uncertain: Why it may have happened before the budget instead (its
            function was built before the guard first saw it, so the
            guard cannot know which signatures it had compiled); `None`
            when it certainly happened inside the budget (always, for a
            compilation the backend counted).
        program: The program the backend reported compiling (JAX's
            `"train_step"`) when the budget counted the backend's own
            compilations; `None` when it was predicted from a new input
            signature.
        note: Why, as far as the guard can tell, a compilation the backend
            counted came without a new input signature, and how to find
            out; `None` otherwise.
        cache_hit: Whether the backend loaded the program from its
            persistent compilation cache instead of compiling it (JAX's
            `jax_compilation_cache_dir`). It counts all the same: the step
            needed a program it had not run before, and a budget's verdict
            must not depend on whether the cache is warm.

    Example:

    ```python
    with keras_xla_guard.max_compilations(None) as budget:
        model.fit(dataset, epochs=2)
    for compilation in budget.compilations:
        print(compilation.step, compilation.signature, compilation.fix)
    ```
    """

    function: str
    epoch: int | None
    step: int | None
    signature: Signature | None
    change: Explanation | None
    changed: tuple[tuple[str, int], ...] = ()
    reasons: tuple[Explanation, ...] = ()
    uncertain: str | None = None
    program: str | None = None
    note: str | None = None
    cache_hit: bool = False

    @property
    def first(self) -> bool:
        """Whether this is the function's first compilation (the one it always needs)."""
        return self.change is not None and self.change.kind == FIRST_SIGNATURE

    @property
    def measured(self) -> bool:
        """Whether the backend counted it as it happened (JAX), rather than predicted from a signature."""
        return self.program is not None

    @property
    def fix(self) -> Explanation | None:
        """The fix among `reasons` (bucket lengths, or whole batches), if the guard found one."""
        return next((r for r in self.reasons if r.kind in _FIXES), None)

    def describe(self) -> list[str]:
        """The compilation in a few lines: where, the signature, what changed, why, the fix."""
        where = ", ".join(
            part
            for part in (
                f"{self.function} function",
                f"epoch {self.epoch}" if self.epoch is not None else "",
                f"step {self.step}" if self.step is not None else "",
            )
            if part
        )
        loaded = (
            ["  (loaded from JAX's persistent compilation cache, not compiled)"] if self.cache_hit else []
        )
        if self.change is None:
            lines = [
                f"{where}: {self.program or 'its program'} compiled with no new input signature",
                *loaded,
            ]
            return lines + [f"  {line}" for line in (self.note or "").splitlines()]
        lines = [f"{where}: {self.signature}", *loaded, f"  {self.change}"]
        if self.uncertain is not None:
            lines.append(f"  (may have been compiled before the budget: {self.uncertain})")
        if self.first:
            return lines + ["  (the function's first compilation: every compiled function needs one)"]
        lines += [f"  why: {r}" for r in self.reasons if r.kind in _CAUSES and r.kind != SHORT_LAST_BATCH]
        fix = self.fix
        text = str(fix) if fix is not None else self._generic_fix()
        # The bucketing fix's message starts with "fix:" already.
        lines.append(f"  {text}" if text.startswith("fix:") else f"  fix: {text}")
        return lines

    def _generic_fix(self) -> str:
        """The fix when the epoch's explanations hold none (no bucketing saves compilations)."""
        if not self.changed or self.signature is None:
            return "keep the inputs' structure, dtypes and ranks the same in every call"
        if all(dim == 0 for _, dim in self.changed):
            if self.function != "train":
                # Dropping would leave examples out of the metrics or predictions.
                return (
                    "use one batch size for every step, but keep every example: dropping the short last "
                    "batch would leave its examples out of the results"
                )
            # Worded for any input: tf.data's drop_remainder is one way, a data size another.
            return (
                "use one batch size for every step (e.g. drop the short last batch: a number of examples "
                "that is a multiple of the batch size, or tf.data's drop_remainder=True; its examples are "
                "then left out of the epoch)"
            )
        path, dim = next((p, d) for p, d in self.changed if d > 0)
        index = self.signature.paths.index(path)
        return (
            f"give {input_name(self.signature, index)} dim {dim} one length in every batch (pad it), "
            "or a few bucket lengths (keras_xla_guard.recommend_buckets)"
        )


class CompilationLedger:
    """The compilations counted inside one budget, and whether they fit it.

    Args:
        limit: Most compilations allowed; `None` only counts. Defaults to
            `None`.
        fail_fast: Raise `RecompilationLimitError` from the step whose
            compilation goes over `limit`, instead of leaving that to the
            budget's end. Defaults to `False`.

    Raises:
        ValueError: If `limit` is not an int >= 0 or `None`.
    """

    def __init__(self, limit: int | None = None, *, fail_fast: bool = False) -> None:
        check_int("limit", limit, minimum=0, allow_none=True)
        self.limit = limit
        self.fail_fast = check_bool("fail_fast", fail_fast)
        self._lock = threading.Lock()
        self._compilations: list[BudgetCompilation] = []
        # (source, function, epoch) -> indices into _compilations, for report_epoch.
        self._by_epoch: dict[tuple[int, str, int | None], list[int]] = {}
        self._unknown: list[str] = []
        self._failed = False

    @property
    def compilations(self) -> tuple[BudgetCompilation, ...]:
        """Every compilation counted so far, in order."""
        with self._lock:
            return tuple(self._compilations)

    @property
    def certain(self) -> int:
        """Compilations counted that certainly happened inside the budget."""
        return sum(c.uncertain is None for c in self.compilations)

    @property
    def unknown(self) -> str | None:
        """Why some compilations could not be counted (`None`: all were)."""
        found = self.compilations
        with self._lock:
            reasons = list(self._unknown)
        for reason in dict.fromkeys(c.uncertain for c in found if c.uncertain is not None):
            count = sum(c.uncertain == reason for c in found)
            reasons.append(f"{reason}; {count} of the compilation(s) counted may have happened then")
        return "; ".join(dict.fromkeys(reasons)) or None

    @property
    def exceeded(self) -> bool:
        """Whether more compilations than `limit` certainly happened."""
        return self.limit is not None and self.certain > self.limit

    def add(self, compilation: BudgetCompilation, source: int) -> RecompilationLimitError | None:
        """Counts one compilation.

        Args:
            compilation: The compilation.
            source: Who reported it (an engine's `id`), for `refine`.

        Returns:
            The error to raise now: with `fail_fast`, the first compilation
            over `limit`; else `None`.
        """
        with self._lock:
            key = (source, compilation.function, compilation.epoch)
            self._by_epoch.setdefault(key, []).append(len(self._compilations))
            self._compilations.append(compilation)
            certain = sum(c.uncertain is None for c in self._compilations)
            over = compilation.uncertain is None and self.limit is not None and certain > self.limit
            if not (self.fail_fast and over and not self._failed):
                return None
            self._failed = True
        return RecompilationLimitError(self.message(now=True))

    def refine(
        self, source: int, function: str, epoch: int | None, explanations: Sequence[Explanation]
    ) -> None:
        """Gives an epoch's compilations the reasons its final explanations hold.

        Args:
            source: Who reported them (as for `add`).
            function: Their function.
            epoch: Their epoch.
            explanations: The epoch's explanations once it ended (with the
                short-last-batch finding, which needs the epoch's end).
        """
        with self._lock:
            for index in self._by_epoch.get((source, function, epoch), ()):
                old = self._compilations[index]
                if old.change is None:
                    continue
                self._compilations[index] = replace(
                    old, reasons=_reasons(old.changed, old.first, explanations)
                )

    def mark_unknown(self, reason: str) -> None:
        """Notes that compilations may have happened that could not be counted."""
        with self._lock:
            # A call missed in a loop must not grow the ledger with every step.
            if reason not in self._unknown:
                self._unknown.append(reason)

    def message(self, *, now: bool = False) -> str:
        """Every compilation with its reason, the fix code once, and the verdict.

        Args:
            now: Worded for the step that just went over the budget
                (`fail_fast`), instead of for the end of the block.
                Defaults to `False`.

        Returns:
            The text `RecompilationLimitError` carries.
        """
        found = self.compilations
        certain = self.certain
        budget = f"max_compilations({self.limit})"
        unsure = (
            f" (and {len(found) - certain} that may have happened before it)" if certain < len(found) else ""
        )
        head = (
            f"keras-xla-guard: {certain} XLA compilation(s) inside {budget}{unsure}, "
            f"{certain - (self.limit or 0)} more than it allows"
        )
        if now:
            head = (
                f"keras-xla-guard: XLA compilation {certain} inside {budget} goes over it "
                "(fail_fast=True); stopped at the step that caused it"
            )
        lines = [head + ". Each one, with what changed and the fix:"]
        for number, compilation in enumerate(found, 1):
            first, *rest = compilation.describe()
            lines.append(f"  {number}. {first}")
            lines += [f"     {line}" for line in rest]
        codes: dict[str, Explanation] = {}
        for compilation in found:
            fix = compilation.fix
            if fix is not None and fix.fix_code:
                codes.setdefault(fix.fix_code, fix)
        for code, fix in codes.items():
            lines.append(f"Fix code for {fix.input} dim {fix.dim}:")
            lines += [f"    {line}" for line in code.splitlines()]
        lines.append(_how_counted(found))
        return "\n".join(lines)


def _how_counted(found: Sequence[BudgetCompilation]) -> str:
    """The message's last line: how its compilations were counted."""
    measured = sum(c.measured for c in found)
    hits = sum(c.cache_hit for c in found)
    loaded = (
        f"; {hits} of them JAX loaded from its persistent compilation cache (they count all the same, "
        "so that the verdict does not depend on a warm cache)"
        if hits
        else ""
    )
    if found and measured == len(found):
        return (
            "(Counted as the backend compiled them (JAX's jax.monitoring), each matched to the new input "
            f"signature of its step where one came{loaded}; docs/budgets.md.)"
        )
    if measured:
        return (
            "(Counted as the backend compiled them where it reports its compilations (JAX), else from "
            f"the input signatures, one compilation per new signature{loaded}; docs/budgets.md.)"
        )
    return (
        "(Counted from the input signatures of functions compiled with XLA, one compilation "
        "per new signature; docs/budgets.md.)"
    )


def _changed(signature: Signature, near: Signature | None) -> tuple[tuple[str, int], ...]:
    """`(path, dim)` where `signature` differs from `near`; `()` for none or another structure."""
    if near is None or near.structure != signature.structure:
        return ()
    return tuple(
        (path, dim)
        for path, a, b in zip(signature.paths, signature.shapes, near.shapes)
        if a is not None and b is not None
        for dim, (x, y) in enumerate(zip(a, b))
        if x != y
    )


def _reasons(
    changed: tuple[tuple[str, int], ...], first: bool, explanations: Sequence[Explanation]
) -> tuple[Explanation, ...]:
    """The explanations that concern a compilation which changed `changed`."""
    if first:
        return ()
    if not changed:
        return tuple(e for e in explanations if e.kind == STRUCTURE_CHANGED)
    return tuple(
        e
        for e in explanations
        if e.kind in (DIM_VARIED, SHORT_LAST_BATCH, BUCKETING_FIX) and (e.input, e.dim) in changed
    )


def active_ledgers() -> tuple[CompilationLedger, ...]:
    """The ledgers of the budgets open in this thread, outermost first."""
    return tuple(getattr(_local, "ledgers", ()))


def enter_ledger(ledger: CompilationLedger) -> None:
    """Opens `ledger` in this thread: it receives this thread's reports."""
    _local.ledgers = (*active_ledgers(), ledger)


def leave_ledger(ledger: CompilationLedger) -> None:
    """Closes `ledger` in this thread (the ledgers opened inside it stay open)."""
    _local.ledgers = tuple(entry for entry in active_ledgers() if entry is not ledger)


def note_unseen_history(source: object, function: str, reason: Callable[[], str | None]) -> None:
    """Notes that `function` may have compiled before `source` first saw it.

    A guard that meets a model whose function Keras already built (a `fit`
    outside any budget) cannot know which signatures that function
    compiled. While `reason()` returns a reason (e.g. until the model is
    compiled again and Keras builds a new function), the compilations
    `source` reports for `function` are counted as uncertain: a budget does
    not pass on them, nor fail unless the certain ones exceed it.

    Args:
        source: The reporting engine.
        function: `"train"`, `"test"` or `"predict"`.
        reason: Returns why, while it holds; `None` once it no longer does.
    """
    with _unseen_lock:
        _unseen.setdefault(source, {})[function] = reason


def pending_compilation(
    source: object,
    function: str,
    tracker: SignatureTracker,
    signature: Signature,
    *,
    epoch: int | None,
    step: int | None,
) -> BudgetCompilation | None:
    """The compilation a signature new to `function` causes, described now; `None` with no budget open.

    An engine whose backend counts its compilations (JAX) keeps it until
    the backend's compilation of that step comes, then counts it with
    `report_counted` (its `program` set, `uncertain` cleared: the backend
    saw it happen).

    Args:
        source: The reporting engine.
        function: `"train"`, `"test"` or `"predict"`.
        tracker: The function's tracker, which just observed `signature`.
        signature: The new input signature.
        epoch: The epoch it happened in.
        step: The step whose inputs had `signature`.

    Returns:
        The compilation; `report_counted` gives it its reasons.
    """
    if not active_ledgers():
        return None
    seen = tracker.seen
    near = closest(signature, seen[: seen.index(signature)])
    change = tracker.explain_signature(signature, step)
    changed = _changed(signature, near)
    with _unseen_lock:
        unseen = _unseen.get(source, {}).get(function)
    return BudgetCompilation(
        function,
        epoch,
        step,
        signature,
        change,
        changed,
        (),
        unseen() if unseen is not None else None,
    )


def report_compilation(
    source: object,
    function: str,
    tracker: SignatureTracker,
    signature: Signature,
    *,
    epoch: int | None,
    step: int | None,
) -> None:
    """An engine counted one XLA compilation: a signature new to a function compiled with XLA.

    Args:
        source: The reporting engine.
        function: `"train"`, `"test"` or `"predict"`.
        tracker: The function's tracker, which just observed `signature`.
        signature: The new input signature.
        epoch: The epoch it happened in.
        step: The step whose inputs had `signature`.

    Raises:
        RecompilationLimitError: When a `fail_fast` budget of this thread
            goes over its limit with this compilation (after every open
            budget counted it).
    """
    compilation = pending_compilation(source, function, tracker, signature, epoch=epoch, step=step)
    if compilation is not None:
        report_counted(source, compilation, tracker.current_explanations())


def report_counted(
    source: object, compilation: BudgetCompilation, explanations: Sequence[Explanation]
) -> None:
    """An engine counted one compilation (predicted, or as its backend reported it).

    Args:
        source: The reporting engine.
        compilation: The compilation.
        explanations: Its epoch's (or call's) explanations so far: the
            epoch's earlier compilations get the same, newer reasons (one
            bucketing advice for all).

    Raises:
        RecompilationLimitError: When a `fail_fast` budget of this thread
            goes over its limit with this compilation (after every open
            budget counted it).
    """
    ledgers = active_ledgers()
    if not ledgers:
        return
    if compilation.change is not None:
        compilation = replace(
            compilation, reasons=_reasons(compilation.changed, compilation.first, explanations)
        )
    for ledger in ledgers:
        ledger.refine(id(source), compilation.function, compilation.epoch, explanations)
    errors = [ledger.add(compilation, id(source)) for ledger in ledgers]
    error = next((e for e in errors if e is not None), None)
    if error is not None:
        raise error


def report_epoch(source: object, function: str, stats: EpochSignatures) -> None:
    """An engine finished an epoch of `function`: its compilations get the epoch's final reasons."""
    for ledger in active_ledgers():
        ledger.refine(id(source), function, stats.epoch, stats.explanations)


def report_unavailable(reason: str) -> None:
    """An engine could not record the input signatures it needs to count compilations."""
    for ledger in active_ledgers():
        ledger.mark_unknown(reason)
