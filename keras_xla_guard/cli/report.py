"""`keras-xla-guard report`: the figures of traces and run files you already have, and the CI gate."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any, NamedTuple

from keras_xla_guard._version import __version__
from keras_xla_guard.cli._common import (
    EXIT_OK,
    EXIT_THRESHOLD,
    byte_size_arg,
    count_arg,
    emit,
    fraction_arg,
    limit_arg,
    path_arg,
)
from keras_xla_guard.errors import TraceError

__all__ = ["REPORT_SCHEMA_VERSION", "add_parser"]

REPORT_SCHEMA_VERSION = 1


class _Run(NamedTuple):
    """The reports of one profile run: one per host, and their sum."""

    run_dir: Path
    hosts: list[Any]
    combined: Any


def _incomplete(run_dir: Path, seen: dict[Path, dict[str, Any]]) -> Any:
    """The guard's `incomplete` report of a profile run, if its window did not complete.

    The guard's run file sits in the log dir holding the run,
    `<log_dir>/plugins/profile/<run>/`; `seen` caches it per log dir.
    """
    from keras_xla_guard.output.runfile import incomplete_windows

    if run_dir.parent.name != "profile" or run_dir.parent.parent.name != "plugins":
        return None
    log_dir = run_dir.parent.parent.parent
    if log_dir not in seen:
        seen[log_dir] = incomplete_windows(log_dir)
    return seen[log_dir].get(run_dir.name)


def _run_files(args: argparse.Namespace, runs: list[_Run]) -> list[tuple[str, Any]]:
    """`(path, RunData)` of the guard's run files for `args.path` and the log dirs of `runs`."""
    from keras_xla_guard.output.runfile import find_run_files, read_run_file

    dirs = [Path(args.path)] if Path(args.path).is_dir() else []
    dirs += [r.run_dir.parent.parent.parent for r in runs if r.run_dir.parent.name == "profile"]
    files: dict[Path, None] = {}
    for directory in dirs:
        files.update((f.resolve(), None) for f in find_run_files(directory))
    return [(str(f), read_run_file(f)) for f in files]


def _with_backends(runs: list[_Run], files: list[tuple[str, Any]]) -> list[_Run]:
    """The runs, each report marked with the backend the guard's run file names for its window.

    A trace alone does not say which framework wrote it; the run file does,
    and under JAX the table then shows no XLA share (100% by construction).
    """
    import dataclasses

    backends = {
        Path(str(r["trace_path"])).parent.name: r["backend"]
        for _, run in files
        for r in run.reports
        if r.get("trace_path") and r.get("backend")
    }
    marked = []
    for run in runs:
        backend = backends.get(run.run_dir.name)
        if backend is None or not run.combined.ok:
            marked.append(run)
            continue
        hosts = [dataclasses.replace(r, backend=backend) for r in run.hosts]
        marked.append(_Run(run.run_dir, hosts, dataclasses.replace(run.combined, backend=backend)))
    return marked


def _analyze_runs(args: argparse.Namespace) -> list[_Run]:
    import dataclasses

    from keras_xla_guard.output.runfile import find_run_files
    from keras_xla_guard.trace.analysis import analyze_xspace, combine_reports
    from keras_xla_guard.trace.xplane import find_trace_files, host_of, open_xspace

    by_run: dict[Path, list[Path]] = {}
    try:
        found = find_trace_files(args.path, all_runs=args.all)
    except TraceError:
        # A run profiled nowhere still has its run file: its counts are what a gate reads.
        if Path(args.path).is_dir() and find_run_files(args.path):
            return []
        raise
    for f in found:
        by_run.setdefault(f.parent, []).append(f)
    runs = []
    seen: dict[Path, dict[str, Any]] = {}
    for run_dir, files in by_run.items():
        incomplete = _incomplete(run_dir, seen)
        if incomplete is not None:
            # A window training left: its partial trace is no measurement.
            hosts = [
                dataclasses.replace(incomplete, trace_paths=(str(f),), hosts=(host_of(f),)) for f in files
            ]
            runs.append(
                _Run(
                    run_dir,
                    hosts,
                    dataclasses.replace(
                        incomplete,
                        trace_paths=tuple(str(f) for f in files),
                        hosts=tuple(host_of(f) for f in files),
                    ),
                )
            )
            continue
        hosts = [
            analyze_xspace(
                open_xspace(f, max_bytes=args.max_bytes),
                trace_path=str(f),
                host=host_of(f),
                top_k=args.top_k,
            )
            for f in files
        ]
        runs.append(_Run(run_dir, hosts, combine_reports(hosts, top_k=args.top_k)))
    return runs


