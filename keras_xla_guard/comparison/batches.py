"""The data intake of `compare`: the compared batches, taken once from anything `fit` takes.

Every mode trains on the same batches, so they are read once, as NumPy
arrays; finite data is read to its end to count the input signatures a
planned run would meet. A batch's signature is `signatures.Signature`, the
same notion the guard tracks during training.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

from keras_xla_guard._checks import check_int
from keras_xla_guard.signatures.signature import Signature

__all__ = ["Batches", "planned_run", "take_batches"]


@dataclasses.dataclass(frozen=True)
class Batches:
    """The compared batches and what the data says about the planned run.

    Attributes:
        batches: `(x, y, sample_weight)` tuples of NumPy arrays (nested as
            the model's inputs are), one per compared step.
        steps_per_epoch: Batches in one pass over the data; `None` when the
            data's length is unknown (a generator, infinite data).
        epoch_signatures: Distinct signatures over one pass of the data;
            `None` when its length is unknown.
    """

    batches: list[tuple[Any, Any, Any]]
    steps_per_epoch: int | None
    epoch_signatures: int | None


def _numpy_batch(element: Any) -> tuple[Any, Any, Any]:
    import keras
    import numpy as np

    unpacked = keras.utils.unpack_x_y_sample_weight(element)
    return keras.tree.map_structure(lambda a: None if a is None else np.asarray(a), tuple(unpacked))


def _cycle(kept: list[Any], steps: int) -> list[Any]:
    """`steps` batches: the kept ones, repeated as further epochs would."""
    return [kept[i % len(kept)] for i in range(steps)]


def _from_iterable(elements: Any, steps: int, known_length: int | None) -> Batches:
    """Takes `steps` batches; reads finite data to its end to count its signatures.

    Data of unknown length is read one batch past `steps`: if that batch
    exists, the data's length and signatures stay unknown.
    """
    kept: list[Any] = []
    signatures: set[Signature] = set()
    count, more = 0, False
    for element in elements:
        if count >= steps and known_length is None:
            more = True
            break
        batch = _numpy_batch(element)
        if count < steps:
            kept.append(batch)
        signatures.add(Signature.of(batch))
        count += 1
    if not kept:
        raise ValueError("The data yielded no batch. Received: data of 0 batches")
    if more:
        return Batches(_cycle(kept, steps), None, None)
    return Batches(_cycle(kept, steps), count, len(signatures))


def take_batches(x: Any, y: Any = None, *, batch_size: int | None = None, steps: int = 50) -> Batches:
    """Takes the compared batches from anything `fit` takes, once.

    Args:
        x: NumPy arrays or tensors (nested as the model's inputs), a
            `tf.data.Dataset`, a `keras.utils.PyDataset`, or a generator
            or iterator of batches.
        y: Targets, only with arrays. Defaults to `None`.
        batch_size: Batch size, only with arrays. Defaults to `32` there.
        steps: How many batches to take; data with fewer batches is
            cycled, as further epochs would. Defaults to `50`.

    Returns:
        The `Batches`. Finite data is read through one whole pass to count
        its signatures (only shapes are kept past `steps`).

    Raises:
        ValueError: On `y` or `batch_size` with a dataset or generator, on
            empty data or data `fit` does not take.

    Example:

    ```python
    import numpy as np
    from keras_xla_guard.comparison.batches import take_batches
    data = take_batches(np.zeros((100, 4)), np.zeros((100, 1)), batch_size=32, steps=8)
    print(data.steps_per_epoch, data.epoch_signatures)  # 4 2 (the last batch is short)
    ```
    """
    import keras
    import numpy as np
    import tensorflow as tf

    check_int("steps", steps, minimum=1)
    if isinstance(x, (tf.data.Dataset, keras.utils.PyDataset)) or hasattr(x, "__next__"):
        if y is not None or batch_size is not None:
            raise ValueError(
                "`y` and `batch_size` are only for array inputs; a dataset or "
                f"generator yields whole batches. Received: y={type(y).__name__}, "
                f"batch_size={batch_size!r}"
            )
        if isinstance(x, tf.data.Dataset):
            cardinality = int(x.cardinality())
            return _from_iterable(x.as_numpy_iterator(), steps, cardinality if cardinality >= 0 else None)
        if isinstance(x, keras.utils.PyDataset):
            n = x.num_batches
            return _from_iterable(
                (x[i] for i in (range(n) if n is not None else itertools.count())), steps, n
            )
        return _from_iterable(x, steps, None)
    leaves = keras.tree.flatten(x)
    if not leaves or not all(hasattr(leaf, "shape") and len(leaf.shape) > 0 for leaf in leaves):
        raise ValueError(
            "`x` must be arrays or tensors, a tf.data.Dataset, a "
            f"keras.utils.PyDataset or a generator. Received: x={type(x).__name__}"
        )
    check_int("batch_size", batch_size, minimum=1, allow_none=True)
    size = 32 if batch_size is None else batch_size
    n = int(leaves[0].shape[0])
    if n == 0:
        raise ValueError(f"`x` holds no samples. Received: x with shape {tuple(leaves[0].shape)}")
    per_epoch = math.ceil(n / size)
    arrays = keras.tree.map_structure(lambda a: None if a is None else np.asarray(a), (x, y))

    def batch(i: int) -> tuple[Any, Any, Any]:
        part = slice(i * size, min(n, (i + 1) * size))
        bx, by = keras.tree.map_structure(lambda a: None if a is None else a[part], arrays)
        return (bx, by, None)

    kept = [batch(i) for i in range(min(steps, per_epoch))]
    # Only the last batch of a pass can be shorter.
    signatures = {Signature.of(kept[0]), Signature.of(batch(per_epoch - 1))}
    return Batches(_cycle(kept, steps), per_epoch, len(signatures))


def planned_run(
    batches: Batches, steps: int, planned_epochs: int | None, planned_steps_per_epoch: int | None
) -> tuple[int, int, str]:
    """The planned run's steps and signatures, and where the count came from.

    Args:
        batches: What `take_batches` found.
        steps: The compared steps.
        planned_epochs: Epochs planned; `None` for 1.
        planned_steps_per_epoch: Steps per epoch planned; `None` for the
            data's length, or `steps` when that is unknown.

    Returns:
        `(planned_steps, planned_signatures, signatures_counted_from)`.
    """
    epochs = planned_epochs or 1
    per_epoch = planned_steps_per_epoch or batches.steps_per_epoch or steps
    if batches.epoch_signatures is not None:
        return epochs * per_epoch, batches.epoch_signatures, "data"
    seen = len({Signature.of(b) for b in batches.batches})
    return epochs * per_epoch, seen, "compared batches"
