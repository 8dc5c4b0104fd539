"""The `keras-xla-guard` command line.

Exit codes: 0 ok, 1 a threshold was violated, 2 bad input, usage or a
missing optional dependency (one line on stderr naming what to install, no
traceback). Everything printed has its non-printable
characters escaped (trace names are arbitrary strings) and is encoded
whatever the terminal's encoding (others become `\\xNN` escapes).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from keras_xla_guard._version import __version__
from keras_xla_guard.cli import compare, doctor, report
from keras_xla_guard.cli._common import Parser, error, install_hint
from keras_xla_guard.cli.compare import COMPARE_SCHEMA_VERSION
from keras_xla_guard.cli.report import REPORT_SCHEMA_VERSION
from keras_xla_guard.errors import XlaGuardError

__all__ = ["COMPARE_SCHEMA_VERSION", "REPORT_SCHEMA_VERSION", "build_parser", "main"]

_COMMANDS = ("report", "doctor", "compare")


def build_parser() -> Parser:
    """Builds the argument parser (exposed for documentation and tests).

    Returns:
        The `keras-xla-guard` parser with its subcommands.
    """
    parser = Parser(
        prog="keras-xla-guard",
        description="Measure whether XLA really runs your Keras training (TensorFlow or JAX).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    # Not `required=True`: argparse would say "the following arguments are required: command".
    sub = parser.add_subparsers(dest="command", parser_class=Parser)
    report.add_parser(sub)
    doctor.add_parser(sub)
    compare.add_parser(sub)
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
    if args.command is None:
        parser.error(
            f"no command given; choose one of: {', '.join(_COMMANDS)} (keras-xla-guard --help describes them)"
        )
    try:
        return int(args.run(args))
    except ModuleNotFoundError as e:
        if not e.name:
            return error(str(e))
        # An optional dependency the command imports: exit 1 would tell a CI
        # gate "threshold violated", and a traceback would bury the fix.
        module = e.name.partition(".")[0]
        return error(f"{module} is not installed: {install_hint(module)}.")
    except (XlaGuardError, OSError, ValueError) as e:
        return error(str(e))


if __name__ == "__main__":
    sys.exit(main())