def _violations(
    args: argparse.Namespace, runs: list[_Run], files: list[tuple[str, Any]]
) -> list[dict[str, Any]]:
    """Checks the runs against the thresholds given.

    `--min-coverage` reads each measured window's combined report;
    `--max-compilations` every compilation of the run, from the guard's
    run files (`files`), else the profiled windows' own counts.

    Raises:
        TraceError: If a threshold is given but nothing was measured or
            counted to check it against.
        ValueError: If `--min-coverage` is given for a run whose XLA share
            is 100% by construction (Keras on JAX).
    """
    from keras_xla_guard.output.run_summary import by_construction, compilation_violations
    from keras_xla_guard.output.runfile import RunData

    measured = [run for run in runs if run.combined.ok]
    # The guard's run file says which backend took each window; a bare trace's report, if known.
    constant = [run.run_dir.name for run in measured if by_construction(run.combined.to_dict())]
    constant += [where for where, run in files if any(by_construction(r) for r in run.reports)]
    if args.min_coverage is not None and constant:
        raise ValueError(
            f"--min-coverage cannot gate {constant[0]}: under Keras on JAX every step is one XLA "
            "program, so its XLA share is 100% by construction; gate on --max-compilations instead"
        )
    needs_window = args.min_coverage is not None or (args.max_compilations and not files)
    if needs_window and not measured:
        given = "--min-coverage" if args.min_coverage is not None else "--max-compilations"
        why = "; ".join(f"{run.run_dir.name}: {run.combined.status}: {run.combined.reason}" for run in runs)
        raise TraceError(f"no measured profiling window to check {given} against ({why or 'no trace'})")
    found = []
    if args.min_coverage is not None:
        for run in measured:
            name, fraction = run.run_dir.name, run.combined.xla_time_fraction
            if fraction < args.min_coverage:
                found.append(
                    {
                        "run": name,
                        "check": "min_coverage",
                        "threshold": args.min_coverage,
                        "value": fraction,
                        "message": "run {}: XLA share {} is below --min-coverage {}".format(
                            name, *_distinct_percents(fraction, args.min_coverage)
                        ),
                    }
                )
    if args.max_compilations:
        sections = files or [(f"run {r.run_dir.name}", RunData.of("", [r.combined])) for r in measured]
        found += compilation_violations(sections, args.max_compilations)
    return found


def _distinct_percents(value: float, threshold: float) -> tuple[str, str]:
    """`value` and `threshold` as percentages with the fewest decimals (from 1) that tell them apart."""
    for digits in range(1, 8):
        shown = f"{value:.{digits}%}", f"{threshold:.{digits}%}"
        if shown[0] != shown[1]:
            return shown
    return f"{value!r}", f"{threshold!r}"


def _thresholds(args: argparse.Namespace) -> dict[str, Any]:
    """The thresholds given: `max_compilations` (all functions) and `max_compilations_by_function`."""
    limits = dict(args.max_compilations or ())
    return {
        "min_coverage": args.min_coverage,
        "max_compilations": limits.pop(None, None),
        "max_compilations_by_function": limits,
    }


