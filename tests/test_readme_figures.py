"""Every figure in the README's "The numbers" is the plain measurement of the
benchmark JSON it links: the value at a named path, rounded to nearest at the
digits shown, and no number in that section is left unaccounted for."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import pytest
from _helpers import REPO

_SECTION = re.compile(r"^## The numbers\n(.*?)^## ", re.MULTILINE | re.DOTALL)
_LINK = re.compile(r"\]\((benchmarks/results/[\w.-]+\.json)\)")
_ANY_LINK_TARGET = re.compile(r"\]\([^)]*\)")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)*")

Value = Callable[[dict[str, Any]], Any]


def _at(path: str, scale: float = 1.0) -> Value:
    """The JSON value at a dotted path (`a.b[0].c`), divided by `scale`."""
    keys = [int(k) if k.isdigit() else k for k in re.findall(r"[^.\[\]]+", path)]

    def value(doc: dict[str, Any]) -> Any:
        for key in keys:
            doc = doc[key]
        return doc / scale if scale != 1.0 else doc

    return value


def _load(pick: Callable[[float, float], float]) -> Value:
    """The 1-minute load average before or after the run, as save_result records them."""
    return lambda doc: pick(doc["machine"]["load_avg_1min_before"], doc["machine"]["load_avg_1min_after"])


def _worst(kind: str, key: str, scale: float = 1.0) -> Value:
    """A figure of bench_analyze --corpus' worst trace for `kind` ("time" or "memory")."""

    def value(doc: dict[str, Any]) -> Any:
        result = doc["result"]
        return result["traces"][result[f"worst_{kind}"]][key] / scale

    return value


def _others(doc: dict[str, Any]) -> list[float]:
    """bench_analyze --corpus: ours / floor of every real trace but the worst."""
    result = doc["result"]
    return [
        t["ours_over_floor"]
        for name, t in result["traces"].items()
        if not name.startswith("synthetic") and name != result["worst_time"]
    ]


@dataclass(frozen=True)
class _Figures:
    """Figures in one README phrase: each group of `pattern` is the value `values` gives.

    `every_link` checks the figures against every JSON the section links (the
    machine and versions they all share); otherwise against the first JSON
    linked after the phrase, the one its sentence cites.
    """

    pattern: str
    values: tuple[Value, ...]
    every_link: bool = False


