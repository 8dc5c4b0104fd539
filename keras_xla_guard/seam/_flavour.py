"""The contract each Keras flavour module of the seam keeps.

`seam/keras3.py` and `seam/tf_keras.py` are modules, not classes: each
module *is* its flavour, and satisfies `Flavour` structurally (a module's
functions stand for the methods, without `self`). `seam.flavour_of` picks
one by the Keras that built the model and the backend it runs on;
`seam.attach` then only reads what `Flavour` names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

__all__ = ["Flavour"]


class Flavour(Protocol):
    """How one Keras flavour, on one backend, lets the guard see the batches of its functions.

    Keras compiles three functions, each on its own: the train function
    (`fit`'s steps), the test function (`evaluate`, and the validation
    inside `fit`) and the predict function (`predict`). The guard taps
    each for the duration of its call: `seam.attach(..., function=...)`
    finds it through `FUNCTION_HOLDERS`, checks it with `probe` and puts a
    recording stand-in in its place (`recording_function`, or for a
    function in `HOST_BATCHES` a recorder of the batches Keras hands it).

    A new flavour is one module with these names, and one line in
    `seam.flavour_of`. The protocol was TensorFlow-shaped in one place:
    where a batch can be seen. `BATCHES` says it, so `seam.attach` builds
    the tap that fits: a TensorFlow trainer pulls batches inside a compiled
    `tf.function` (an `InputTap`, per batch structure, written in-graph),
    Keras' JAX trainer pulls them in Python for every function (a `HostTap`
    per call, no framework op).

    Attributes:
        FLAVOUR: Its name in reports and warnings (`"keras3"`, `"tf_keras"`).
        BACKEND: The Keras backend it serves, as `keras.backend.backend()`
            spells it (`"tensorflow"`); `flavour_of` never gives a model
            running on another backend this flavour.
        DATASET_HOLDER: `(local variable, its attribute)` holding the
            dataset `fit` (or `evaluate`, `predict`) iterates (distributed
            under a strategy).
        EXIT_HOOK_HOLDER: The local variable of `fit` (`evaluate`,
            `predict`) whose `catch_stop_iteration()` context encloses
            every step.
        FUNCTION_HOLDERS: Function name (`"train"`, `"test"`,
            `"predict"`) -> `(holder, attribute)` where Keras keeps the
            function while it runs it: holder `None` is the model, else a
            local variable of the running Keras method (found on the
            stack from the callback hook).
        HOST_BATCHES: The functions Keras calls with a list of batches it
            pulled in Python (recorded from their shapes, no TF op); the
            others take an iterator and get `recording_function`.
        BATCHES: Where Keras pulls a batch for its functions: `"graph"`
            (inside a traced TensorFlow function, or handed over in a list:
            `HOST_BATCHES`) or `"python"` (from a Python iterator, every
            function: Keras on JAX).
    """

    FLAVOUR: str
    BACKEND: str
    BATCHES: str
    DATASET_HOLDER: tuple[str, str]
    EXIT_HOOK_HOLDER: str
    FUNCTION_HOLDERS: Mapping[str, tuple[str | None, str]]
    HOST_BATCHES: frozenset[str]

    def probe(self, function: Any, run_eagerly: bool) -> str | None:
        """Why Keras' train (or test) function `function` cannot be recorded; `None` when it can.

        Args:
            function: Keras' function, unwrapped of guard wrappers.
            run_eagerly: The model's `run_eagerly`.

        Returns:
            The reason, naming what was found; `None` when recording works.
        """
        ...

    def recording_function(self, original: Any, tap: Any) -> Any:
        """Keras' function over an iterator `original`, rebuilt to record every batch into `tap`.

        Args:
            original: Keras' train function (the one `probe` accepted).
            tap: The `InputTap` for the batches' structure (`"graph"`), or
                the run's `HostTap` (`"python"`).

        Returns:
            A function `fit` can call in its place, with the same results.
        """
        ...
