"""Compile-cost verdicts: is compilation a large share of a run, and what saves it.

Used by `doctor(trace=...)` and, through the adapters' note providers, on
every profiled window of a guarded run. Pure: reads a `CoverageReport` and
`TF_XLA_FLAGS`, imports no TensorFlow.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from typing import Any

from keras_xla_guard.backend.xla_cache import persistent_cache, recommended_flags
from keras_xla_guard.diagnose.verdict import EFFECTIVENESS, INFO, WARNING, Verdict

__all__ = ["COMPILE_SHARE_THRESHOLD", "compile_cost_verdicts"]

# Compile time above this share of a profiled window's wall time is worth
# caching across runs.
COMPILE_SHARE_THRESHOLD = 0.2
_READ_ONLY_FLAG = "--tf_xla_persistent_cache_read_only"


def compile_cost_verdicts(
    report: Any, env: Mapping[str, str] | None = None, backend: str = "tensorflow"
) -> list[Verdict]:
    """Whether compilation is a large share of a run, and what would save it.

    Measured on XLA:CPU, for Keras `jit_compile=True` and for
    auto-clustering (see docs/compile-cost.md): TensorFlow's persistent
    compilation cache turns a second process' compilations into loads.

    Args:
        report: A `CoverageReport` with `window_wall_s`.
        env: The environment whose `TF_XLA_FLAGS` to read. Defaults to
            `None` (`os.environ`).
        backend: The framework that compiled: `"tensorflow"`, or `"jax"`
            (JAX's own persistent cache, `jax_compilation_cache_dir`).
            Defaults to `"tensorflow"`.

    Returns:
        `RECOMPILED_WITHOUT_NEW_SIGNATURE` first when, with signatures
        tracked on TensorFlow, a `tf.function` program compiled at a
        training step whose input signature was not new (no cache serves
        those, so they are left out of the cost below); then
        `COMPILE_COST_HIGH` or nothing: a warning whose fix is the exact
        `export` line when the cache is off, or read-only (TensorFlow then
        stores nothing, so every run compiles the same programs again);
        `info` when a writable cache is on.

    Example:

    ```python
    from keras_xla_guard import analyze_trace
    from keras_xla_guard.diagnose.compile_cost import compile_cost_verdicts
    for verdict in compile_cost_verdicts(analyze_trace("logs/xla_guard")):
        print(verdict)
    ```
    """
    wall = report.window_wall_s
    table = [c for c in report.compile_table if not c.cache_hit]
    unexplained = _unexplained(report, table) if backend != "jax" else []
    verdicts = [_unexplained_verdict(unexplained)] if unexplained else []
    table = [c for c in table if all(c is not u for u in unexplained)]
    compile_s = sum(c.compile_s or 0.0 for c in table) if table else 0.0
    if not table or not wall or compile_s < COMPILE_SHARE_THRESHOLD * wall:
        return verdicts
    share = f"{len(table)} XLA compilation(s) took {compile_s:.2f} s, {compile_s / wall:.0%} of the window"
    if backend == "jax":
        return [_jax_verdict(share, env)]
    return verdicts + _tf_cost_verdicts(share, env)


def _unexplained(report: Any, table: list[Any]) -> list[Any]:
    """Compilations of a `tf.function` program at a training step no new input signature caused.

    Only where signatures were tracked (`expected_compilations` known): the
    guard then gave every new signature of the window its compilation, so a
    row left without one, at a step that brought no new signature at all,
    compiled for something else (a step with a new signature may compile
    several functions of a custom loop). Auto-clustering's `cluster_*`
    programs are left out: TensorFlow compiles a cluster lazily, after it
    has run a few times, at a step with no new signature.
    """
    if getattr(report, "expected_compilations", None) is None:
        return []
    new_at = {c.step for c in report.compile_table if c.signature is not None}
    return [
        c
        for c in table
        if c.signature is None
        and c.step is not None
        and c.step not in new_at
        and not c.program.startswith("cluster_")
    ]


def _unexplained_verdict(rows: list[Any]) -> Verdict:
    steps = ", ".join(str(c.step) for c in rows[:8]) + (", ..." if len(rows) > 8 else "")
    programs = ", ".join(dict.fromkeys(c.program for c in rows))
    seconds = sum(c.compile_s or 0.0 for c in rows)
    return Verdict(
        "RECOMPILED_WITHOUT_NEW_SIGNATURE",
        EFFECTIVENESS,
        WARNING,
        f"{len(rows)} XLA compilation(s) of {programs} ({seconds:.2f} s) came at training steps whose "
        f"input signature was not new (steps {steps}): something other than the batch's shapes and "
        "dtypes keyed a new program. Most often an op takes a size or shape computed from the "
        "batch's values (or a variable's), which XLA must know at compile time, so TensorFlow "
        "compiles once per value; else the train function was traced again (model.compile called "
        "again). Neither warm_up nor the persistent compilation cache serves such programs.",
        fix=(
            "# Name the op (VALUE_DEPENDENT_COMPILE) with one batch of your training data:\n"
            "from keras_xla_guard import explain\n"
            "print(explain(model, (x_batch, y_batch)))"
        ),
    )


def _tf_cost_verdicts(share: str, env: Mapping[str, str] | None) -> list[Verdict]:
    """`COMPILE_COST_HIGH` on TensorFlow, as its persistent cache's setting calls for."""
    cache = persistent_cache(env)
    if cache is not None and cache.read_only:
        flags = (env if env is not None else os.environ).get("TF_XLA_FLAGS", "")
        writable = " ".join(t for t in shlex.split(flags) if not t.startswith(_READ_ONLY_FLAG))
        return [
            Verdict(
                "COMPILE_COST_HIGH",
                EFFECTIVENESS,
                WARNING,
                f"{share}. The persistent cache ({cache.directory}) is read-only "
                f"({_READ_ONLY_FLAG}): these programs were not in it, and TensorFlow stores "
                "nothing there, so every run compiles them again; one run without that flag "
                "stores them.",
                fix=f"{recommended_flags(cache.directory, env={'TF_XLA_FLAGS': writable})}  # before starting Python",
            )
        ]
    if cache is not None:
        return [
            Verdict(
                "COMPILE_COST_HIGH",
                EFFECTIVENESS,
                INFO,
                f"{share}; the persistent cache ({cache.directory}) is on, so a later "
                "run with the same shapes loads them instead (a first run fills it).",
            )
        ]
    return [
        Verdict(
            "COMPILE_COST_HIGH",
            EFFECTIVENESS,
            WARNING,
            f"{share}. TensorFlow's persistent compilation cache would let a rerun of the same script "
            "load them (its key holds the traced function's name, so a process that traces other "
            "functions first misses; the directory grows with every program, prune it yourself), "
            "and keras_xla_guard.warm_up compiles them before the first epoch.",
            fix=f"{recommended_flags(env=env)}  # before starting Python",
        )
    ]


def _jax_verdict(share: str, env: Mapping[str, str] | None) -> Verdict:
    """The JAX form: JAX's persistent cache, and its 1 s threshold that keeps small programs out."""
    from keras_xla_guard.backend.jax_cache import jax_persistent_cache, recommended_setting

    cache = jax_persistent_cache(env)
    if cache is None:
        return Verdict(
            "COMPILE_COST_HIGH",
            EFFECTIVENESS,
            WARNING,
            f"{share}. JAX's persistent compilation cache would let the next run load them, and "
            "keras_xla_guard.warm_up compiles them before the first epoch.",
            fix=f"{recommended_setting()}  # before starting Python",
        )
    if cache.min_compile_time_s > 0:
        return Verdict(
            "COMPILE_COST_HIGH",
            EFFECTIVENESS,
            WARNING,
            f"{share}. JAX's persistent cache ({cache.directory}) is on but stores only programs "
            f"that compiled for at least {cache.min_compile_time_s:g} s "
            "(jax_persistent_cache_min_compile_time_secs); faster ones compile again every run.",
            fix=f"{recommended_setting(cache.directory)}  # before starting Python",
        )
    return Verdict(
        "COMPILE_COST_HIGH",
        EFFECTIVENESS,
        INFO,
        f"{share}; JAX's persistent cache ({cache.directory}) is on, so a later run with the "
        "same shapes loads them instead (a first run fills it).",
    )
