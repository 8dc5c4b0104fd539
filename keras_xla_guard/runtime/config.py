"""`GuardConfig`: what a guard profiles, how it analyzes, where it writes.

One frozen value, validated once, shared by the Keras callback, the
custom-loop guard and the engine behind both. Its arguments are documented
here once; the adapters' docstrings include this text (`config_args_doc`).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from keras_xla_guard._checks import check_bool, check_int
from keras_xla_guard.runtime.schedule import DEFAULT_MAX_STEPS, DEFAULT_SKIP_STEPS, ProfileSchedule
from keras_xla_guard.trace.analysis import DEFAULT_TOP_K
from keras_xla_guard.trace.xplane import DEFAULT_MAX_TRACE_BYTES

__all__ = [
    "CONFIG_ARGS",
    "DEFAULT_LOG_DIR",
    "DEFAULT_MAX_COMPILATIONS",
    "GOOD_COVERAGE",
    "LOW_COVERAGE",
    "ON_VIOLATION_CHOICES",
    "PROFILE_WORKERS_CHOICES",
    "GuardConfig",
    "config_args_doc",
    "config_fields",
    "fill_config_args",
    "with_config_fields",
]

DEFAULT_LOG_DIR = os.path.join("logs", "xla_guard")
# A healthy input pipeline compiles once or twice (full batches and a short
# last batch); 8 leaves room for a few buckets and still speaks up before
# TensorFlow's megamorphic threshold (more than 10 compiles of one cluster).
DEFAULT_MAX_COMPILATIONS = 8
ON_VIOLATION_CHOICES = ("warn", "raise", "stop")
# How the guard judges an XLA share of op time: at least GOOD_COVERAGE is
# good; below LOW_COVERAGE is low (the report then carries the verdicts
# explaining it); between them, partial. The HTML page's headline and the
# adapters' notes both read these.
GOOD_COVERAGE = 0.9
LOW_COVERAGE = 0.5
PROFILE_WORKERS_CHOICES = ("chief", "all")
# A URL scheme such as gs:// or s3://; two letters at least, so that a
# Windows drive ("C://logs") is still a local path.
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://")

# The `Args:` entries of every `GuardConfig` field, in signature order. The
# adapters' docstrings are built from this text, so it is written once.
CONFIG_ARGS = """\
log_dir: Local directory for traces (`<log_dir>/plugins/profile/`, where
    TensorBoard's Profile tab finds them) and TensorBoard summaries;
    remote URLs such as `gs://...` are refused. Defaults to
    `"logs/xla_guard"`.
profile_epochs: Epoch indices (0-based, as Keras counts) to profile: an
    int, an iterable of ints or a range. Defaults to `None`: the second
    epoch the run trains (the first one after compilation: epoch 1, or
    `initial_epoch + 1` when resuming), or its only epoch, unless
    `profile_every` is given. Listed epochs the run does not train give
    an `XlaGuardWarning`.
profile_every: Also profile every N-th epoch, counted from the run's
    first epoch. Defaults to `None`.
skip_steps: Steps at the start of each profiled epoch to leave out
    (iterator start-up, compilation). Defaults to `2`.
max_steps: Most steps profiled per window, bounding trace size; `None`
    profiles the whole epoch. Defaults to `20`.
top_k: How many plain TF ops each report lists. Defaults to `10`.
write_summaries: Write TensorBoard summaries. Defaults to `True`.
async_analysis: Analyze traces off the training thread. Defaults to
    `True`.
max_trace_bytes: Traces larger than this are not analyzed. Defaults to
    1 GiB.
verbose: 1 prints each report when the run ends (the end of `fit`, or
    the guard's `close()`), 0 is silent. Defaults to `1`.
max_compilations: Most XLA compilations (new input signatures of the
    training batches) one epoch may cause before `on_violation` applies;
    `None` disables the check. Checked only when the train step is
    compiled with XLA. Defaults to `8`.
on_violation: What exceeding `max_compilations` does: `"warn"` (an
    `XlaGuardWarning`), `"raise"` (`RecompilationLimitError`: it ends
    `fit`, or comes out of the watched step before the step runs) or
    `"stop"` (warns and ends training: `model.stop_training` in `fit`,
    `stop_requested` for a custom loop). Defaults to `"warn"`.
html_report: Write the run's standalone HTML report (`write_html`) to
    this path when the run ends (on the chief of a multi-worker run);
    needs the `html` extra (matplotlib). Defaults to `None`.
profile_workers: Under `MultiWorkerMirroredStrategy`, which workers run
    TensorFlow's profiler: `"chief"` (the others track input signatures
    and steps, and their reports say they were not profiled) or `"all"`
    (every worker; TensorFlow's profiler then aborts non-chief workers
    natively now and then, see docs/multiworker.md, and the guard warns
    once with the measured rate). Single-process training ignores it.
    Defaults to `"chief"`.
"""

_T = TypeVar("_T")


def fill_config_args(doc: str) -> str:
    """Replaces the `{config_args}` line of a docstring with `CONFIG_ARGS`.

    Each line of `CONFIG_ARGS` gets the placeholder line's indentation.

    Args:
        doc: A docstring holding `{config_args}` on a line of its own.

    Returns:
        The docstring with the shared `Args:` entries in place.

    Raises:
        ValueError: If `doc` has no `{config_args}` line.
    """
    for line in doc.splitlines():
        if line.strip() == "{config_args}":
            indent = line[: len(line) - len(line.lstrip())]
            text = "\n".join(indent + entry if entry else entry for entry in CONFIG_ARGS.splitlines())
            return doc.replace(line, text)
    raise ValueError("The docstring has no `{config_args}` line.")


def config_args_doc(cls: _T) -> _T:
    """Class decorator: the shared config arguments in a class's docstring and signature.

    Fills `{config_args}` in the class docstring (`fill_config_args`). An
    adapter whose `__init__` takes `**fields` (and passes them to
    `GuardConfig.of`) gets `GuardConfig`'s fields as keyword-only
    parameters in place of `**fields` in its signature (`inspect`,
    `help()`): a new field is added to `GuardConfig` and `CONFIG_ARGS`
    only.
    """
    cls.__doc__ = fill_config_args(cls.__doc__ or "")
    init = vars(cls).get("__init__")
    if init is not None:
        signature = inspect.signature(init)
        if "fields" in signature.parameters:
            init.__signature__ = with_config_fields(signature)
    return cls


def config_fields() -> list[tuple[str, str, Any]]:
    """`GuardConfig`'s keyword arguments: `(name, annotation text, default)`, in order."""
    return [(f.name, str(f.type), f.default) for f in dataclasses.fields(GuardConfig) if f.init]


def with_config_fields(signature: inspect.Signature) -> inspect.Signature:
    """`signature` with its `**fields` replaced by `GuardConfig`'s fields, keyword-only.

    Fields the signature already names (e.g. a positional `log_dir`) stay
    where they are.
    """
    params = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    named = {p.name for p in params}
    fields = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
        for name, annotation, default in config_fields()
        if name not in named
    ]
    at = next((i for i, p in enumerate(params) if p.kind is inspect.Parameter.KEYWORD_ONLY), len(params))
    return signature.replace(parameters=params[:at] + fields + params[at:])


