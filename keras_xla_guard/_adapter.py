"""What the Keras callback and the custom-loop guard share, written once.

Both adapters build a `GuardConfig` from the same keyword arguments, run an
`XlaGuardEngine` with the same outputs and notes, start a multi-worker run
the same way and write the HTML page at the end; `GuardAdapter` holds that
part, so a new config field is added to `GuardConfig` (and its text to
`CONFIG_ARGS`) and nowhere else. This module wires the rooms together: the
engine (`runtime/`), the outputs (`output/sinks.py`, `output/page.py`), the
cluster (`distributed.py`) and the compile-cost rule (`diagnose/`), which
the engine itself never names.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from keras_xla_guard.backend import Backend
from keras_xla_guard.diagnose.compile_cost import compile_cost_verdicts
from keras_xla_guard.distributed import ClusterSink, WorkerInfo
from keras_xla_guard.output.page import write_html_at_end, write_run_html
from keras_xla_guard.output.sinks import default_sinks
from keras_xla_guard.runtime.compile_log import EpochCompilations
from keras_xla_guard.runtime.config import GuardConfig
from keras_xla_guard.runtime.engine import NoteProvider, OpLayers, XlaGuardEngine
from keras_xla_guard.signatures.tracker import EpochSignatures
from keras_xla_guard.trace.report import CoverageReport

__all__ = ["GuardAdapter", "compile_cost_notes", "model_op_layers"]


def compile_cost_notes(report: CoverageReport) -> list[str]:
    """The compile-cost rule as report notes (e.g. the persistent cache's `export` line)."""
    return [v.as_note() for v in compile_cost_verdicts(report, backend=report.backend or "tensorflow")]


def model_op_layers(model: Any) -> OpLayers:
    """The model's layer of each op name (an op table's "layer" column), or `None` for each without a model."""

    def op_layers_of(op_names: Sequence[str]) -> tuple[str | None, ...]:
        from keras_xla_guard import seam
        from keras_xla_guard.diagnose.scopes import op_layers

        if model is None:
            return (None,) * len(op_names)
        optimizer = getattr(getattr(model, "optimizer", None), "name", None)
        return op_layers(op_names, (layer.name for layer in seam.all_layers(model)), optimizer=optimizer)

    return op_layers_of


class GuardAdapter:
    """The part of `XlaGuardCallback` and `XlaGuard` that does not depend on how training runs.

    A mixin: the adapter calls `_init_guard` from its `__init__`,
    `_begin_engine_run` when its run starts and `_end_engine_run` when it
    ends.

    Attributes:
        config: The guard's `GuardConfig`.
        engine: The `XlaGuardEngine` it drives.
        worker: This worker's `WorkerInfo` in a multi-worker run, else
            `None`.
    """

    config: GuardConfig
    engine: XlaGuardEngine
    worker: WorkerInfo | None

    def _init_guard(
        self,
        owner: str,
        config: GuardConfig | None,
        fields: dict[str, Any],
        notes: Sequence[NoteProvider] = (),
        backend: Backend | None = None,
    ) -> None:
        """Builds the config and the engine.

        Args:
            owner: The adapter's class name, for errors.
            config: The `config=` argument.
            fields: The `GuardConfig` keyword arguments the adapter was given.
            notes: The adapter's own note providers; the compile-cost rule
                comes after them. Defaults to `()`.
            backend: The `Backend` the step runs on. Defaults to `None`:
                the engine's default, TensorFlow's.

        Raises:
            ValueError: If a field is invalid, or `config` comes with
                changed fields.
            TypeError: If a keyword is not a `GuardConfig` field.
        """
        self.config = GuardConfig.of(config, fields, owner)
        self.engine = XlaGuardEngine(
            self.config,
            sinks=default_sinks,
            notes=notes,
            # After the signatures are joined: it tells compilations no new signature caused.
            epoch_notes=[compile_cost_notes],
            backend=backend,
        )
        self.worker = None

    @property
    def reports(self) -> dict[int, CoverageReport]:
        """Reports keyed by 0-based epoch index.

        Reading this waits for trace analyses still running, so a report
        is there as soon as its epoch has ended.
        """
        return self.engine.reports

    @property
    def signatures(self) -> dict[int, EpochSignatures]:
        """Input-signature figures of every finished epoch with observed steps, keyed by epoch.

        Present for every epoch, profiled or not: distinct and new
        signatures, expected compilations and explanations.
        """
        return self.engine.signatures

    @property
    def compilations(self) -> dict[int, EpochCompilations]:
        """Every epoch's compilations, keyed by epoch, with no profiler needed.

        Each with its function (train, test, predict, warm_up, other),
        step and input signature: under JAX counted as they happened
        (`jax.monitoring`, with trace/lower/compile seconds); under
        TensorFlow one per new input signature of each function compiled
        with XLA (compile seconds where a profiled window measured them).
        The same count the run file, `report --max-compilations` and the
        HTML page use.
        """
        return self.engine.compilations

    @property
    def log_dir(self) -> str:
        """The directory holding traces and TensorBoard summaries."""
        return os.fspath(self.config.log_dir)

    def write_html(self, path: str | os.PathLike[str], compare: Any = None) -> Path:
        """Writes this run's standalone HTML report.

        `html_report=path` writes it when the run ends; this writes it at
        any time (docs/html-report.md).

        Args:
            path: The HTML file (its directory is created).
            compare: A `CompareReport` of the same model to show. Defaults
                to `None`: the one `compare` saved in this `log_dir`, if any.

        Returns:
            The path written.

        Raises:
            MissingDependencyError: If matplotlib is not installed
                (`pip install "keras-xla-guard[html]"`).
            OSError: If the file cannot be written.

        Example:

        ```python
        guard.write_html("xla_guard_report.html")
        ```
        """
        return write_run_html(self.engine, path, compare=compare)

    def _begin_engine_run(self, strategy: Any, **train_begin: Any) -> None:
        """Starts the engine's run; under a multi-worker strategy, as this worker.

        Args:
            strategy: The training's `tf.distribute.Strategy`, `None` to
                look for one (`ClusterSink.begin`), or `False` for
                single-process training.
            **train_begin: `XlaGuardEngine.train_begin`'s other arguments.
        """
        cluster = None if strategy is False else ClusterSink.begin(self.config, strategy)
        self.worker = None if cluster is None else cluster.info
        if cluster is None:
            self.engine.train_begin(**train_begin)
            return
        # The cluster sink writes the run file and, on the chief, TensorBoard.
        self.engine.train_begin(
            trace_dir=cluster.trace_dir,
            sinks=[*default_sinks(self.config, tensorboard=False), cluster],
            not_profiled=cluster.not_profiled,
            skip_first_step=True,
            **train_begin,
        )

    def _end_engine_run(self, timeout: float | None = None) -> None:
        """Ends the engine's run and writes `html_report`, if set (the chief only)."""
        self.engine.train_end(timeout)
        write_html_at_end(self.engine, self.worker)