_SIG = "result.variants"
_OVER = "result.unprofiled"
_PROF = "result.profiled_vs_keras_tensorboard"
FIGURES = (
    _Figures(r"a (\d+)-core CPU VM", (_at("machine.cpus"),), every_link=True),
    _Figures(
        r"\(TensorFlow ([\d.]+), Keras ([\d.]+);",
        (_at("machine.tensorflow"), _at("machine.keras")),
        every_link=True,
    ),
    # bench_analyze
    _Figures(
        r"Analysing a ([\d.]+) MB, (\d+)k-event trace takes ([\d.]+) s, \*\*([\d.]+)x faster\*\*",
        (
            _at("result.trace_bytes", 1e6),
            _at("result.trace_events", 1e3),
            _at("result.median_wall_s.ours"),
            _at("result.xprof_over_ours"),
        ),
    ),
    # ... and the range of the other real traces beside it.
    _Figures(
        r"the other real traces are ([\d.]+)-([\d.]+)x the floor",
        (
            lambda doc: min(_others(doc)),
            lambda doc: max(_others(doc)),
        ),
    ),
    # bench_analyze --corpus: the worst trace, not the best.
    _Figures(
        r"On a corpus of (\d+) real traces of different workloads, the worst is the ([\d.]+) MB "
        r"(\w+) trace on both counts: \*\*([\d.]+)x\*\* a bare parse-and-iterate floor and peak "
        r"memory \*\*([\d.]+)x\*\* its file size \(([\d.]+)x after a warm-up\), over the "
        r"([\d.]+)x and ([\d.]+)x goals \(load ([\d.]+)-([\d.]+)\)",
        (
            lambda doc: len([n for n in doc["result"]["traces"] if not n.startswith("synthetic")]),
            _worst("time", "trace_bytes", 1e6),
            lambda doc: doc["result"]["worst_time"],
            _worst("time", "ours_over_floor"),
            _worst("memory", "peak_memory_over_file_size"),
            _worst("memory", "peak_memory_after_warm_up_over_file_size"),
            _at("result.goals.ours_over_floor"),
            _at("result.goals.peak_memory_over_file_size"),
            _load(min),
            _load(max),
        ),
    ),
    # bench_signatures: the measured epoch ratio first, the composite after it.
    _Figures(
        r"epochs took \*\*([\d.]+)x / ([\d.]+)x\*\* the untracked epoch time at "
        r"steps_per_execution (\d+) / (\d+), over the ([\d.]+)x goal, in a run that could not "
        r"resolve epoch ratios \(A/A ([\d.]+) / ([\d.]+)\)",
        (
            _at(f"{_SIG}[0].ratio"),
            _at(f"{_SIG}[1].ratio"),
            _at(f"{_SIG}[0].steps_per_execution"),
            _at(f"{_SIG}[1].steps_per_execution"),
            _at("result.goal_ratio"),
            _at(f"{_SIG}[0].aa_ratio"),
            _at(f"{_SIG}[1].aa_ratio"),
        ),
    ),
    _Figures(
        r"\(`step_cost_ratio`: .*?\) was ([\d.]+)x / ([\d.]+)x Keras' own \(Keras' step timed "
        r"against itself: ([\d.]+) / ([\d.]+)\)",
        (
            _at(f"{_SIG}[0].step_cost_ratio"),
            _at(f"{_SIG}[1].step_cost_ratio"),
            _at(f"{_SIG}[0].step_aa_ratio"),
            _at(f"{_SIG}[1].step_aa_ratio"),
        ),
    ),
    # bench_overhead: the run that met the goal and its sibling that did not.
    _Figures(
        r"ran at \*\*([\d.]+)x\*\* \(A/A ([\d.]+), load ([\d.]+)-([\d.]+)\) with signature "
        r"tracking on, and a profiled window at ([\d.]+)x",
        (
            _at(f"{_OVER}.ratio_median"),
            _at(f"{_OVER}.aa_ratio"),
            _load(min),
            _load(max),
            _at(f"{_PROF}.ratio_median"),
        ),
    ),
    _Figures(
        r"measured \*\*([\d.]+)x\*\* \(A/A ([\d.]+), load ([\d.]+)-([\d.]+)\), over the "
        r"([\d.]+)x goal, and ([\d.]+)x profiled",
        (
            _at(f"{_OVER}.ratio_median"),
            _at(f"{_OVER}.aa_ratio"),
            _load(min),
            _load(max),
            _at(f"{_OVER}.goal"),
            _at(f"{_PROF}.ratio_median"),
        ),
    ),
    # bench_fix
    _Figures(
        r"cut XLA compilations from (\d+) to (\d+) and made training \*\*([\d.]+)x faster\*\* "
        r"than unfixed XLA, yet ([\d.]+)x of",
        (
            _at("result.arms.xla_unfixed.xla_compiles"),
            _at("result.arms.xla_bucketed.xla_compiles"),
            _at("result.speedup_bucketed_vs_unfixed_xla"),
            _at("result.speedup_bucketed_vs_no_xla"),
        ),
    ),
)

# Words that say whether a goal was met, each against its JSON's own verdict.
CLAIMS = (
    (r"over the [\d.]+x goal, in a run", lambda doc: doc["result"]["meets_goal_measured"] is False),
    (
        r"over the [\d.]+x goal, and",
        lambda doc: doc["result"]["unprofiled"]["ratio_median"] > doc["result"]["unprofiled"]["goal"],
    ),
    (r"missing its goal", lambda doc: doc["result"]["meets_goal"] is False),
    (r"trace on both counts", lambda doc: doc["result"]["worst_time"] == doc["result"]["worst_memory"]),
    (
        r"over the [\d.]+x and [\d.]+x goals",
        lambda doc: (
            not any(
                doc["result"]["goals_met"][k]
                for k in ("ours_within_1_3x_of_floor", "peak_memory_under_file_size")
            )
        ),
    ),
    (r"every report is identical", lambda doc: doc["result"]["goals_met"]["reports_identical_to_reference"]),
)


