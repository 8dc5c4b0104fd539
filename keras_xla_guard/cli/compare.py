"""`keras-xla-guard compare`: whether XLA pays for a model, each mode trained in its own process."""

from __future__ import annotations

import argparse
import json
from typing import Any

from keras_xla_guard._version import __version__
from keras_xla_guard.cli._common import EXIT_OK, emit, positive_arg, require_tensorflow, seconds_arg

__all__ = ["COMPARE_SCHEMA_VERSION", "add_parser"]

COMPARE_SCHEMA_VERSION = 1


def _run_compare(args: argparse.Namespace) -> int:
    require_tensorflow("compare")
    from keras_xla_guard.comparison.processes import compare_in_processes

    report = compare_in_processes(
        args.target,
        modes=args.modes,
        steps=args.steps,
        batch_size=args.batch_size,
        planned_epochs=args.planned_epochs,
        planned_steps_per_epoch=args.planned_steps_per_epoch,
        log_dir=args.log_dir,
        timeout_s=args.timeout,
    )
    if args.json:
        doc = {
            "schema_version": COMPARE_SCHEMA_VERSION,
            "tool_version": __version__,
            "target": args.target,
            **report.to_dict(),
        }
        emit(*json.dumps(doc, indent=2, sort_keys=True).splitlines())
    else:
        emit(*str(report).splitlines())
    return EXIT_OK


def add_parser(sub: Any) -> None:
    from keras_xla_guard.comparison.core import MODES
    from keras_xla_guard.comparison.processes import DEFAULT_TIMEOUT_S
    from keras_xla_guard.runtime.config import DEFAULT_LOG_DIR

    compare = sub.add_parser(
        "compare",
        help="measure whether XLA pays for a model: train each mode, project the run",
        description="Train clones of a model in each mode on the same batches (each mode in "
        "its own fresh process), and say which mode makes the planned run shortest. Exit "
        "code 0: ok, 2: bad input.",
    )
    compare.add_argument(
        "target",
        help="module_or_file:function returning (model, data); data "
        "is what fit takes as x, or an (x, y) tuple of arrays",
    )
    compare.add_argument(
        "--steps",
        type=positive_arg,
        default=50,
        metavar="N",
        help="batches each mode trains on (default: 50)",
    )
    compare.add_argument(
        "--modes",
        nargs="+",
        choices=MODES,
        default=["plain", "jit_compile"],
        help="modes to compare, at least two (default: plain jit_compile)",
    )
    compare.add_argument(
        "--batch-size", type=positive_arg, metavar="B", help="batch size for array data (default: 32)"
    )
    compare.add_argument(
        "--planned-epochs", type=positive_arg, metavar="E", help="epochs of the run to project (default: 1)"
    )
    compare.add_argument(
        "--planned-steps-per-epoch",
        type=positive_arg,
        metavar="S",
        help="steps per epoch of that run (default: the data's length)",
    )
    compare.add_argument(
        "--log-dir",
        default=DEFAULT_LOG_DIR,
        metavar="DIR",
        help=f"the guard's log dir; results go under DIR/compare (default: {DEFAULT_LOG_DIR})",
    )
    compare.add_argument(
        "--timeout",
        type=seconds_arg,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"time limit of each mode's process (default: {DEFAULT_TIMEOUT_S:g})",
    )
    compare.add_argument(
        "--json",
        action="store_true",
        help=f"print JSON (schema_version {COMPARE_SCHEMA_VERSION}, see docs/compare.md)",
    )
    compare.set_defaults(run=_run_compare)
