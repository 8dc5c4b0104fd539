"""One count of a run's compilations, everywhere, equal to the modules XLA dumped (TensorFlow).

A `jit_compile=True` fit over sequence lengths known by construction, with
validation, for several epochs, with profiling on (the default epoch 1)
and off (`profile_epochs=()`): the compilations of the whole run must be
the same number in the guard (`guard.compilations`), a budget around the
fit, the run file, `report --max-compilations`, `report --json`, the HTML
page, TensorBoard and the console's headline - and equal to the modules
XLA wrote with `XLA_FLAGS=--xla_dump_to` (read once per process, hence a
fresh interpreter). The oracle callback splits them: modules dumped between
`on_test_begin` and `on_test_end` are the test function's.
"""

from __future__ import annotations

import json
import re
from html import escape
from pathlib import Path

import pytest
from _fit_helpers import _events
from _helpers import run_python

from keras_xla_guard.cli import main
from keras_xla_guard.output.run_summary import run_compilations
from keras_xla_guard.output.runfile import read_run_file

pytestmark = [pytest.mark.slow, pytest.mark.tf]

TRAIN_LENGTHS = (4, 6, 8, 10, 4, 6)  # 4 train signatures
VALID_LENGTHS = (5, 4)  # 2 test signatures
EPOCHS = 3

_SCRIPT = """
import contextlib, io, json, os, sys, tempfile
dump = tempfile.mkdtemp()
os.environ["XLA_FLAGS"] = f"--xla_dump_to={dump}"
sys.path.insert(0, os.environ["TESTS"])
import keras
from _fit_helpers import _seq_batches, _seq_model
import keras_xla_guard as kxg

def modules():
    return len({f.split(".")[0] for f in os.listdir(dump) if f.endswith(".before_optimizations.txt")})

class Oracle(keras.callbacks.Callback):
    test, _at = 0, 0
    def on_test_begin(self, logs=None):
        self._at = modules()
    def on_test_end(self, logs=None):
        self.test += modules() - self._at

class Batches(keras.utils.PyDataset):
    def __init__(self, lengths):
        super().__init__()
        self.batches = _seq_batches(lengths)
    def __len__(self):
        return len(self.batches)
    def __getitem__(self, i):
        return self.batches[i]

keras.utils.set_random_seed(0)
model = _seq_model(True)
kwargs = json.loads(os.environ["GUARD_KWARGS"])
if "warm_up" in kwargs:
    kwargs["warm_up"] = [({"tokens": tuple(s)}, (8, 1)) for s in kwargs["warm_up"]]
guard = kxg.XlaGuardCallback(log_dir=os.environ["LOG_DIR"], **kwargs)
oracle, console = Oracle(), io.StringIO()
before = modules()
with kxg.max_compilations(None) as budget, contextlib.redirect_stdout(console):
    model.fit(Batches(json.loads(os.environ["TRAIN"])), validation_data=Batches(json.loads(os.environ["VALID"])),
              epochs=int(os.environ["EPOCHS"]), shuffle=False, verbose=0, callbacks=[guard, oracle])
total = modules() - before
counted = {}
for epoch in guard.compilations.values():
    for function, n in epoch.counts.items():
        counted[function] = counted.get(function, 0) + n
print(json.dumps({"dumped": {"all": total, "test": oracle.test}, "guard": counted,
                  "budget": budget.count, "console": console.getvalue()}))
"""


def _fit(log_dir: Path, **guard: object) -> dict:
    return run_python(
        _SCRIPT,
        env={
            "TESTS": str(Path(__file__).parent),
            "LOG_DIR": str(log_dir),
            "GUARD_KWARGS": json.dumps(guard),
            "TRAIN": json.dumps(TRAIN_LENGTHS),
            "VALID": json.dumps(VALID_LENGTHS),
            "EPOCHS": str(EPOCHS),
        },
        timeout=900,
    )


@pytest.fixture(scope="module", params=["profiled", "unprofiled"])
def fitted(request, tmp_path_factory):
    log_dir = tmp_path_factory.mktemp(f"run_compilations_{request.param}")
    guard = {} if request.param == "profiled" else {"profile_epochs": []}
    return request.param, log_dir, _fit(log_dir, **guard)


