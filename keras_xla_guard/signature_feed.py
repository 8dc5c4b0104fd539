"""Feeding the signatures of the batches a training run takes to the engine.

The seam (`keras_xla_guard.seam`) records each batch's unknown dimensions
with an `InputTap` it installs in Keras' train function (or its test or
predict function, for one call), or the user maps one over the dataset
(`guard.observe(dataset)`). `SignatureFeed` sits above
the seam: it reads the tap as training goes (after every step while new
shapes keep appearing, every 512 steps once they stop) and at the end of
each epoch, where it checks that it recorded one batch per step that ran.
When it did not, or when no Keras flavour fits, one `XlaGuardWarning` names
the Keras version and the epoch's signature figures are `None`
("unavailable"), never a silent zero.
"""

from __future__ import annotations

import sys
from typing import Any

from keras_xla_guard import seam
from keras_xla_guard.seam.host_tap import HostTap
from keras_xla_guard.seam.tap import InputTap

__all__ = ["DRAIN_EVERY", "SignatureFeed"]

# A drain copies the ring (one eager op). The drain interval starts at 1 step, doubles
# after every drain that found no new signature and drops back to 1 when one
# did: new shapes (compilations) are seen within a step or two, which lets the
# guards warn before TensorFlow's megamorphic threshold, while steady-state
# training drains only every 512 steps. (TensorFlow's megamorphic rule needs
# a new shape every < 50 steps on average, so the interval stays short
# exactly when the warning matters.)
DRAIN_EVERY = 512


