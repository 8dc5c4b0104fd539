"""What every command shares: exit codes, one-line output, the parser, argument types.

Exit codes: 0 ok, 1 a threshold was violated, 2 bad input, usage or a
missing optional dependency (one line on stderr naming what to install, no
traceback). Everything printed has its non-printable characters escaped
(trace names are arbitrary strings) and is encoded whatever the terminal's
encoding (others become `\\xNN` escapes).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from typing import TYPE_CHECKING, Any, NoReturn

from keras_xla_guard.errors import MissingDependencyError
from keras_xla_guard.output.table import printable

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

EXIT_OK = 0
EXIT_THRESHOLD = 1
EXIT_BAD_INPUT = 2


def emit(*lines: str, file: SupportsWrite[str] | None = None) -> None:
    """Prints each of `lines` on one line, safe for any terminal and encoding.

    A newline inside a line is escaped like any other non-printable
    character, so data cannot start a line of its own.
    """
    stream = sys.stdout if file is None else file
    encoding = getattr(stream, "encoding", None) or "utf-8"
    text = "".join(printable(line) + "\n" for line in lines)
    # An ASCII-only stdout (LANG=C, PYTHONIOENCODING=ascii) must not turn a
    # non-ASCII host or op name into an error.
    stream.write(text.encode(encoding, "backslashreplace").decode(encoding))


class Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line on stderr and exit code 2.

    Abbreviated options are refused: `--max-compilation 3` taken as
    `--max-compilations 3` would change meaning the day another option
    shares the prefix, in a CI gate's script.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        # Usage errors quote the user's arguments, which may hold anything.
        if message:
            emit(*message.rstrip("\n").split("\n"), file=sys.stderr if file is None else file)


# The extra that installs each optional top-level module a command imports.
# `report` needs none of them (its `--html` needs matplotlib); `doctor` and
# `compare` run TensorFlow and Keras.
_EXTRA_OF_MODULE = {"tensorflow": "cpu", "keras": "cpu", "matplotlib": "html"}
_TF_EXTRA_HINT = "(or [gpu] on a GPU machine)"


def install_hint(module: str) -> str:
    """`pip install` advice for a missing top-level module."""
    extra = _EXTRA_OF_MODULE.get(module)
    if extra is None:
        return f"pip install {module}"
    hint = f'pip install "keras-xla-guard[{extra}]"'
    return f"{hint} {_TF_EXTRA_HINT}" if extra == "cpu" else hint


def require_tensorflow(command: str) -> None:
    """Raises `MissingDependencyError` when `command` cannot import TensorFlow and Keras."""
    for module in ("tensorflow", "keras"):
        if importlib.util.find_spec(module) is None:
            raise MissingDependencyError(
                f"`keras-xla-guard {command}` runs TensorFlow and Keras, and {module} is not "
                f"installed: {install_hint(module)}."
            )


_BYTE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def fraction_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a fraction between 0 and 1, got {text!r}")
    return value


def count_arg(text: str, minimum: int = 0) -> int:
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        kind = "a positive" if minimum == 1 else "a non-negative"
        raise argparse.ArgumentTypeError(f"expected {kind} integer, got {text!r}")
    return value


def limit_arg(text: str) -> tuple[str | None, int]:
    from keras_xla_guard.output.run_summary import parse_limit

    try:
        return parse_limit(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def seconds_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def path_arg(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError(
            f"expected an .xplane.pb file, a profile run dir or a log dir, got {text!r}"
        )
    return text


def byte_size_arg(text: str) -> int:
    number, unit = text.strip(), ""
    if number[-1:].upper() in _BYTE_UNITS:
        number, unit = number[:-1], number[-1:].upper()
    try:
        value = int(number) * _BYTE_UNITS[unit]
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(
            f"expected a positive size in bytes (suffix K, M or G allowed), got {text!r}"
        )
    return value


def positive_arg(text: str) -> int:
    return count_arg(text, minimum=1)


def error(message: str) -> int:
    """Prints `message` as one line on stderr; returns the bad-input exit code."""
    # One line, whatever the message holds, so scripts can rely on it.
    emit(f"keras-xla-guard: error: {' '.join(message.split())}", file=sys.stderr)
    return EXIT_BAD_INPUT