def _sections(runs: list[_Run], files: list[tuple[str, Any]]) -> list[Any]:
    """What the run's headline reads: its run files, else one section of the traces' reports."""
    import dataclasses

    from keras_xla_guard.output.runfile import RunData

    if files:
        return [run for _, run in files]
    # The guard names its profile runs `<time>_epoch<N>`.
    reports = []
    for run in runs:
        match = _GUARD_RUN_EPOCH.search(run.run_dir.name)
        epoch = int(match.group(1)) if match else None
        reports.append(dataclasses.replace(run.combined, epoch=epoch))
    return [RunData.of("", reports)]


def _report_document(
    args: argparse.Namespace,
    runs: list[_Run],
    files: list[tuple[str, Any]],
    violations: list[dict[str, Any]],
) -> dict[str, Any]:
    """The `report --json` document (schema in docs/report-schema.md; keys only get added)."""
    from keras_xla_guard.output.run_summary import run_compilations, run_headline

    headline = run_headline(_sections(runs, files))
    compilations = []
    for where, run in files:
        counted = run_compilations(run)
        compilations.append(
            {
                "run_file": where,
                "worker": run.name or None,
                "source": counted.source,
                "counts": dict(counted.counts),
                "total": counted.total,
                "seconds": dict(counted.seconds),
                "epochs": list(counted.epochs),
            }
        )
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "tool_version": __version__,
        "path": str(args.path),
        "headline": {"level": headline.level, "sentence": headline.sentence},
        "compilations": compilations,
        "thresholds": _thresholds(args),
        "runs": [
            {
                "run": run.run_dir.name,
                "run_dir": str(run.run_dir),
                "hosts": [r.to_dict() for r in run.hosts],
                "combined": run.combined.to_dict(),
            }
            for run in runs
        ],
        "violations": violations,
        "ok": not violations,
    }


def _read_compare(path: str | None) -> dict[str, Any] | None:
    """The document `compare --json` printed, saved to `path`."""
    if path is None:
        return None
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ValueError(f"--compare cannot read {path!r}: {e.strerror or e}") from None
    try:
        doc = json.loads(text)
    except RecursionError:
        raise ValueError(
            f"--compare must name the JSON `compare --json` prints (nested too deep). Received: {path!r}"
        ) from None
    except ValueError as e:
        raise ValueError(
            f"--compare must name the JSON `compare --json` prints ({e}). Received: {path!r}"
        ) from None
    from keras_xla_guard.output.run_schema import check_compare

    try:
        return check_compare(doc, path)
    except ValueError as e:
        raise ValueError(f"--compare must name the JSON `compare --json` prints: {e}") from None


_GUARD_RUN_EPOCH = re.compile(r"_epoch(\d+)$")


def _write_html(
    args: argparse.Namespace,
    runs: list[_Run],
    files: list[tuple[str, Any]],
    violations: list[dict[str, Any]],
    compare: dict[str, Any] | None,
) -> None:
    """`report --html`: the guard's run files when the log dir has them, else the traces."""
    from keras_xla_guard.output.html import render_html
    from keras_xla_guard.output.runfile import find_compare, write_page

    path = Path(args.path)
    if compare is None and path.is_dir():
        compare = find_compare(path)
    code = EXIT_THRESHOLD if violations else EXIT_OK
    if violations:
        reason = f"keras-xla-guard report exits {code}: " + "; ".join(v["message"] for v in violations)
    else:
        given = [f"--min-coverage {args.min_coverage:g}"] if args.min_coverage is not None else []
        given += [
            f"--max-compilations {n}" if f is None else f"--max-compilations {f}={n}"
            for f, n in args.max_compilations or ()
        ]
        checked = f"checked {', '.join(given)}" if given else "no threshold given"
        reason = f"keras-xla-guard report exits {code}: no threshold violated ({checked})."
    write_page(
        args.html,
        render_html(
            _sections(runs, files),
            exit_reason=reason,
            compare=compare,
            source=str(args.path),
            tool_version=__version__,
        ),
    )