def _section() -> str:
    """'The numbers' of README.md, whitespace collapsed so phrases may wrap anywhere."""
    match = _SECTION.search((REPO / "README.md").read_text(encoding="utf-8"))
    assert match, "README.md has no '## The numbers' section"
    return " ".join(match.group(1).split())


def _unique(pattern: str, text: str) -> re.Match[str]:
    matches = list(re.finditer(pattern, text))
    assert len(matches) == 1, f"{pattern!r} matches {len(matches)} times in 'The numbers'"
    return matches[0]


def _linked_after(text: str, position: int) -> str:
    link = _LINK.search(text, position)
    assert link, f"no benchmarks/results JSON linked after {text[position : position + 60]!r}"
    return link.group(1)


def _load_json(relative: str) -> dict[str, Any]:
    return json.loads((REPO / relative).read_text(encoding="utf-8"))


def _shown(figure: str, value: Any) -> Any:
    """`value` as the README must show it: rounded half up to `figure`'s digits, or the version."""
    if isinstance(value, str):
        return figure if value == figure or value.startswith(figure + ".") else value
    digits = Decimal(figure).as_tuple().exponent
    return Decimal(repr(value)).quantize(Decimal(1).scaleb(digits), rounding=ROUND_HALF_UP)


def _checks() -> list[tuple[str, str, Any, str]]:
    """(figure, its phrase, the JSON value, the JSON file) for every figure in FIGURES."""
    text = _section()
    every = sorted(set(_LINK.findall(text)))
    rows = []
    for figures in FIGURES:
        match = _unique(figures.pattern, text)
        assert len(figures.values) == len(match.groups()), figures.pattern
        files = every if figures.every_link else [_linked_after(text, match.end())]
        for index, value in enumerate(figures.values, start=1):
            for file in files:
                rows.append((match.group(index), figures.pattern, value(_load_json(file)), file))
    return rows


@pytest.mark.parametrize("row", _checks(), ids=lambda row: f"{row[0]}@{row[3].rsplit('/', 1)[-1]}")
def test_readme_figure_is_its_json_value_rounded_to_nearest(row: tuple[str, str, Any, str]) -> None:
    """Each README figure equals its linked JSON value rounded half up at the digits shown."""
    figure, pattern, value, file = row
    expected = _shown(figure, value)
    shown = figure if isinstance(value, str) else Decimal(figure)
    assert shown == expected, f"README shows {figure} in {pattern!r}; {file} has {value!r} -> {expected}"


def test_every_number_in_the_readme_numbers_is_mapped() -> None:
    """No number in 'The numbers' (outside link targets) escapes the mapping to its JSON."""
    text = _section()
    covered = [span for figures in FIGURES for span in _unique(figures.pattern, text).regs[1:]]
    covered += [m.span() for m in _ANY_LINK_TARGET.finditer(text)]
    unmapped = [
        m.group()
        for m in _NUMBER.finditer(text)
        if not any(start <= m.start() and m.end() <= end for start, end in covered)
    ]
    assert unmapped == []


def test_goal_words_agree_with_the_json() -> None:
    """'over the goal' and 'missing its goal' say what the linked JSON's verdict says."""
    text = _section()
    for pattern, holds in CLAIMS:
        match = _unique(pattern, text)
        file = _linked_after(text, match.end())
        assert holds(_load_json(file)), f"{pattern!r} is not what {file} measured"


def test_rounding_is_to_nearest_not_towards_the_package() -> None:
    """The rule itself: 5.946 shows as 5.9 and 0.0548 as 0.05, 1.0075 as 1.008."""
    assert _shown("5.9", 5.946) == Decimal("5.9")
    assert _shown("0.05", 0.05484813163066496) == Decimal("0.05")
    assert _shown("1.008", 1.0075) == Decimal("1.008")
    assert _shown("6.0", 5.946) != Decimal("6.0")
