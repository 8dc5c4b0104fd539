"""notebooks/quickstart.ipynb: committed clean, and executed end to end it tells the story;
its stored executed copy (the docs page) is the same notebook and tells it too."""

from __future__ import annotations

import base64
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "quickstart.ipynb"
# The copy with outputs that the docs page shows (`make notebook-docs` refreshes it).
EXECUTED = NOTEBOOK.parent / "executed" / NOTEBOOK.name
RESULTS_PREFIX = "NOTEBOOK_RESULTS "
EXECUTABLE_PREFIX = "KERNEL_EXECUTABLE "
# Seconds any single cell may run; the whole notebook takes 1-2 minutes on 2 cores.
CELL_TIMEOUT_S = 600


def _outputs(nb, output_type: str | None = None) -> list:
    return [
        output
        for cell in nb.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if output_type is None or output.output_type == output_type
    ]


def _stdout(nb) -> str:
    return "".join(o.text for o in _outputs(nb, "stream") if o.name == "stdout")


def test_committed_notebook_is_valid_and_has_no_outputs():
    """The committed notebook validates as nbformat 4 and carries no outputs or execution counts."""
    import nbformat

    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code_cells = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert code_cells
    assert all(cell.outputs == [] and cell.execution_count is None for cell in code_cells)
    assert nb.metadata.kernelspec.name == "python3"


def _check_results(results: dict) -> None:
    """The story's numbers, whichever run printed them."""
    assert results["coverage_autojit"] == 0.0
    assert "AUTOJIT_NOT_EFFECTIVE_CPU_FLAG_MISSING" in results["doctor_codes"]
    # Exact by construction: every op of a jit_compile=True Keras 3 step on
    # arrays runs inside the program, so the window holds no plain op kernel
    # (measured: 0.0 s of plain op time in every epoch of repeated runs).
    assert results["coverage_jit_compile"] == 1.0
    before, after = results["compilations_before_bucketing"], results["compilations_after_bucketing"]
    assert 1 <= after <= len(results["buckets"]) < before
    assert all(len(times) >= 3 and min(times) > 0 for times in results["step_ms"].values())


def test_docs_copy_is_the_notebook_as_it_ran():
    """The stored executed copy has the notebook's cells in order, ran them all, and tells the story."""
    import nbformat

    clean = nbformat.read(NOTEBOOK, as_version=4)
    nb = nbformat.read(EXECUTED, as_version=4)
    nbformat.validate(nb)
    assert [(c.cell_type, c.source) for c in nb.cells] == [(c.cell_type, c.source) for c in clean.cells]
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1))
    assert _outputs(nb, "error") == []
    lines = [line for line in _stdout(nb).splitlines() if line.startswith(RESULTS_PREFIX)]
    assert len(lines) == 1
    _check_results(json.loads(lines[0][len(RESULTS_PREFIX) :]))
    assert "pad_to_buckets(dataset, (" in _stdout(nb)
    assert any("image/png" in o.get("data", {}) for o in _outputs(nb))


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """The notebook run by nbclient in a temporary working directory, on this venv's Python."""
    import nbformat
    from nbclient import NotebookClient

    work = tmp_path_factory.mktemp("quickstart")
    shutil.copy(NOTEBOOK, work / NOTEBOOK.name)
    nb = nbformat.read(work / NOTEBOOK.name, as_version=4)
    # Only in this in-memory copy: proves which interpreter ran the cells.
    nb.cells.append(nbformat.v4.new_code_cell(f"import sys\nprint({EXECUTABLE_PREFIX!r} + sys.executable)"))
    # jupyter_client starts a "python3" kernelspec whose argv[0] is "python"
    # with sys.executable of this (the venv's) interpreter; the appended cell
    # checks that it really did.
    client = NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(work)}},
    )
    # The story assumes TensorFlow's defaults: no XLA flags from the caller's shell.
    env = {k: v for k, v in os.environ.items() if k not in ("TF_XLA_FLAGS", "KERAS_BACKEND")}
    client.execute(env=env)
    return nb, work


@pytest.mark.slow
def test_notebook_runs_on_this_interpreter_in_its_working_dir(executed):
    """Every cell ran without error on the test's own Python, writing logs into the temp dir."""
    nb, work = executed
    assert _outputs(nb, "error") == []
    lines = [line for line in _stdout(nb).splitlines() if line.startswith(EXECUTABLE_PREFIX)]
    assert [line[len(EXECUTABLE_PREFIX) :] for line in lines] == [sys.executable]
    assert list((work / "logs" / "notebook").glob("*/plugins/profile/*/*.xplane.pb"))


@pytest.mark.slow
def test_notebook_measures_problem_fix_and_bucketing(executed):
    """Coverage 0 with set_jit(True), 1 with jit_compile=True; bucketing cuts compilations."""
    nb, _ = executed
    lines = [line for line in _stdout(nb).splitlines() if line.startswith(RESULTS_PREFIX)]
    assert len(lines) == 1, lines
    _check_results(json.loads(lines[0][len(RESULTS_PREFIX) :]))


@pytest.mark.slow
def test_notebook_shows_recommendation_and_plots(executed):
    """The guard's explanation with its pad_to_buckets fix is printed and the plots are a PNG."""
    nb, _ = executed
    text = _stdout(nb)
    assert "varied across" in text
    assert "pad_to_buckets(dataset, (" in text
    assert "tensorboard --logdir logs/notebook" in "".join(
        cell.source for cell in nb.cells if cell.cell_type == "markdown"
    )
    pngs = [base64.b64decode(o.data["image/png"]) for o in _outputs(nb) if "image/png" in o.get("data", {})]
    assert pngs and all(png.startswith(b"\x89PNG\r\n\x1a\n") for png in pngs)


@pytest.mark.slow
def test_notebook_compares_plain_and_jit_compile(executed):
    """The compare section: plain compiles nothing, jit_compile once; 4 epochs of 64 steps projected."""
    nb, work = executed
    line = next(line for line in _stdout(nb).splitlines() if line.startswith(RESULTS_PREFIX))
    compared = json.loads(line[len(RESULTS_PREFIX) :])["compare"]
    assert compared["compilations"] == {"plain": 0, "jit_compile": 1}
    assert compared["planned_steps"] == 4 * 2048 // 32
    assert compared["verdict"].startswith(compared["best_mode"])
    assert compared["verdict"] in _stdout(nb)
    assert list((work / "logs" / "notebook" / "compare" / "jit_compile").glob("events.out.tfevents.*"))