def _run_report(args: argparse.Namespace) -> int:
    from keras_xla_guard.output.console import compile_lines
    from keras_xla_guard.output.run_summary import run_compilations, run_headline
    from keras_xla_guard.output.table import coverage_table, printable

    compare = _read_compare(args.compare)
    runs = _analyze_runs(args)
    files = _run_files(args, runs)
    runs = _with_backends(runs, files)
    violations = _violations(args, runs, files)
    if args.html is not None:
        _write_html(args, runs, files, violations, compare)
    if args.json:
        document = _report_document(args, runs, files, violations)
        emit(*json.dumps(document, indent=2, sort_keys=True).splitlines())
    else:
        headline = run_headline(_sections(runs, files))
        emit(f"run summary ({headline.level}): {headline.sentence}")
        for where, run in files:
            emit(f"compilations of the whole run ({where}): {run_compilations(run).describe()}")
        if runs:
            # Cells are escaped by the table itself: its newlines separate rows.
            emit(*coverage_table([(run.run_dir.name, run.hosts, run.combined) for run in runs]).splitlines())
        for run in runs:
            if not run.combined.ok:
                emit(f"not measured ({run.run_dir.name}): {run.combined.status}: {run.combined.reason}")
            if args.compiles:
                for line in compile_lines(run.combined, max_rows=len(run.combined.compile_table)):
                    emit(printable(f"{run.run_dir.name}: {line.strip()}"))
            for note in run.combined.notes:
                emit(f"note ({run.run_dir.name}): {note}")
        for violation in violations:
            emit(f"FAILED: {violation['message']}")
    return EXIT_THRESHOLD if violations else EXIT_OK


def add_parser(sub: Any) -> None:
    from keras_xla_guard.trace.analysis import DEFAULT_TOP_K
    from keras_xla_guard.trace.xplane import DEFAULT_MAX_TRACE_BYTES

    report = sub.add_parser(
        "report",
        help="analyze existing traces (.xplane.pb, run dir or log dir)",
        description="Measure XLA coverage in existing TF profiler traces. Exit code 0: "
        "ok, 1: a threshold was violated, 2: bad input.",
    )
    report.add_argument("path", type=path_arg, help="an .xplane.pb file, a profile run dir or a log dir")
    report.add_argument(
        "--json",
        action="store_true",
        help=f"print JSON (schema_version {REPORT_SCHEMA_VERSION}, see docs/report-schema.md)",
    )
    report.add_argument(
        "--all", action="store_true", help="with a log dir, report every run instead of the newest"
    )
    report.add_argument(
        "--min-coverage",
        type=fraction_arg,
        metavar="F",
        help="exit 1 if a run's XLA share of op time is below F (0..1)",
    )
    report.add_argument(
        "--max-compilations",
        type=limit_arg,
        action="append",
        metavar="N|FUNCTION=N",
        help="exit 1 if the run compiled more than N XLA programs in all (train, test, predict "
        "and warm_up; every epoch, from the guard's run file) or, with FUNCTION=N, more than N "
        "of one function; repeat to give several",
    )
    report.add_argument(
        "--max-bytes",
        type=byte_size_arg,
        default=DEFAULT_MAX_TRACE_BYTES,
        metavar="SIZE",
        help="refuse trace files larger than SIZE (bytes, or with suffix K, M, G; default: 1G)",
    )
    report.add_argument(
        "--top-k",
        type=count_arg,
        default=DEFAULT_TOP_K,
        metavar="K",
        help=f"plain TF ops listed per report (default: {DEFAULT_TOP_K})",
    )
    report.add_argument(
        "--html",
        metavar="FILE",
        help="also write one self-contained HTML page (plots, signatures, "
        "explanations; needs the html extra, see docs/html-report.md)",
    )
    report.add_argument(
        "--compare",
        metavar="FILE",
        help="with --html: a saved `compare --json` result to show on the page "
        "(default: the one `compare --log-dir PATH` saved, if any)",
    )
    report.add_argument(
        "--compiles",
        action="store_true",
        help="after the table, list every XLA compilation (program, step, wall-clock compile time)",
    )
    report.set_defaults(run=_run_report)