def _report(capsys, *argv: object) -> tuple[int, str, str]:
    code = main(["report", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_guard_and_a_budget_count_what_xla_dumped(fitted):
    """4 train and 2 test compilations over 3 epochs: XLA's modules, the guard's rows and a budget agree."""
    _, _, out = fitted
    train = len(set(TRAIN_LENGTHS))
    assert out["dumped"] == {"all": train + len(set(VALID_LENGTHS)), "test": len(set(VALID_LENGTHS))}
    assert out["guard"] == {"train": train, "test": 2, "predict": 0, "warm_up": 0, "other": 0}
    assert out["budget"] == out["dumped"]["all"]


def test_the_run_file_and_the_cli_gate_count_every_epoch(fitted, capsys):
    """The run file holds every compilation; `report --max-compilations` gates on them, profiled or not."""
    _, log_dir, out = fitted
    total = out["dumped"]["all"]
    counted = run_compilations(read_run_file(log_dir))
    assert (counted.total, counted.counts["train"], counted.source) == (total, 4, "signatures")
    assert counted.epochs == (0, 1, 2)
    code, text, err = _report(capsys, log_dir, "--max-compilations", total - 1)
    assert (code, err) == (1, "")
    assert (
        f"FAILED: {log_dir / 'xla_guard_reports.json'}: {total} XLA compilations exceed --max-compilations {total - 1}"
        in text
    )
    assert _report(capsys, log_dir, "--max-compilations", total)[0] == 0
    assert _report(capsys, log_dir, "--max-compilations", "train=3")[0] == 1
    assert _report(capsys, log_dir, "--max-compilations", "train=4", "--max-compilations", "test=2")[0] == 0
    code, text, _ = _report(capsys, log_dir, "--json")
    (entry,) = json.loads(text)["compilations"]
    assert (entry["total"], entry["counts"]["test"]) == (total, 2)


def test_every_output_leads_with_the_recompilation(fitted, capsys, tmp_path):
    """Console, CLI and HTML open with the train function's 4 compilations, not with a window's 100%."""
    _, log_dir, out = fitted
    lead = "The train function compiled 4 times in this run: input 'tokens' dim 1 varied across 4 values (4, 6, 8, 10)."
    assert out["console"].startswith(f"keras-xla-guard: run summary (recompiles): {lead}")
    code, text, _ = _report(capsys, log_dir)
    assert (
        text.splitlines()[0] == f"run summary (recompiles): {lead}" + text.splitlines()[0].split(lead, 1)[1]
    )
    page = tmp_path / "page.html"
    assert _report(capsys, log_dir, "--html", page)[0] == 0
    html = page.read_text()
    assert re.search(r'data-level="recompiles"><p class="headline">' + re.escape(escape(lead)), html)
    # Every compilation of the run is a row of the compilations table.
    assert html.count('<tr class="counted"') == out["dumped"]["all"]


def test_tensorboard_scalars_add_up_to_the_same_count(fitted):
    """Each epoch's `train/compilations` and `test/compilations` scalars sum to the run's."""
    _, log_dir, out = fitted
    events = _events(log_dir)
    assert sum(events["xla_guard/train/compilations"].values()) == 4
    assert sum(events["xla_guard/test/compilations"].values()) == out["dumped"]["test"]
    # Epoch 0 compiled outside any window (untimed): no compile-time scalar, never a fake 0;
    # the later epochs compiled nothing, which takes 0 s.
    assert events["xla_guard/train/compile_time_s"] == {1: 0.0, 2: 0.0}


def test_a_warm_up_of_int_inputs_leaves_fit_nothing_to_compile(tmp_path, capsys):
    """Shapes alone warm the int32 token model with int32 zeros: warm_up rows, fit's train compiles none."""
    out = _fit(tmp_path, profile_epochs=[], warm_up=[[8, n] for n in sorted(set(TRAIN_LENGTHS))])
    train = len(set(TRAIN_LENGTHS))
    assert out["dumped"]["all"] == train + 2
    assert out["guard"] == {"train": 0, "test": 2, "predict": 0, "warm_up": train, "other": 0}
    counted = run_compilations(read_run_file(tmp_path))
    assert dict(counted.counts) == out["guard"]
    assert "warm_up_missed" not in (tmp_path / "xla_guard_reports.json").read_text()
