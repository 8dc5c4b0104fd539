"""`HostTap`: records each batch's signature in Python, where the trainer pulls batches in Python.

Keras 3 on JAX pulls every batch from a Python iterator and calls its
`jax.jit` step with it: the batch's shapes are plain Python values before
the call, so recording costs one walk over the batch and no framework op.
`HostTap` keeps the recorded signatures until `SignatureFeed` reads them,
with the reading interface of `InputTap` (`static`, `distinct`,
`template`, `skip_recorded`, `take`). Pure: no framework import.
"""

from __future__ import annotations

from typing import Any

from keras_xla_guard._checks import check_int
from keras_xla_guard.signatures import Signature

__all__ = ["HostTap"]

# Keras' names for the parts of a training batch, as signatures show them.
_ROOT_NAMES = ("x", "y", "sample_weight")


def _flat_key(batch: Any) -> tuple[Any, ...] | None:
    """`(shape, dtype)` per element of a tuple of arrays (or `None`s); `None` for anything else.

    Called once per training step: numpy and JAX arrays give their shape as
    a tuple and a hashable dtype, which key the cache as they are; anything
    else (a nested batch, a shape object) takes `Signature.of`'s full walk.
    """
    if type(batch) is not tuple:
        return None
    key: list[tuple[tuple[Any, ...], Any] | None] = []
    for item in batch:
        if item is None:
            key.append(None)
            continue
        shape = getattr(item, "shape", None)
        if type(shape) is not tuple:
            return None
        key.append((shape, item.dtype))
    return tuple(key)


class HostTap:
    """Signatures of batches seen in Python, oldest first, until read.

    Args:
        capacity: Most unread batches kept; must exceed the batches
            recorded between two reads. Defaults to `4096`.

    Attributes:
        template: The first recorded batch's signature (`None` before one);
            a host tap is never `static`.
        host_recorded: Batches recorded so far.
        calls_finished: Calls of the tapped function that returned (their
            steps ran); the seam counts them, so that the guard learns a
            step's end without a batch-end hook (which under JAX would wait
            for the step's results every step).

    Raises:
        ValueError: If `capacity` is not a positive int.
    """

    static = False

    def __init__(self, capacity: int = 4096) -> None:
        check_int("capacity", capacity, minimum=1)
        self.capacity = capacity
        self.template: Signature | None = None
        self.host_recorded = 0
        self.calls_finished = 0
        self._unread: list[Signature] = []
        self._overflow = False
        self._seen: set[Signature] = set()
        # A flat tuple of arrays (Keras' `(x, y)`, `(x, y, w)`) -> its
        # signature, by shapes and dtypes: most batches skip the full walk.
        self._flat: dict[tuple[Any, ...], Signature] = {}

    @property
    def distinct(self) -> int:
        """Different signatures recorded so far."""
        return len(self._seen)

    def record(self, batch: Any) -> Signature:
        """Records one batch (anything `Signature.of` reads); returns its signature."""
        key = _flat_key(batch)
        signature = self._flat.get(key) if key is not None else None
        if signature is None:
            signature = Signature.of(batch, root_names=_ROOT_NAMES)
            if key is not None:
                self._flat[key] = signature
        if self.template is None:
            self.template = signature
        self._seen.add(signature)
        if len(self._unread) >= self.capacity:
            self._overflow = True
            del self._unread[0]
        self._unread.append(signature)
        self.host_recorded += 1
        return signature

    def skip_recorded(self) -> None:
        """Forgets every unread batch (a tap reused by a later `fit` starts at its first batch)."""
        self._unread.clear()
        self._overflow = False

    def take(self, limit: int) -> list[tuple[Signature, int]]:
        """Reads up to `limit` recorded batches, oldest first, as runs `(signature, count)`.

        Raises:
            RuntimeError: If unread batches were dropped (more than
                `capacity` recorded between two reads).
        """
        if self._overflow:
            raise RuntimeError(f"more than {self.capacity} batches were recorded between two reads")
        if limit <= 0:
            return []
        taken, self._unread[:limit] = self._unread[:limit], []
        runs: list[tuple[Signature, int]] = []
        for signature in taken:
            if runs and runs[-1][0] == signature:
                runs[-1] = (signature, runs[-1][1] + 1)
            else:
                runs.append((signature, 1))
        return runs