@config_args_doc
@dataclass(frozen=True)
class GuardConfig:
    """What a guard profiles, how it analyzes and where it writes.

    Validated once when created; `XlaGuardCallback`, `XlaGuard` and
    `XlaGuardEngine` take the same keyword arguments and build one of these
    from them (see their `config` attribute).

    Args:
        {config_args}

    Raises:
        ValueError: If an argument is invalid; the message names it, what
            is allowed and the value received.

    Example:

    ```python
    from keras_xla_guard.runtime.config import GuardConfig

    config = GuardConfig(log_dir="logs/xla_guard", profile_epochs=(1, 3))
    print(config.schedule.epochs)  # frozenset({1, 3})
    ```
    """

    log_dir: str | os.PathLike[str] = DEFAULT_LOG_DIR
    profile_epochs: int | Iterable[int] | None = None
    profile_every: int | None = None
    skip_steps: int = DEFAULT_SKIP_STEPS
    max_steps: int | None = DEFAULT_MAX_STEPS
    top_k: int = DEFAULT_TOP_K
    write_summaries: bool = True
    async_analysis: bool = True
    max_trace_bytes: int = DEFAULT_MAX_TRACE_BYTES
    verbose: int = 1
    max_compilations: int | None = DEFAULT_MAX_COMPILATIONS
    on_violation: str = "warn"
    html_report: str | os.PathLike[str] | None = None
    profile_workers: str = "chief"
    schedule: ProfileSchedule = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        log_dir = self.log_dir
        if not isinstance(log_dir, (str, os.PathLike)) or not os.fspath(log_dir):
            raise ValueError(f"`log_dir` must be a non-empty path. Received: log_dir={log_dir!r}")
        if _URL.match(str(os.fspath(log_dir))):
            # pathlib would fold "gs://b" into the local directory "gs:/b".
            raise ValueError(
                "`log_dir` must be a local directory path, not a URL: remote file systems "
                "(gs://, s3://, hdfs://, ...) are not supported; write locally and copy the "
                f"log dir. Received: log_dir={log_dir!r}"
            )
        schedule = ProfileSchedule.create(
            self.profile_epochs, self.profile_every, self.skip_steps, self.max_steps
        )
        check_int("top_k", self.top_k, minimum=0)
        check_bool("write_summaries", self.write_summaries)
        check_bool("async_analysis", self.async_analysis)
        check_int("max_trace_bytes", self.max_trace_bytes, minimum=1)
        if self.verbose not in (0, 1, True, False):
            raise ValueError(f"`verbose` must be 0 or 1. Received: verbose={self.verbose!r}")
        check_int("max_compilations", self.max_compilations, minimum=1, allow_none=True)
        if self.on_violation not in ON_VIOLATION_CHOICES:
            raise ValueError(
                f"`on_violation` must be one of {ON_VIOLATION_CHOICES}. "
                f"Received: on_violation={self.on_violation!r}"
            )
        html_report = self.html_report
        if html_report is not None and (
            not isinstance(html_report, (str, os.PathLike)) or not os.fspath(html_report)
        ):
            raise ValueError(
                f"`html_report` must be None or a file path. Received: html_report={html_report!r}"
            )
        if self.profile_workers not in PROFILE_WORKERS_CHOICES:
            raise ValueError(
                f"`profile_workers` must be one of {PROFILE_WORKERS_CHOICES}. "
                f"Received: profile_workers={self.profile_workers!r}"
            )
        # A generator would be used up by the check above; keep what it held.
        epochs = None if self.profile_epochs is None else tuple(sorted(schedule.epochs))
        for name, value in (
            ("log_dir", Path(log_dir)),
            ("profile_epochs", epochs),
            ("verbose", int(self.verbose)),
            ("schedule", schedule),
        ):
            object.__setattr__(self, name, value)

    @property
    def explicit_schedule(self) -> bool:
        """Whether the user chose the epochs (else the run's second epoch is profiled)."""
        return self.profile_epochs is not None or self.profile_every is not None

    @classmethod
    def of(cls, config: GuardConfig | None, fields: dict[str, Any], owner: str) -> GuardConfig:
        """The config an adapter was given: `config=`, or its keyword arguments.

        Args:
            config: A ready `GuardConfig`, or `None`.
            fields: The `GuardConfig` keyword arguments the adapter was
                given (fields left out take their defaults).
            owner: The adapter's name, for the error.

        Returns:
            `config`, or a new `GuardConfig(**fields)`.

        Raises:
            TypeError: If a keyword is not a field of `GuardConfig`, as
                for any unexpected keyword argument.
            ValueError: If `config` is not a `GuardConfig`, or is given
                together with a field that differs from its default.
        """
        defaults = {f.name: f.default for f in dataclasses.fields(cls) if f.init}
        unknown = sorted(set(fields) - set(defaults))
        if unknown:
            raise TypeError(
                f"{owner} got unexpected keyword argument(s) {', '.join(map(repr, unknown))}; "
                f"its config fields are {', '.join(defaults)}"
            )
        if config is None:
            return cls(**fields)
        if not isinstance(config, cls):
            raise ValueError(f"`config` must be a GuardConfig or None. Received: config={config!r}")
        changed = sorted(name for name, value in fields.items() if value != defaults[name])
        if changed:
            raise ValueError(
                f"{owner} takes `config` or the config's fields as keyword arguments, not "
                f"both. Received: config={config!r} and {', '.join(changed)}"
            )
        return config