class SignatureFeed:
    """Feeds the signatures of one Keras function's batches to an engine.

    Attaches through `keras_xla_guard.seam` at `on_train_begin` (or
    `on_test_begin`, `on_predict_begin`; or uses the tap of `observe`),
    reads the recorded batches as the steps go, and checks at every epoch
    (or call) end that it read one batch per step that ran.

    Args:
        engine: The `XlaGuardEngine` receiving `observe_signature` calls and,
            when figures cannot be trusted, `signatures_unavailable`.
        function: The Keras function whose batches it feeds: `"train"`,
            `"test"` or `"predict"`. Defaults to `"train"`.
    """

    def __init__(self, engine: Any, function: str = "train") -> None:
        self.engine = engine
        self.function = function
        self.tap: InputTap | HostTap | None = None
        self.attachment: Any = None
        self._observed: InputTap | None = None
        self._expect = False
        self._spe = 1
        self._steps_hint: int | None = None
        self._seen = 0
        self._last_begin = -1
        self._epoch: int | None = None
        self._interval = sys.maxsize

    def observe(self, dataset: Any) -> Any:
        """Returns `dataset` with a map that records every batch's signature.

        The public path: no Keras internal is touched. `fit` must train on
        the returned dataset; the tracker then reads this tap instead of
        attaching to Keras' train function.

        Args:
            dataset: A `tf.data.Dataset` of training batches.

        Returns:
            The same batches, in the same order.

        Raises:
            ValueError: If `dataset` is not a `tf.data.Dataset`.
        """
        import tensorflow as tf

        if not isinstance(dataset, tf.data.Dataset):
            raise ValueError(
                "observe() takes a tf.data.Dataset of training batches (wrap NumPy arrays with "
                "tf.data.Dataset.from_tensor_slices(...).batch(n)). "
                f"Received: dataset={dataset!r}"
            )
        tap = InputTap(dataset.element_spec)
        self._observed = tap
        # No prefetch: the map then runs when the step asks for the batch,
        # so batches are recorded as they are trained on, not ahead.
        return tap.wrap(dataset, prefetch=False)

    def use_observed(self) -> None:
        """Reads the tap of `observe` (custom loops), if there is one."""
        if self._observed is None:
            return
        self._spe = 1
        self._steps_hint = None
        self._expect = True
        self._bind(self._observed)

    def attach(self, model: Any, steps_hint: int | None, on_abort: Any, record: bool = True) -> Any:
        """Connects to the running `fit` call (see `keras_xla_guard.seam.attach`).

        Args:
            model: The Keras model being fitted.
            steps_hint: Steps per epoch, if Keras knows them.
            on_abort: Called when an exception leaves an epoch or a step.
            record: Record batches through the seam (`False`: exit hook only).

        Returns:
            The seam's `Attachment`.
        """
        self.detach()
        self.tap = None
        self._interval = sys.maxsize
        self._spe = seam.steps_per_execution(model)
        self._steps_hint = steps_hint
        observed = self._observed
        self.attachment = seam.attach(
            model, self._bind, on_abort, record=record and observed is None, function=self.function
        )
        self._expect = record
        if record and observed is not None:
            self._bind(observed)
        elif record and not self.attachment.recording:
            self._unavailable(self.attachment.reason)
        return self.attachment

    def _bind(self, tap: InputTap | HostTap | None) -> None:
        """Starts reading `tap` (`None`: this fit's batches cannot be recorded)."""
        if tap is None:
            self.tap = None
            self._interval = sys.maxsize
            self._unavailable(
                "its batches arrive split across replicas and the dataset Keras distributes was not found"
            )
            return
        if tap is self.tap:
            return
        self.tap = tap
        tap.skip_recorded()
        self._interval = sys.maxsize if tap.static else 1

    def detach(self) -> None:
        """Puts back everything the seam changed (end of `fit`)."""
        if self.attachment is not None:
            self.attachment.detach()

    def begin_epoch(self, epoch: int | None = None) -> None:
        """Resets the per-epoch step count.

        The drain interval carries over: shapes that settled in one epoch
        stay settled, and a new one still brings the interval back to 1.
        """
        self._epoch = epoch
        self._seen = 0
        self._last_begin = -1
        if self.attachment is not None:
            self.attachment.arm()

    def step(self, begin_step: int, now: bool = False) -> None:
        """Notes the start of a train-function call; drains now and then.

        Args:
            begin_step: Index of the call's first step within the epoch.
            now: Drain whatever the interval (the engine waits for the
                signature of a step that compiled). Defaults to `False`.
        """
        self._last_begin = begin_step
        if begin_step - self._seen < self._interval and not now:
            return
        tap = self.tap
        if tap is None:
            return
        known = tap.distinct
        self._drain(begin_step)
        self._interval = 1 if tap.distinct > known else min(2 * self._interval, DRAIN_EVERY)

    def drain(self) -> None:
        """Records every step begun so far (an epoch an exception left, which `end_epoch` will not check)."""
        if self.tap is not None and self._last_begin >= 0:
            self._drain(self._last_begin + self._spe)

    def end_epoch(self) -> None:
        """Records the epoch's remaining batches and checks none is missing.

        Every step that ran must have been recorded: all of them when Keras
        knows the steps per epoch; over data of unknown length all but the
        last `steps_per_execution` (the last call may find the end of the
        data and run no step, the one before it fewer steps).
        """
        if not self._expect or self._last_begin < 0:
            return
        done = self._last_begin + self._spe
        if self._steps_hint:
            done = min(done, self._steps_hint)
        if self.tap is not None:
            self._drain(done)
        # Over data of unknown length the last call may find the end of the
        # data and run no step, and the one before it fewer than
        # steps_per_execution: only the steps before those two calls are certain.
        needed = done if self._steps_hint else max(0, self._last_begin - self._spe + 1)
        if self.tap is not None and self._seen >= needed:
            return
        # The attachment names the Keras that runs the model (tf_keras beside Keras 3 too).
        attachment = self.attachment
        keras = attachment.keras if attachment is not None else seam.keras_version()
        if self._observed is not None:
            how = "guard.observe"
        elif attachment is not None and attachment.recording:
            how = f"flavour {attachment.flavour}"
        else:
            how = attachment.reason if attachment is not None else "no Keras attachment"
        what = f" with {keras} ({how})"
        if self.function == "train":
            batches = f"training batches of epoch {self._epoch}"
        else:
            during = f"the validation in epoch {self._epoch}" if self._epoch is not None else "this call"
            batches = f"{self.function} batches of {during}"
        self._unavailable(f"{self._seen} of the {needed} {batches} were recorded{what}")

    def _unavailable(self, why: str) -> None:
        self._expect = False
        self.tap = None
        self._interval = sys.maxsize
        self.engine.signatures_unavailable(why, function=self.function)

    def _drain(self, done: int) -> None:
        """Records steps `[self._seen, done)`, as far as the tap has them."""
        tap = self.tap
        assert tap is not None
        pending = done - self._seen
        if pending <= 0:
            return
        if tap.static:
            self.engine.observe_signature(
                tap.template, step=self._seen, count=pending, function=self.function
            )
            self._seen = done
            return
        # One engine call per run of equal shapes, not per step.
        for sig, count in tap.take(pending):
            self.engine.observe_signature(sig, step=self._seen, count=count, function=self.function)
            self._seen += count
