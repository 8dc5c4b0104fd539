"""A whole run in one count and one headline: what every output leads with.

A run's windows measure a few steps; its compilations happen anywhere,
mostly in epochs nobody profiles (the first one). So every output leads
with what the whole run says, read from the same data the run file holds
(`RunData`): the console's summary at the end of `fit`, the HTML banner,
`report`'s first line and its `--max-compilations` gate.

- `run_compilations`: every compilation of the run per function (train,
  test, predict, warm_up kept apart; `other`, the small programs that are
  no model step, aside), from the epochs' compilation rows and the calls
  outside `fit`; only where a run file has none (an older one, or a trace
  alone) from its profiled windows, and said so.
- `run_headline`: the run's worst finding, in this order: a model
  function that compiled more than once (what varied and the fix), a
  window whose XLA share of op time is low, a window not measured;
  else what went right. A share that is 100% by construction (Keras on
  JAX) is never a headline: there the compilations, their seconds and the
  host time between programs are.

Pure: no TensorFlow, no Keras.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from keras_xla_guard.output.runfile import RunData
from keras_xla_guard.runtime.compile_log import COUNTED, FUNCTIONS, OTHER, PREDICTED, WARM_UP
from keras_xla_guard.runtime.config import GOOD_COVERAGE, LOW_COVERAGE

__all__ = [
    "COUNTED_FUNCTIONS",
    "WINDOWS",
    "Headline",
    "RunCompilations",
    "by_construction",
    "compilation_violations",
    "parse_limit",
    "run_compilations",
    "run_headline",
]

# The functions a compilation count covers: the model's own programs.
COUNTED_FUNCTIONS = (*FUNCTIONS, WARM_UP)
# `RunCompilations.source` when only profiled windows counted them.
WINDOWS = "windows"
_SOURCE_WORDS = {
    COUNTED: "every epoch, counted as they happened",
    PREDICTED: "every epoch, one per new input signature",
    WINDOWS: "profiled windows only: the run file has no compilation rows",
}
# Explanation kinds that say why a function compiled again, most telling first.
_CAUSES = ("warm_up_missed", "dim_varied", "short_last_batch", "structure_changed")


@dataclass(frozen=True)
class RunCompilations:
    """Every compilation of one run (or one worker's), per function.

    Attributes:
        counts: Compilations per function (`"train"`, `"test"`,
            `"predict"`, `"warm_up"`, `"other"`), every one listed.
        seconds: Their trace, lower and compile seconds per function;
            `None` where one was not timed.
        source: `"counted"` (as they happened), `"signatures"` (one per
            new input signature), `"windows"` (the profiled windows' own
            count: compilations outside them are missed) or `""` (none
            known).
        epochs: The epochs the count covers, in order.
    """

    counts: Mapping[str, int]
    seconds: Mapping[str, float | None]
    source: str
    epochs: tuple[int, ...] = ()

    @property
    def total(self) -> int:
        """Compilations of the model's functions (train, test, predict, warm_up); `other` aside."""
        return sum(self.counts.get(f, 0) for f in COUNTED_FUNCTIONS)

    def count(self, function: str | None = None) -> int:
        """`function`'s compilations; `total` for `None`."""
        return self.total if function is None else self.counts.get(function, 0)

    def describe(self) -> str:
        """`"train 4, test 1 (every epoch, one per new input signature)"`."""
        parts = [f"{f} {self.counts[f]}" for f in (*COUNTED_FUNCTIONS, OTHER) if self.counts.get(f)]
        where = _SOURCE_WORDS.get(self.source, "none known")
        return f"{', '.join(parts) or 'none'} ({where})"


def run_compilations(run: RunData) -> RunCompilations:
    """Every compilation of a run, from its run data.

    Args:
        run: One run's (or worker's) data.

    Returns:
        The counts: from the epochs' and the outside-`fit` calls' rows;
        where there are none, the profiled windows' counts
        (`source="windows"`).
    """
    rows: list[Mapping[str, Any]] = []
    sources = set()
    epochs = []
    for epoch in run.compilations:
        rows += list(epoch.get("rows") or ())
        sources.add(epoch.get("source", COUNTED))
        epochs.append(int(epoch["epoch"]))
    for call in run.calls:
        rows += list(call.get("compilations") or ())
    if not run.compilations and not any(call.get("compilations") is not None for call in run.calls):
        return _signature_compilations(run) or _window_compilations(run)
    counts = {f: 0 for f in (*COUNTED_FUNCTIONS, OTHER)}
    timed: dict[str, float | None] = {f: 0.0 for f in counts}
    for row in rows:
        function = str(row.get("function"))
        counts[function] = counts.get(function, 0) + 1
        spent = timed.get(function, 0.0)
        compile_s = row.get("compile_s")
        timed[function] = (
            None
            if spent is None or compile_s is None
            else spent + compile_s + (row.get("trace_s") or 0.0) + (row.get("lower_s") or 0.0)
        )
    source = sources.pop() if len(sources) == 1 else (COUNTED if not sources else "mixed")
    return RunCompilations(counts, timed, source, tuple(epochs))


def _signature_compilations(run: RunData) -> RunCompilations | None:
    """A run file from before compilation rows (TensorFlow, version 2): one per new input signature."""
    figures = [s for s in run.signatures if s.get("expected_compilations") is not None]
    figures += [
        c["signatures"]
        for c in run.calls
        if c.get("signatures") and c["signatures"].get("expected_compilations") is not None
    ]
    if not figures:
        return None
    counts = {f: 0 for f in (*COUNTED_FUNCTIONS, OTHER)}
    for figure in figures:
        function = str(figure.get("function", "train"))
        counts[function] = counts.get(function, 0) + int(figure["expected_compilations"])
    epochs = tuple(int(s["epoch"]) for s in run.signatures if s.get("expected_compilations") is not None)
    return RunCompilations(counts, {f: None for f in counts}, PREDICTED, epochs)


def _window_compilations(run: RunData) -> RunCompilations:
    measured = [r for r in run.reports if r.get("status") == "ok"]
    if not measured:
        return RunCompilations({}, {}, "")
    count = sum(int(r.get("compilations") or 0) for r in measured)
    seconds = sum(float(r.get("compile_time_s") or 0.0) for r in measured)
    epochs = tuple(int(r["epoch"]) for r in measured if r.get("epoch") is not None)
    return RunCompilations({"train": count}, {"train": seconds}, WINDOWS, epochs)


def by_construction(report: Mapping[str, Any]) -> bool:
    """Whether a report's XLA share is 100% by construction: every step is one XLA program (JAX)."""
    return report.get("backend") == "jax"


@dataclass(frozen=True)
class Headline:
    """What a run's outputs lead with.

    Attributes:
        level: `"recompiles"` (a model function compiled more than once),
            `"low"` / `"partial"` (a window's XLA share below 50% / 90%),
            `"none"` (nothing measured or counted), or `"good"`.
        sentence: The finding in one or two sentences, with its numbers.
    """

    level: str
    sentence: str


def run_headline(sections: Sequence[RunData]) -> Headline:
    """The worst finding over the whole run (every worker's section).

    Args:
        sections: The run's data, one per worker (one for a single process).

    Returns:
        The `Headline`: recompilations first, then a low XLA share, then
        what was measured.
    """
    for section in sections:
        found = _recompiled(section)
        if found is not None:
            return found
    shares = [
        (float(r["xla_time_fraction"]), s.name, r)
        for s in sections
        for r in s.reports
        if r.get("status") == "ok" and r.get("xla_time_fraction") is not None and not by_construction(r)
    ]
    counted = [run_compilations(s) for s in sections]
    compiled = "; ".join(
        f"{_who(s.name)}compiled {c.describe()}" for s, c in zip(sections, counted) if c.source
    )
    if shares:
        fraction, worker, report = min(shares, key=lambda m: (m[0], m[1]))
        share, where = f"{fraction:.1%}", _where(worker, report)
        if fraction < LOW_COVERAGE:
            return Headline(
                "low", f"XLA ran only {share} of op time in {where}: most of the work ran outside XLA."
            )
        if fraction < GOOD_COVERAGE:
            return Headline(
                "partial", f"XLA ran only {share} of op time in {where}; the rest ran as plain TF ops."
            )
        ran = (
            f"XLA ran {share} of op time in {where}"
            if len(shares) == 1
            else f"XLA ran {share} or more of op time in every profiled window (lowest: {where})"
        )
        return Headline("good", f"{ran}; {compiled or 'no compilation counted'}.")
    if compiled:
        busy = _busy(sections)
        return Headline("good", f"Each model function compiled once at most: {compiled}.{busy}")
    reasons = sorted({f"{r.get('status')}: {r.get('reason')}" for s in sections for r in s.reports})
    return Headline("none", f"Nothing was measured ({'; '.join(reasons) or 'no profiled window'}).")


def _who(worker: str) -> str:
    return f"{worker} " if worker else ""


def _where(worker: str, report: Mapping[str, Any]) -> str:
    epoch = report.get("epoch")
    place = f"epoch {epoch}" if epoch is not None else "the trace"
    # A window of several devices or hosts says so wherever its figures show.
    place += f" ({report['totals']})" if report.get("totals") else ""
    return f"{worker}, {place}" if worker else place


def _recompiled(section: RunData) -> Headline | None:
    """The headline for a model function that compiled more than once in the run; `None` if none did."""
    counted = run_compilations(section)
    if counted.source == WINDOWS:
        again = [("train", counted.count("train"))] if counted.count("train") > 1 else []
    else:
        again = [(f, counted.count(f)) for f in FUNCTIONS if counted.count(f) > 1]
    if not again:
        return None
    function, count = max(again, key=lambda pair: pair[1])
    seconds = counted.seconds.get(function)
    spent = f", {seconds:.2f} s compiling" if seconds else ""
    cause, fix = _cause_and_fix(section, function)
    who = f"{section.name}: the" if section.name else "The"
    sentence = f"{who} {function} function compiled {count} times in this run{spent}"
    sentence += f": {cause}." if cause else "."
    if fix:
        sentence += f" Fix: {fix}."
    sentence += f" Compilations: {counted.describe()}."
    return Headline("recompiles", sentence)


def _cause_and_fix(section: RunData, function: str) -> tuple[str, str]:
    """What varied for `function` (the first cause its signature figures name) and the fix, if one was found."""
    figures = [s for s in section.signatures if s.get("function", "train") == function]
    figures += [
        c["signatures"] for c in section.calls if c.get("function") == function and c.get("signatures")
    ]
    explanations = [e for s in figures for e in s.get("explanations") or ()]
    cause = next((e["message"] for kind in _CAUSES for e in explanations if e.get("kind") == kind), "")
    fix = next((e["message"] for e in explanations if e.get("kind") == "bucketing_fix"), "")
    return cause, fix.removeprefix("fix: ")


def _busy(sections: Sequence[RunData]) -> str:
    """For windows whose share is by construction: how busy the programs kept the device, and the host gap."""
    for section in sections:
        for report in section.reports:
            steps = report.get("steps") or ()
            if report.get("status") != "ok" or not by_construction(report) or not steps:
                continue
            wall = sum(s["wall_s"] for s in steps)
            busy = sum(s["busy_s"] for s in steps)
            if wall > 0:
                return (
                    f" In {_where(section.name, report)}'s window the XLA programs kept the device "
                    f"{busy / wall:.0%} busy; {1e3 * (wall - busy):.2f} ms of its steps went to the host "
                    "between programs."
                )
    return ""


def parse_limit(text: str) -> tuple[str | None, int]:
    """`"3"` -> `(None, 3)`, `"train=2"` -> `("train", 2)`: one `--max-compilations` value.

    Raises:
        ValueError: If `text` is neither a non-negative integer nor
            `FUNCTION=N` with a function of `COUNTED_FUNCTIONS`.
    """
    name, sep, number = text.rpartition("=")
    function = name.strip() if sep else None
    if function is not None and function not in COUNTED_FUNCTIONS:
        raise ValueError(
            f"expected N or FUNCTION=N with FUNCTION one of {list(COUNTED_FUNCTIONS)}, got {text!r}"
        )
    try:
        value = int(number)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"expected a non-negative integer or FUNCTION=N, got {text!r}")
    return function, value


def compilation_violations(
    sections: Sequence[tuple[str, RunData]], limits: Sequence[tuple[str | None, int]]
) -> list[dict[str, Any]]:
    """Checks each run's compilations against `--max-compilations` limits.

    Args:
        sections: `(where, run data)` per run file (`where` names it in
            messages: the file's path).
        limits: `(function or None for all, most allowed)` pairs.

    Returns:
        One violation dict per limit a run exceeds: `run`, `check`
        (`"max_compilations"`), `function`, `threshold`, `value`,
        `counted` (what was counted, in words) and `message`.
    """
    found = []
    for where, run in sections:
        counted = run_compilations(run)
        for function, limit in limits:
            value = counted.count(function)
            if value <= limit:
                continue
            what = "XLA compilations" if function is None else f"compilations of the {function} function"
            flag = f"{function}={limit}" if function is not None else str(limit)
            found.append(
                {
                    "run": where,
                    "check": "max_compilations",
                    "function": function,
                    "threshold": limit,
                    "value": value,
                    "counted": counted.describe(),
                    "message": f"{where}: {value} {what} exceed --max-compilations {flag} "
                    f"(counted: {counted.describe()})",
                }
            )
    return found
