"""The `keras-xla-guard` command line.

Exit codes: 0 ok, 1 a threshold was violated, 2 bad input or usage (one line
on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from keras_xla_guard._version import __version__
from keras_xla_guard.errors import XlaGuardError

__all__ = ["main"]

EXIT_OK = 0
EXIT_THRESHOLD = 1
EXIT_BAD_INPUT = 2


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line on stderr and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


def _run_report(args: argparse.Namespace) -> int:
    from keras_xla_guard.analysis import analyze_trace

    report = analyze_trace(args.path)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    else:
        print(report)
    return EXIT_OK


def _run_doctor(args: argparse.Namespace) -> int:
    from keras_xla_guard.doctor import doctor

    report = doctor(probe=not args.no_probe, probe_timeout=args.probe_timeout)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    else:
        print(report)
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    """Builds the argument parser (exposed for documentation and tests).

    Returns:
        The `keras-xla-guard` parser with its subcommands.
    """
    parser = _Parser(
        prog="keras-xla-guard",
        description="Measure whether XLA really runs your TensorFlow training.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    report = sub.add_parser("report", help="analyze an existing trace (.xplane.pb or log dir)")
    report.add_argument("path", help="an .xplane.pb file, a profile run dir or a log dir")
    report.add_argument("--json", action="store_true", help="print the report as JSON")
    report.set_defaults(run=_run_report)
    doctor = sub.add_parser("doctor", help="diagnose whether and why XLA runs on this machine")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.add_argument(
        "--no-probe", action="store_true", help="skip the measured auto-clustering probe"
    )
    doctor.add_argument("--probe-timeout", type=float, default=120.0, metavar="SECONDS",
                        help="time limit of the probe process (default: 120)")
    doctor.set_defaults(run=_run_doctor)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line.

    Args:
        argv: Arguments without the program name. Defaults to
            `sys.argv[1:]`.

    Returns:
        The exit code.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except XlaGuardError as e:
        print(f"keras-xla-guard: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (OSError, ValueError) as e:
        print(f"keras-xla-guard: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
