"""XlaGuardCallback counts the compilations of Keras' train, test and predict functions as XLA makes them.

The oracle is XLA itself: with `XLA_FLAGS=--xla_dump_to=DIR` every compiled
module leaves one `module_NNNN.<name>.before_optimizations.txt`, so the
modules that appear during a phase (a `fit`, an `evaluate`, a `predict`;
inside `fit`, between `on_test_begin` and `on_test_end`) are the
compilations of that phase's function. XLA_FLAGS is read once per process,
hence the fresh interpreter.
"""

from __future__ import annotations

import pytest
from _fit_helpers import _events
from _helpers import run_python

pytestmark = [pytest.mark.slow, pytest.mark.compat]

# fit with validation, evaluate, predict, both again (a cached function
# compiles a seen shape once), a predict batch size it has not seen, and a
# second fit of the same model (its train and test functions are cached).
_SCRIPT = """
import json, os, sys, tempfile
dump = tempfile.mkdtemp()
os.environ["XLA_FLAGS"] = f"--xla_dump_to={dump}"
if sys.argv[-1] == "tf_keras":
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tf_keras as keras
else:
    import keras
import numpy as np
from keras_xla_guard import XlaGuardCallback
from keras_xla_guard.output.runfile import read_run_file

def modules():
    return len({f.split(".")[0] for f in os.listdir(dump) if f.endswith(".before_optimizations.txt")})

class Oracle(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.test, self._at = 0, 0
    def on_test_begin(self, logs=None):
        self._at = modules()
    def on_test_end(self, logs=None):
        self.test += modules() - self._at

rng = np.random.default_rng(0)
x, y = rng.random((100, 8), dtype="float32"), rng.random((100, 1), dtype="float32")
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4), keras.layers.Dense(1)])
model.compile("adam", "mse", jit_compile=True)
guard = XlaGuardCallback(log_dir=os.environ["LOG_DIR"], profile_epochs=(), verbose=0)
phases = [
    ("fit", lambda cb: model.fit(x, y, batch_size=32, epochs=2, validation_data=(x[:50], y[:50]), verbose=0,
                                 callbacks=cb)),
    ("evaluate", lambda cb: model.evaluate(x, y, batch_size=32, verbose=0, callbacks=cb)),
    ("predict", lambda cb: model.predict(x, batch_size=32, verbose=0, callbacks=cb)),
    ("evaluate", lambda cb: model.evaluate(x, y, batch_size=32, verbose=0, callbacks=cb)),
    ("predict", lambda cb: model.predict(x, batch_size=50, verbose=0, callbacks=cb)),
    ("fit", lambda cb: model.fit(x, y, batch_size=32, epochs=1, validation_data=(x[:50], y[:50]), verbose=0,
                                 callbacks=cb)),
]
real, guarded, run_file = [], [], None
for name, run in phases:
    oracle, before, calls = Oracle(), modules(), len(guard.calls)
    run([guard, oracle])
    total = modules() - before
    real.append({"train": total - oracle.test if name == "fit" else 0,
                 "test": 0 if name == "predict" else oracle.test, "predict": total if name == "predict" else 0})
    counted = {"train": 0, "test": 0, "predict": 0}
    if name == "fit":
        counted["train"] = sum(s.expected_compilations for s in guard.signatures.values())
    for call in guard.calls[calls:]:
        counted[call.function] += call.signatures.expected_compilations
    guarded.append(counted)
    if len(real) == 5:
        run_file = [[c["kind"], c["call"], c["epoch"], c["signatures"]["expected_compilations"]]
                    for c in read_run_file(os.environ["LOG_DIR"]).calls]
    if len(real) == 3:
        kept = (model.train_function, model.test_function, model.predict_function)
final = (model.train_function, model.test_function, model.predict_function)
print(json.dumps({"real": real, "guard": guarded, "run_file": run_file,
                  "restored": [f is k and not hasattr(f, "_xla_guard_wrapper") for f, k in zip(final, kept)]}))
"""


@pytest.fixture(scope="module", params=["keras3", "tf_keras"])
def phases(request, tmp_path_factory):
    log_dir = tmp_path_factory.mktemp(f"functions_{request.param}")
    out = run_python(
        _SCRIPT.replace('sys.argv[-1] == "tf_keras"', repr(request.param == "tf_keras")),
        env={"LOG_DIR": str(log_dir)},
        timeout=900,
    )
    return request.param, log_dir, out


def test_predicted_compilations_per_function_equal_the_modules_xla_dumped(phases):
    """Per phase and function the guard's expected compilations are XLA's: 2+2 in fit, 1, 2, 0, 1, then 0."""
    _, _, out = phases
    assert out["real"] == [
        {"train": 2, "test": 2, "predict": 0},
        {"train": 0, "test": 1, "predict": 0},
        {"train": 0, "test": 0, "predict": 2},
        {"train": 0, "test": 0, "predict": 0},
        {"train": 0, "test": 0, "predict": 1},
        {"train": 0, "test": 0, "predict": 0},
    ]
    assert out["guard"] == out["real"]


def test_every_function_is_put_back_after_its_call(phases):
    """After every call the model holds Keras' own cached functions again, no guard wrapper."""
    _, _, out = phases
    assert out["restored"] == [True, True, True]


def test_the_run_file_keeps_the_calls_after_fit_beside_its_validations(phases):
    """evaluate/predict after fit are added to fit's run file, numbered per function."""
    _, _, out = phases
    assert out["run_file"] == [
        ["validation", 0, 0, 2],
        ["validation", 1, 1, 0],
        ["evaluate", 2, None, 1],
        ["predict", 0, None, 2],
        ["evaluate", 3, None, 0],
        ["predict", 1, None, 1],
    ]


def test_tensorboard_holds_each_functions_figures_under_its_kind(phases):
    """validation/* at the epoch, evaluate/* and predict/* at the call number, beside the train tags."""
    _, log_dir, _ = phases
    events = _events(log_dir)
    # The second fit's epoch 0 and validation come last at step 0.
    assert events["xla_guard/expected_compilations"] == {0: 0.0, 1: 0.0}
    assert events["xla_guard/validation/expected_compilations"] == {0: 0.0, 1: 0.0}
    assert events["xla_guard/evaluate/expected_compilations"] == {2: 1.0, 3: 0.0}
    assert events["xla_guard/predict/expected_compilations"] == {0: 2.0, 1: 1.0}
    assert events["xla_guard/predict/distinct_signatures"] == {0: 2.0, 1: 1.0}
    assert "of the predict function: 2 distinct, 2 new" in events["xla_guard/predict/signatures"][0]
