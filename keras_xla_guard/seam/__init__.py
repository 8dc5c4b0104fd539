"""The one place keras-xla-guard touches private Keras and TensorFlow internals.

Keras gives callbacks no view of the batches `fit` trains on and no hook
for an exception that leaves `fit`. Recording input signatures and
stopping the profiler on that path therefore rely on how each Keras
flavour builds its train function and runs its epochs. Every such contact
lives in this package, one module per flavour, each keeping the `Flavour`
contract (`_flavour.py`):

- `keras3`: Keras 3 on TensorFlow (closure cells of the train function,
  `fit`'s `epoch_iterator`);
- `tf_keras`: tf_keras / Keras 2 (`fit`'s `data_handler`);
- `keras3_jax`: Keras 3 on JAX (the functions' Python iterators of
  batches, the jitted steps' names), with `host_tap` (`HostTap`, batches
  recorded in Python);
- `tap`: `InputTap`, the TensorFlow mechanics that record each batch's
  shape (a `tf.Variable` ring written in-graph, or `.shape` read in Python);
- `tf_internals`: TensorFlow internals used outside `fit` (the XLA CPU
  switch, the kernel registry, traced graphs' function library, a
  strategy-free resource variable).

`attach` decides at `on_train_begin` which flavour fits the model (by its
Keras and the backend it runs on) and whether it can record; the guard then
checks every epoch that it recorded one batch per step that ran (see
`keras_xla_guard.signature_feed.SignatureFeed`). The test and predict
functions are attached the same way for each call, at `on_test_begin`
(validation inside `fit`, `evaluate`) and `on_predict_begin`
(`attach(..., function="test")`). Anything that does
not fit becomes an `XlaGuardWarning` naming the Keras version, never a
silent zero. `docs/compatibility.md` lists each contact and the versions
it was verified on. Users who want none of this call
`guard.observe(dataset)`, which needs no internals.

The functions live in private modules, one per responsibility, and this
face re-exports them: `_detect` (which Keras and backend run a model, and
the flavour that fits), `_attach` (the contact with a running call) and
`_model` (what is read from and built on a model).
"""

from __future__ import annotations

# `_TAPPED`, `_fit_local` and `_tapped` are private, re-exported for the tests
# and benchmarks that reach them here (hence the noqa).
from keras_xla_guard.seam._attach import (  # noqa: F401
    _TAPPED,
    Attachment,
    _fit_local,
    _tapped,
    attach,
    tracked_train_function,
    training_dataset,
)
from keras_xla_guard.seam._detect import flavour_of, is_compiled, keras_backend, keras_version
from keras_xla_guard.seam._flavour import Flavour
from keras_xla_guard.seam._model import (
    all_layers,
    build_for_training,
    build_model,
    compiled_programs,
    keras_function,
    steps_per_execution,
    training_state,
)

__all__ = [
    "Attachment",
    "Flavour",
    "all_layers",
    "attach",
    "build_for_training",
    "build_model",
    "compiled_programs",
    "keras_function",
    "flavour_of",
    "is_compiled",
    "keras_backend",
    "keras_version",
    "steps_per_execution",
    "tracked_train_function",
    "training_dataset",
    "training_state",
]
