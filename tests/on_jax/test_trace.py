"""A real JAX CPU trace read by the package, against xprof's conversion of it and jax.monitoring.

Epoch 0 profiled from its first step: the window holds the two train_step
compilations (steps 0 and 2) and Keras' three eager ones at epoch end; the
validation's test_step compiles after the window closed.
"""

from __future__ import annotations

import collections
import json
import re

import pytest
from _jax_helpers import fit_on_jax

pytestmark = pytest.mark.slow

# One program run, as PjRt names its launch: `PjRtCpuExecutable::ExecuteHelper`
# (JAX 0.6), `CommonPjRtLoadedExecutable::ExecuteHelperOnSingleDevice` (0.10).
_LAUNCH = re.compile(r"^\w*PjRt\w*Executable::ExecuteHelper\w*$")


@pytest.fixture(scope="module")
def first_epoch(tmp_path_factory):
    """A fit whose epoch 0 is profiled from step 0."""
    return fit_on_jax(tmp_path_factory.mktemp("jax_trace") / "xla_guard", profile_epochs=(0,), skip_steps=0)


def _xprof_event_counts(trace: str) -> collections.Counter:
    """How often each complete event appears in xprof's trace_viewer conversion of `trace`."""
    from xprof.convert import raw_to_tool_data

    data, _ = raw_to_tool_data.xspace_to_tool_data([trace], "trace_viewer", {})
    return collections.Counter(e["name"] for e in json.loads(data)["traceEvents"] if e.get("ph") == "X")


def test_launches_compilations_and_steps_agree_with_xprof(first_epoch):
    """Launches, compilations and step markers of the report equal xprof's counts of the same events."""
    report = first_epoch.guard.reports[0]
    assert report.ok, report.reason
    xprof = _xprof_event_counts(report.trace_paths[0])
    assert report.xla_executions == sum(n for name, n in xprof.items() if _LAUNCH.match(name)) > 0
    assert report.compilations == xprof["CpuCompiler::RunBackend"]
    assert report.steps_profiled == sum(n for name, n in xprof.items() if name.startswith("train ")) == 3


def test_the_windows_compilations_equal_jax_monitorings(first_epoch):
    """The trace's compile table holds what jax.monitoring counted in the window: train_step at steps 0 and 2."""
    report = first_epoch.guard.reports[0]
    counted = first_epoch.guard.engine.compilations[0]
    in_window = [r for r in counted.rows if r.function != "test"]
    assert report.compilations == len(in_window)
    train = [(row.program, row.step) for row in report.compile_table if row.program == "jit_train_step"]
    assert train == [("jit_train_step", row.step) for row in in_window if row.function == "train"]
    assert [row.step for row in in_window if row.signature is not None] == [0, 2]


def test_the_report_says_why_coverage_is_not_its_headline(first_epoch):
    """A JAX window's text leads with the programs' share of the window and says once why no coverage."""
    from keras_xla_guard.output.tensorboard_markdown import report_markdown
    from keras_xla_guard.trace._text import JAX_COVERAGE_NOTE

    report = first_epoch.guard.reports[0]
    text = str(report)
    assert text.startswith("JAX window (epoch 0, 3 steps")
    assert "XLA coverage" not in text.splitlines()[0]
    assert text.count(JAX_COVERAGE_NOTE) == 1
    assert report_markdown(report).startswith("**JAX window: XLA programs kept the device ")
    lines = text.splitlines()
    first = lines.index("  per step:          wall       busy   host gap  launches") + 1
    assert [line.split()[:2] for line in lines[first : first + len(report.steps)]] == [
        ["step", str(step.step)] for step in report.steps
    ]
    assert "TF_XLA_FLAGS" not in text
