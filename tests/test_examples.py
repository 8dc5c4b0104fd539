"""The README's sample output is what examples/variable_lengths.py prints (TensorFlow)."""

from __future__ import annotations

import re

import pytest
from _helpers import REPO, run_script

pytestmark = pytest.mark.slow


def _readme_sample() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = text.split("examples/variable_lengths.py", 1)[1].split("```\n", 2)[1]
    return [line for line in block.splitlines() if line and line.strip() != "..."]


def test_the_readme_sample_is_the_examples_own_output(tmp_path):
    """Every line the README shows is a line the example prints; timings may differ, nothing else."""
    out = run_script(REPO / "examples" / "variable_lengths.py", tmp_path / "logs").splitlines()
    sample = _readme_sample()
    assert sample[0].startswith(
        "keras-xla-guard: run summary (recompiles): The train function compiled 8 times"
    )
    timing = re.compile(r"\d+\.\d ms wall")
    for line in sample:
        assert any(timing.sub("", line) == timing.sub("", printed) for printed in out), line
    # The run file agrees: 8 train compilations over the run, none after epoch 0.
    from keras_xla_guard.output.run_summary import run_compilations
    from keras_xla_guard.output.runfile import read_run_file

    counted = run_compilations(read_run_file(tmp_path / "logs"))
    assert (counted.counts["train"], counted.epochs) == (8, (0, 1, 2))
