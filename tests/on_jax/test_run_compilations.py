"""One count of a run's compilations, everywhere, equal to jax.monitoring's own (Keras on JAX).

The JAX twin of tests/test_run_compilations.py: a fit over sequence
lengths known by construction, with validation, for several epochs,
profiled (epoch 1) and not. The test's own `jax.monitoring` listener
counts the backend compilations of `train_step` and `test_step`; the guard,
a budget, the run file, `report --max-compilations`, the HTML page and the
console's headline must say the same. A warm-up of bare shapes types the
int32 token input as the model does, so `fit` compiles no train program
again, and its compilations are `warm_up`'s rows, not epoch 0's train ones.
"""

from __future__ import annotations

import contextlib
import io
import json
from html import escape
from pathlib import Path

import pytest
from _fit_helpers import _seq_batches, _seq_model
from _jax_helpers import monitoring_oracle

import keras_xla_guard as kxg
from keras_xla_guard.cli import main
from keras_xla_guard.output.run_summary import run_compilations
from keras_xla_guard.output.runfile import read_run_file

TRAIN_LENGTHS = (4, 6, 8, 10, 4, 6)  # 4 train signatures
VALID_LENGTHS = (5, 4)  # 2 test signatures
EPOCHS = 3


def _batches(lengths):
    import keras

    class Batches(keras.utils.PyDataset):
        def __init__(self) -> None:
            super().__init__()
            self.batches = _seq_batches(lengths)

        def __len__(self) -> int:
            return len(self.batches)

        def __getitem__(self, i: int):
            return self.batches[i]

    return Batches()


def _fit(log_dir: Path, **guard_kwargs) -> dict:
    import keras

    model = _seq_model(True)
    guard = kxg.XlaGuardCallback(log_dir=log_dir, **guard_kwargs)
    console = io.StringIO()
    with monitoring_oracle().counting() as oracle, kxg.max_compilations(None) as budget:
        start = [len(oracle.compiles)]
        marker = keras.callbacks.LambdaCallback(
            on_train_begin=lambda logs=None: start.append(len(oracle.compiles))
        )
        with contextlib.redirect_stdout(console):
            model.fit(
                _batches(TRAIN_LENGTHS),
                validation_data=_batches(VALID_LENGTHS),
                epochs=EPOCHS,
                shuffle=False,
                verbose=0,
                callbacks=[marker, guard],
            )
        # From the guard's on_train_begin on (its warm-up included): the marker runs before it.
        seen = oracle.compiles[start[-1] :]
    counted: dict[str, int] = {}
    for epoch in guard.compilations.values():
        for function, n in epoch.counts.items():
            counted[function] = counted.get(function, 0) + n
    caused = [r for c in guard.compilations.values() for r in c.rows if r.function == "train" and r.signature]
    return {
        "oracle": {name: seen.count(f"jit({name})") for name in ("train_step", "test_step")},
        "guard": counted,
        "caused": len(caused),
        "budget": budget.count,
        "console": console.getvalue(),
    }


@pytest.fixture(scope="module", params=["profiled", "unprofiled"])
def fitted(request, tmp_path_factory):
    log_dir = tmp_path_factory.mktemp(f"jax_run_compilations_{request.param}")
    guard = {} if request.param == "profiled" else {"profile_epochs": ()}
    return request.param, log_dir, _fit(log_dir, **guard)


