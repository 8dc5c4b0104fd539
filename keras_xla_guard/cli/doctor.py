"""`keras-xla-guard doctor`: whether and why XLA runs on this machine, for TensorFlow or JAX."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path
from typing import Any

from keras_xla_guard.cli._common import EXIT_OK, emit, require_tensorflow, seconds_arg
from keras_xla_guard.errors import MissingDependencyError

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    doctor = sub.add_parser("doctor", help="diagnose whether and why XLA runs on this machine")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.add_argument("--no-probe", action="store_true", help="skip the measured auto-clustering probe")
    doctor.add_argument(
        "--probe-timeout",
        type=seconds_arg,
        default=120.0,
        metavar="SECONDS",
        help="time limit of the probe process (default: 120)",
    )
    doctor.add_argument(
        "--trace",
        metavar="PATH",
        default=None,
        help="a run's trace: recommend the persistent compilation cache when "
        "compilation is a large share of it, name ops that block XLA, and "
        "follow the compare result saved in that log dir",
    )
    doctor.add_argument(
        "--backend",
        choices=("tensorflow", "jax"),
        default=None,
        help="which framework to diagnose (default: the one Keras is configured with; "
        "JAX when only JAX is installed)",
    )
    doctor.set_defaults(run=_run_doctor)


def _run_doctor(args: argparse.Namespace) -> int:
    from keras_xla_guard.diagnose.keras_env import doctor_backend, keras_config_untouched

    backend = doctor_backend(args.backend)
    # A first import of Keras or TensorFlow writes ~/.keras/keras.json; a diagnosis must not.
    with keras_config_untouched():
        report = _doctor_jax() if backend == "jax" else _doctor_tensorflow(args)
    if args.json:
        emit(*json.dumps(report.to_dict(), indent=2, sort_keys=True).splitlines())
    else:
        emit(*str(report).splitlines())
    return EXIT_OK


def _doctor_jax() -> Any:
    if importlib.util.find_spec("jax") is None:
        raise MissingDependencyError('doctor --backend jax needs JAX: pip install "keras-xla-guard[jax]"')
    from keras_xla_guard.diagnose.doctor_jax import doctor_jax

    return doctor_jax()


def _doctor_tensorflow(args: argparse.Namespace) -> Any:
    require_tensorflow("doctor")
    from keras_xla_guard.diagnose.doctor import doctor

    compare = None
    if args.trace is not None and Path(args.trace).is_dir():
        from keras_xla_guard.output.runfile import find_compare

        try:
            compare = find_compare(args.trace)
        except ValueError:
            compare = None
    return doctor(
        probe=not args.no_probe, probe_timeout=args.probe_timeout, trace=args.trace, compare=compare
    )
