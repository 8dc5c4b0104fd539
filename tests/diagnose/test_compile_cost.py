"""Tests for `keras_xla_guard.diagnose.compile_cost`: the COMPILE_COST_HIGH verdict."""

from __future__ import annotations

import subprocess
import sys

import pytest

from keras_xla_guard.diagnose.compile_cost import compile_cost_verdicts
from keras_xla_guard.trace.compiles import CompileRecord
from keras_xla_guard.trace.report import CoverageReport


def _compile_report(seconds: float, program: str = "one_step_on_data", wall: float = 2.0) -> CoverageReport:
    rows = tuple(CompileRecord(program, "m", 0.0, seconds / 2) for _ in range(2))
    return CoverageReport(compilations=2, compile_table=rows, window_wall_s=wall)


def test_compile_cost_verdict_recommends_the_persistent_cache_with_the_exact_line() -> None:
    """Compilation over 20 % of the window: a warning whose fix is the export line; info once the cache is on."""
    (verdict,) = compile_cost_verdicts(_compile_report(1.0), env={})
    assert (verdict.code, verdict.status) == ("COMPILE_COST_HIGH", "warning")
    assert "2 XLA compilation(s) took 1.00 s, 50% of the window" in verdict.message
    # What the cache cannot do is said with it (docs/compile-cost.md measures both).
    assert "a rerun of the same script" in verdict.message
    assert "a process that traces other functions first misses" in verdict.message
    assert "the directory grows with every program" in verdict.message
    assert verdict.fix.startswith(
        'export TF_XLA_FLAGS="--tf_xla_persistent_cache_directory=$HOME/.cache/xla"'
    )
    (on,) = compile_cost_verdicts(
        _compile_report(1.0), env={"TF_XLA_FLAGS": "--tf_xla_persistent_cache_directory=/c"}
    )
    assert (on.status, on.fix) == ("info", "")
    assert compile_cost_verdicts(_compile_report(0.3), env={}) == []


@pytest.mark.parametrize(
    "flag", ["--tf_xla_persistent_cache_read_only=true", "--tf_xla_persistent_cache_read_only"]
)
def test_compile_cost_with_a_read_only_cache_says_nothing_is_stored(flag: str) -> None:
    """A read-only cache stores nothing: a warning that says so, whose fix is the same line without the flag."""
    flags = f"--tf_xla_auto_jit=2 --tf_xla_persistent_cache_directory=/c {flag}"
    (verdict,) = compile_cost_verdicts(_compile_report(1.0), env={"TF_XLA_FLAGS": flags})
    assert (verdict.code, verdict.status) == ("COMPILE_COST_HIGH", "warning")
    assert verdict.message == (
        "2 XLA compilation(s) took 1.00 s, 50% of the window. The persistent cache (/c) is read-only "
        "(--tf_xla_persistent_cache_read_only): these programs were not in it, and TensorFlow stores "
        "nothing there, so every run compiles them again; one run without that flag stores them."
    )
    assert "fills" not in verdict.message
    assert verdict.fix == (
        'export TF_XLA_FLAGS="--tf_xla_auto_jit=2 --tf_xla_persistent_cache_directory=/c"  # before starting Python'
    )
    off = "--tf_xla_persistent_cache_directory=/c --tf_xla_persistent_cache_read_only=false"
    (writable,) = compile_cost_verdicts(_compile_report(1.0), env={"TF_XLA_FLAGS": off})
    assert (writable.status, writable.fix) == ("info", "")
    assert writable.message.endswith("(a first run fills it).")


def _tracked(*rows: CompileRecord, wall: float = 2.0) -> CoverageReport:
    return CoverageReport(
        compilations=len(rows), compile_table=rows, window_wall_s=wall, expected_compilations=1
    )


def test_compilations_at_steps_with_no_new_signature_are_named_and_left_out_of_the_cache_advice() -> None:
    """A tf.function row at a step with no new signature is a RECOMPILED verdict; the cache advice counts the rest."""
    new = CompileRecord("one_step_on_data", "m", 0.0, 0.2, step=0, signature="x: float32[8,4]")
    again = [CompileRecord("one_step_on_data", "m", 0.0, 0.3, step=n) for n in (2, 3, 4)]
    (verdict,) = compile_cost_verdicts(_tracked(new, *again), env={})
    assert (verdict.code, verdict.status) == ("RECOMPILED_WITHOUT_NEW_SIGNATURE", "warning")
    assert verdict.message.startswith(
        "3 XLA compilation(s) of one_step_on_data (0.90 s) came at training steps whose input "
        "signature was not new (steps 2, 3, 4): "
    )
    assert "Neither warm_up nor the persistent compilation cache serves such programs." in verdict.message
    assert "print(explain(model, (x_batch, y_batch)))" in verdict.fix
    # The explained compilation alone is over 20 % of a 0.5 s window: the cache advice is about it only.
    recompiled, cost = compile_cost_verdicts(_tracked(new, *again, wall=0.5), env={})
    assert (recompiled.code, cost.code) == ("RECOMPILED_WITHOUT_NEW_SIGNATURE", "COMPILE_COST_HIGH")
    assert cost.message.startswith("1 XLA compilation(s) took 0.20 s, 40% of the window.")


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        # Auto-clustering compiles a cluster lazily, after it ran a few times.
        (CompileRecord("cluster_0", "m", 0.0, 1.0, step=3), ["COMPILE_COST_HIGH"]),
        # Outside any training step (validation, a function of the user's own).
        (CompileRecord("one_step_on_data", "m", 0.0, 1.0, step=None), ["COMPILE_COST_HIGH"]),
        # A second function compiled at a step whose new signature the first took (a custom loop).
        (CompileRecord("eval_step", "m", 0.0, 1.0, step=0), ["COMPILE_COST_HIGH"]),
        # No cache serves it, so no cache advice either.
        (CompileRecord("one_step_on_data", "m", 0.0, 1.0, step=3), ["RECOMPILED_WITHOUT_NEW_SIGNATURE"]),
    ],
)
def test_only_tf_function_programs_at_a_training_step_count_as_recompiled(
    row: CompileRecord, expected: list[str]
) -> None:
    """Clusters, compilations outside training steps and a new signature's step are not called recompiled."""
    first = CompileRecord("one_step_on_data", "m", 0.0, 0.1, step=0, signature="x: float32[8,4]")
    assert [v.code for v in compile_cost_verdicts(_tracked(first, row), env={})] == expected


def test_without_tracked_signatures_or_on_jax_no_compilation_is_called_unexplained() -> None:
    """Untracked signatures (a trace on its own) prove nothing; JAX says it with its own counts."""
    row = CompileRecord("one_step_on_data", "m", 0.0, 1.0, step=3)
    untracked = CoverageReport(compilations=1, compile_table=(row,), window_wall_s=2.0)
    assert [v.code for v in compile_cost_verdicts(untracked, env={})] == ["COMPILE_COST_HIGH"]
    assert [v.code for v in compile_cost_verdicts(_tracked(row), env={}, backend="jax")] == [
        "COMPILE_COST_HIGH"
    ]


def test_compile_cost_imports_neither_tensorflow_nor_keras() -> None:
    """The rule is pure: importing and running it loads neither TensorFlow nor Keras."""
    code = (
        "import sys\n"
        "from keras_xla_guard.diagnose.compile_cost import compile_cost_verdicts\n"
        "from keras_xla_guard.trace.report import CoverageReport\n"
        "assert compile_cost_verdicts(CoverageReport(), env={}) == []\n"
        "print(sorted(m for m in ('keras', 'tensorflow') if m in sys.modules))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"
