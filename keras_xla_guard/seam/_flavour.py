"""The contract each Keras flavour module of the seam keeps.

`seam/keras3.py` and `seam/tf_keras.py` are modules, not classes: each
module *is* its flavour, and satisfies `Flavour` structurally (a module's
functions stand for the methods, without `self`). `seam.flavour_of` picks
one by the Keras that built the model and the backend it runs on;
`seam.attach` then only reads what `Flavour` names.
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["Flavour"]


class Flavour(Protocol):
    """How one Keras flavour, on one backend, lets the guard see `fit`'s batches.

    A new flavour is one module with these names, and one line in
    `seam.flavour_of`. The protocol was TensorFlow-shaped in one place:
    where a batch can be seen. `BATCHES` now says it, so `seam.attach`
    builds the tap that fits: a TensorFlow trainer pulls batches inside a
    compiled `tf.function` (an `InputTap`, per batch structure, written
    in-graph), Keras' JAX trainer pulls them in Python (a `HostTap`, one
    per fit, no framework op).

    Attributes:
        FLAVOUR: Its name in reports and warnings (`"keras3"`, `"tf_keras"`).
        BACKEND: The Keras backend it serves, as `keras.backend.backend()`
            spells it (`"tensorflow"`); `flavour_of` never gives a model
            running on another backend this flavour.
        DATASET_HOLDER: `(fit's local variable, its attribute)` holding the
            dataset `fit` iterates (distributed under a strategy).
        EXIT_HOOK_HOLDER: `fit`'s local variable whose
            `catch_stop_iteration()` context encloses every epoch's steps.
        BATCHES: Where `fit` pulls a batch: `"graph"` (inside a traced
            TensorFlow function) or `"python"` (from a Python iterator).
    """

    FLAVOUR: str
    BACKEND: str
    BATCHES: str
    DATASET_HOLDER: tuple[str, str]
    EXIT_HOOK_HOLDER: str

    def probe(self, function: Any, run_eagerly: bool) -> str | None:
        """Why Keras' train function `function` cannot be recorded; `None` when it can.

        Args:
            function: `model.train_function`, unwrapped of guard wrappers.
            run_eagerly: The model's `run_eagerly`.

        Returns:
            The reason, naming what was found; `None` when recording works.
        """
        ...

    def recording_function(self, original: Any, tap: Any) -> Any:
        """Keras' train function `original`, rebuilt to record every batch into `tap`.

        Args:
            original: Keras' train function (the one `probe` accepted).
            tap: The `InputTap` for the batches' structure (`"graph"`), or
                the run's `HostTap` (`"python"`).

        Returns:
            A function `fit` can call in its place, with the same results.
        """
        ...