def _report(capsys, *argv: object) -> tuple[int, str, str]:
    code = main(["report", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_guard_and_a_budget_count_what_jax_monitoring_saw(fitted):
    """The test's own listener, the guard's rows and a budget agree; 4 train compilations carry their signature.

    Keras 3.10 on JAX 0.6 compiles the train step again at a fit's second step and at each later
    epoch's first with no new batch shape (the model state placed differently): those have none.
    """
    _, _, out = fitted
    oracle = out["oracle"]
    assert oracle["test_step"] == 2 and oracle["train_step"] >= 4
    assert (out["guard"]["train"], out["guard"]["test"], out["guard"]["warm_up"]) == (
        oracle["train_step"],
        2,
        0,
    )
    assert out["caused"] == 4
    assert out["budget"] == oracle["train_step"] + oracle["test_step"]


def test_the_run_file_and_the_cli_gate_count_every_epoch(fitted, capsys):
    """The run file's compilations and `report --max-compilations` are the oracle's, profiled or not."""
    _, log_dir, out = fitted
    train, total = out["oracle"]["train_step"], sum(out["oracle"].values())
    counted = run_compilations(read_run_file(log_dir))
    assert (counted.total, counted.counts["train"], counted.source, counted.epochs) == (
        total,
        train,
        "counted",
        (0, 1, 2),
    )
    code, text, err = _report(capsys, log_dir, "--max-compilations", total - 1)
    assert (code, err) == (1, "")
    failed = f"{log_dir / 'xla_guard_reports.json'}: {total} XLA compilations exceed --max-compilations {total - 1}"
    assert failed in text
    assert _report(capsys, log_dir, "--max-compilations", total)[0] == 0
    assert _report(capsys, log_dir, "--max-compilations", f"train={train - 1}")[0] == 1


def test_min_coverage_is_refused_where_the_share_is_constant(fitted, capsys):
    """--min-coverage on a JAX run exits 2 with one sentence: its share is constant, or nothing was profiled."""
    profiled, log_dir, _ = fitted
    code, out, err = _report(capsys, log_dir, "--min-coverage", "0.9")
    assert (code, out) == (2, "")
    assert err.count("\n") == 1
    if profiled == "profiled":
        assert "100% by construction; gate on --max-compilations instead" in err
    else:
        assert "no measured profiling window to check --min-coverage against (no trace)" in err


def test_every_output_leads_with_the_recompilation(fitted, capsys, tmp_path):
    """Console, CLI and HTML open with the train compilations, never with a constant 100% share."""
    _, log_dir, out = fitted
    lead = f"The train function compiled {out['oracle']['train_step']} times in this run"
    assert out["console"].startswith(f"keras-xla-guard: run summary (recompiles): {lead}")
    assert "100.0%" not in out["console"].splitlines()[0]
    profiled, text = fitted[0], _report(capsys, log_dir)[1]
    assert text.startswith(f"run summary (recompiles): {lead}")
    # The table shows no share for a JAX window: the run file says which backend took it.
    assert "100.0%" not in text and ("n/a (JAX)" in text) == (profiled == "profiled")
    page = tmp_path / "page.html"
    assert _report(capsys, log_dir, "--html", page)[0] == 0
    html = page.read_text()
    assert f'data-level="recompiles"><p class="headline">{escape(lead)}' in html
    counted = run_compilations(read_run_file(log_dir))
    # Every compilation of the model's functions is a row; Keras' small other programs one line.
    assert html.count('<tr class="counted"') == counted.total == sum(out["oracle"].values())
    other = counted.counts["other"]  # none in a later fit of the process: Keras' helpers are compiled
    assert ("Not listed: " in html) == (other > 0)
    assert other == 0 or f"Not listed: {other} small program(s)" in html


def test_a_warm_up_of_bare_shapes_types_the_int_input_and_spares_fit(tmp_path):
    """warm_up of (8, n) shapes compiles int32 programs: warm_up rows, no train compilation a batch caused."""
    warm = [({"tokens": (8, n)}, (8, 1)) for n in sorted(set(TRAIN_LENGTHS))]
    out = _fit(tmp_path, profile_epochs=(), warm_up=warm)
    guard, oracle = out["guard"], out["oracle"]
    assert oracle["test_step"] == guard["test"] == 2
    # Every train-step program the listener saw is a warm-up row or one no new batch shape caused.
    assert guard["warm_up"] + guard["train"] == oracle["train_step"] and guard["warm_up"] >= 4
    assert out["caused"] == 0
    data = json.loads((tmp_path / "xla_guard_reports.json").read_text())
    rows = [r for e in data["compilations"].values() for r in e["rows"] if r["function"] == "warm_up"]
    assert [(r["epoch"], r["step"]) for r in rows] == [(None, None)] * guard["warm_up"]
    assert "warm_up_missed" not in json.dumps(data)
