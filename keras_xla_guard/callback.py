"""`XlaGuardCallback`: the Keras adapter over `XlaGuardEngine`."""

from __future__ import annotations

import os
import warnings
import weakref
from typing import Any

import keras

from keras_xla_guard import _model_hooks
from keras_xla_guard import backend as backends
from keras_xla_guard._adapter import GuardAdapter, model_op_layers
from keras_xla_guard._call_exits import CallExits
from keras_xla_guard._checks import check_bool
from keras_xla_guard._fit_advice import FitAdvice
from keras_xla_guard.backend import Backend
from keras_xla_guard.errors import RecompilationLimitError, XlaGuardWarning
from keras_xla_guard.runtime.config import DEFAULT_LOG_DIR, GuardConfig, config_args_doc
from keras_xla_guard.runtime.engine import xla_mode_of
from keras_xla_guard.runtime.sink import CallRecord
from keras_xla_guard.signature_feed import SignatureFeed

__all__ = ["XlaGuardCallback", "check_backend"]

# Guards between their on_train_begin and on_train_end.
_guarding: weakref.WeakSet[XlaGuardCallback] = weakref.WeakSet()
# Guards inside an evaluate() or predict() call outside fit.
_calling: weakref.WeakSet[XlaGuardCallback] = weakref.WeakSet()


def check_backend(model: Any = None) -> Backend:
    """The guard's backend for `model` (or Keras' configured backend); refuses others.

    Args:
        model: A Keras model. Defaults to `None`: `keras.backend.backend()`.

    Returns:
        The `Backend` (see `keras_xla_guard.backend.select`).

    Raises:
        BackendError: With a Keras backend the guard has no implementation
            for, naming the Keras and backend versions.
    """
    return backends.select(model)


@config_args_doc
class XlaGuardCallback(CallExits, FitAdvice, GuardAdapter, keras.callbacks.Callback):
    """Measures how much of `model.fit`'s op time really runs under XLA.

    The callback starts TensorFlow's profiler for a window of steps in the
    selected epochs, analyzes each trace on a background thread, and writes
    scalars (`xla_guard/...`), a Custom Scalars layout and a text table of the
    ops that fell back to plain TF kernels to TensorBoard. Traces stay in
    `<log_dir>/plugins/profile/` where TensorBoard's Profile tab finds them.
    Nothing inside the guard can break training: failures become
    `XlaGuardWarning`s and the window is reported as failed.

    Under Keras' JAX backend (`KERAS_BACKEND=jax`, no TensorFlow needed)
    every step is one XLA program: the callback profiles with `jax.profiler`
    and, every epoch, counts each compilation per function with its
    trace/lower/compile seconds from `jax.monitoring` (`compilations`;
    docs/jax.md).

    It is a `tf_keras` callback as well (`TF_USE_LEGACY_KERAS=1`). Under
    `MultiWorkerMirroredStrategy` pass it to `fit` on every worker: each
    worker profiles into `<log_dir>/<task_type>_<task_id>/` and the chief
    writes every worker's figures to TensorBoard after each profiled epoch
    (`callback.worker` holds this worker's `WorkerInfo`; see
    docs/multiworker.md).

    Args:
        {config_args}
        explain: Run `explain()` at train begin: `True` uses a batch of
            zeros built from the model's input spec (`None` dimensions
            become 2 for the batch and 8 elsewhere; the outputs' sum stands
            in for the loss), because Keras 3 gives callbacks no access to
            `fit`'s data without consuming it. Pass one batch instead,
            `x` or `(x, y)`, to explain the real step with its loss.
            Findings land in `explain_report` and, with the process' XLA
            switch verdicts, in the notes of the first low-coverage report
            and its TensorBoard text. Defaults to `False`.
        track_signatures: Record every training batch's input signature.
            When the batches have unknown dimensions this adds a few host
            ops per step to Keras' train function for the duration of
            `fit`, and calls its traced graph without `tf.function`'s
            per-call dispatch, which saves more than the ops cost (see
            docs/benchmarks.md for both, measured); `False` leaves Keras' train
            function untouched. Defaults to `True`.
        warm_up: Compile the train step for every input signature at train
            begin, before the first epoch (see `keras_xla_guard.warm_up`):
            `True` reads `fit`'s own dataset once to find its signatures
            (a `tf.data.Dataset` input; bucketed data is the case it pays
            for); or pass the dataset or list of signatures `warm_up`
            takes. It warms the train function the guard runs (with
            tf_keras and signature tracking, a copy a `warm_up` before
            `fit` would miss). The result is in `warm_up_report`; a
            failure is a warning and training goes on. Defaults to `False`.
        config: A `GuardConfig` to use instead of the keyword arguments
            above (the same one can serve a custom loop's `XlaGuard`).
            Defaults to `None`.

    Every training batch's input signature (structure, shapes, dtypes) is
    recorded in every epoch, profiled or not, for tf.data, NumPy,
    generator and `PyDataset` inputs (see `signatures`); a warning comes
    before TensorFlow's megamorphic-cluster threshold is reached. Keras
    compiles its test and predict functions on their own, so the batches
    of `fit`'s validation and of `evaluate` and `predict` calls the guard
    is passed to (`model.evaluate(..., callbacks=[guard])`) are tracked as
    calls of those functions (`calls`; docs/signatures.md).

    Raises:
        ValueError: If an argument is invalid.
        BackendError: If Keras runs on a backend other than TensorFlow or JAX.

    Example:

    ```python
    import numpy as np
    import keras
    from keras_xla_guard import XlaGuardCallback

    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
    model.compile("adam", "mse", jit_compile=True)
    x, y = np.random.rand(512, 8), np.random.rand(512, 1)
    guard = XlaGuardCallback(log_dir="logs/xla_guard", profile_epochs=(1,))
    model.fit(x, y, epochs=3, callbacks=[guard], verbose=0)
    print(guard.reports[1].xla_time_fraction)
    ```
    """

    def __init__(
        self,
        log_dir: str | os.PathLike[str] = DEFAULT_LOG_DIR,
        *,
        explain: Any = False,
        track_signatures: bool = True,
        warm_up: Any = False,
        config: GuardConfig | None = None,
        **fields: Any,
    ) -> None:
        super().__init__()
        backend = check_backend()
        self._init_guard(
            "XlaGuardCallback",
            config,
            {"log_dir": log_dir, **fields},
            notes=[self._verdict_notes],
            backend=backend,
        )
        self._inputs = SignatureFeed(self.engine)
        self._feeds = {function: SignatureFeed(self.engine, function) for function in ("test", "predict")}
        self._calling_peer = False
        self._track_signatures = check_bool("track_signatures", track_signatures)
        self._init_advice(explain)
        self._warm_up = warm_up
        self.warm_up_report: Any = None
        self._peer: XlaGuardCallback | None = None
        self._fit_model: Any = None
        # Under JAX a batch-end hook makes Keras wait for every step's results
        # (it turns the logs into Python numbers), so step ends come from the
        # seam instead (`_steps_finished`) and this instance keeps Keras' own
        # do-nothing hook, which Keras skips; async-safe besides, for a Keras
        # that would look at it.
        self._ends_from_seam = self.engine.backend.name == "jax"
        if self._ends_from_seam:
            self.async_safe = True
            self.on_train_batch_end = keras.callbacks.Callback.on_train_batch_end.__get__(self)  # type: ignore[method-assign]  # why: Keras skips its own no-op hook, so this instance takes it back
        self._calls_finished = 0
        self._last_begin: int | None = None
        # The test and predict calls begun and not ended (by on_test_end / on_predict_end).
        self._calls_open: set[str] = set()

    def observe(self, dataset: Any) -> Any:
        """Returns `dataset` with a `map` that records every batch's input signature.

        The public path to signature tracking: it touches no Keras
        internal, so it works on any Keras the guard runs on, and it is the
        fallback the guard's warning points to when Keras' train function
        cannot be recorded. `fit` must train on the returned dataset; the
        guard then leaves Keras' train function alone. Figures, guards and
        warnings are the same as with the default tracking.

        Args:
            dataset: The `tf.data.Dataset` of training batches.

        Returns:
            A dataset yielding the same batches in the same order.

        Raises:
            ValueError: If `dataset` is not a `tf.data.Dataset`.

        Example:

        ```python
        guard = XlaGuardCallback()
        model.fit(guard.observe(dataset), epochs=3, callbacks=[guard])
        ```
        """
        return self._inputs.observe(dataset)

    @property
    def calls(self) -> tuple[CallRecord, ...]:
        """Every test and predict call this guard saw, in order.

        `fit`'s validations (`epoch` set) and the `evaluate` and `predict`
        calls the guard was passed to (`epoch` `None`), each with its input
        signatures and expected compilations of that function.
        """
        return self.engine.calls

    def set_model(self, model: Any) -> None:
        """Keeps the model `fit` trains.

        The guard reads the model through its own reference, never through
        `Callback.model`: under JAX that property writes the training state
        back into the model's variables (`jax_state_sync`) each time it is
        read, which per step would slow training, and from the analysis
        thread would race the step that donates the state.
        """
        super().set_model(model)
        self._fit_model = model

    # Legacy Keras (tf_keras, TF_USE_LEGACY_KERAS=1) asks its callbacks which
    # batch hooks they implement; answering makes this class a tf_keras
    # callback too, with the same hooks.

    def _implements_train_batch_hooks(self) -> bool:
        return True

    def _implements_test_batch_hooks(self) -> bool:
        return self._track_signatures

    def _implements_predict_batch_hooks(self) -> bool:
        return self._track_signatures

    # Keras hooks. on_train_batch_end is deliberately not implemented: doing
    # so would turn off Keras' asynchronous batch-end dispatch for everyone.

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        from keras_xla_guard import seam

        if self._defers_to_peer():
            return
        params = self.params or {}
        self._noted = False
        self._calls_finished, self._last_begin = 0, None
        if self.engine.backend.name == "tensorflow":
            # The switches, strategies and graphs these verdicts read are TensorFlow's.
            self._diagnose()
        elif self._explain is not False and self._explain is not None:
            warnings.warn(
                "keras-xla-guard: explain reads TensorFlow graphs; under "
                f"{self.engine.backend.version()} there is nothing for it to find (every "
                "train step is one XLA program); it is skipped",
                XlaGuardWarning,
                stacklevel=2,
            )
        # Without a strategy of its own the model trains in one process, even
        # when TF_CONFIG is set: nothing to look up in the environment then.
        strategy = getattr(self._fit_model, "distribute_strategy", None)
        self._begin_engine_run(
            False if strategy is None else strategy,
            epochs=params.get("epochs"),
            xla_mode=self._xla_mode(),
            steps_per_call=seam.steps_per_execution(self._fit_model),
            program=seam.keras_function(self._fit_model, "train") if self._track_signatures else None,
            op_layers=model_op_layers(self._fit_model),
        )
        self._track(self._attach_inputs, params.get("steps"))
        _model_hooks.on_exit(self._fit_model, "fit", self._exit_fit)
        self.engine.set_programs(seam.compiled_programs(self._fit_model))
        if self._warm_up is not False and self._warm_up is not None:
            self._run_warm_up()

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if self._peer is not None:
            return
        self.engine.epoch_begin(epoch, steps=(self.params or {}).get("steps"))
        self._inputs.begin_epoch(epoch)

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if self._peer is not None:
            return
        self._steps_finished()
        self.engine.step_begin(batch)
        self._last_begin = batch
        self._track(self._inputs.step, batch, self.engine.awaits_signatures("train"))

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if self._peer is None and not self._ends_from_seam:
            self.engine.step_end(batch)

    def _steps_finished(self) -> None:
        """Under JAX: tells the engine the step begun last has ended, when the seam saw its call return.

        Calls run one after another on the training thread, so the calls
        that returned since the last look end the steps of the last call
        begun.
        """
        tap = self._inputs.tap
        finished = getattr(tap, "calls_finished", None)
        if not self._ends_from_seam or finished is None or finished == self._calls_finished:
            return
        self._calls_finished = finished
        if self._last_begin is not None and self._fit_model is not None:
            from keras_xla_guard import seam

            self.engine.step_end(self._last_begin + seam.steps_per_execution(self._fit_model) - 1)

    def on_test_begin(self, logs: dict[str, Any] | None = None) -> None:
        if self._peer is None:
            self._steps_finished()
            self.engine.validation_begin()
        self._begin_call("test")

    def on_test_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        feed = self._feeds["test"]
        if feed.tap is not None:
            self.engine.call_step("test", batch)
            self._track(feed.step, batch, self.engine.awaits_signatures("test"), feed=feed)

    def on_test_end(self, logs: dict[str, Any] | None = None) -> None:
        self._end_call("test")

    def on_predict_begin(self, logs: dict[str, Any] | None = None) -> None:
        self._begin_call("predict")

    def on_predict_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        feed = self._feeds["predict"]
        if feed.tap is not None:
            self.engine.call_step("predict", batch)
            self._track(feed.step, batch, self.engine.awaits_signatures("predict"), feed=feed)

    def on_predict_end(self, logs: dict[str, Any] | None = None) -> None:
        self._end_call("predict")

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if self._peer is not None:
            return
        self._steps_finished()
        self._track(self._inputs.end_epoch)
        # Keras' epoch logs hold the train step's results (the loss at least)
        # once a step ran; validation adds only `val_` entries.
        trained = any(not key.startswith("val_") for key in logs or {})
        self.engine.epoch_end(epoch, trained=trained)
        if self.engine.stop_requested and self._fit_model is not None:
            self._fit_model.stop_training = True

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        if self._peer is not None:
            self._peer = None
            return
        _guarding.discard(self)
        self._track(self._inputs.detach)
        self._end_engine_run()

    def _xla_mode(self) -> str | None:
        return xla_mode_of(getattr(self._fit_model, "jit_compile", False) is True, self.engine.backend)

    def _begin_call(self, function: str) -> None:
        """A test or predict call begins: tracks its batches as a call of that function.

        Inside `fit` (a validation) the guard of the fit decides; outside
        it, a second guard passed to the same call steps aside, as in `fit`.
        """
        from keras_xla_guard import seam

        if not self._track_signatures or self._fit_model is None:
            return
        if self in _guarding:
            if self._peer is not None:
                return
        elif self._defers_call_to_peer():
            return
        feed = self._feeds[function]
        inside = self in _guarding
        if not inside:
            self.engine.set_programs(seam.compiled_programs(self._fit_model))
        self.engine.call_begin(
            function, xla_mode=self._xla_mode(), program=seam.keras_function(self._fit_model, function)
        )
        self._calls_open.add(function)

        def on_abort() -> None:
            # An exception leaving a validation leaves fit too.
            if inside:
                self._abort()
            feed.detach()

        self._track(feed.attach, self._fit_model, None, on_abort, feed=feed)
        feed.begin_epoch(self.engine.epoch if inside else None)
        _model_hooks.on_exit(
            self._fit_model,
            "evaluate" if function == "test" else "predict",
            lambda error: self._exit_call(function, inside),
        )

    def _end_call(self, function: str) -> None:
        """A test or predict call ends: its figures go to the engine, Keras' function back."""
        if not self._track_signatures or self._fit_model is None:
            return
        if self in _guarding:
            if self._peer is not None:
                return
        elif self._calling_peer:
            self._calling_peer = False
            return
        _calling.discard(self)
        self._calls_open.discard(function)
        feed = self._feeds[function]
        self._track(feed.end_epoch, feed=feed)
        self._track(feed.detach, feed=feed)
        self.engine.call_end(function)

    def _defers_call_to_peer(self) -> bool:
        """Whether another guard already tracks this `evaluate` or `predict` call (then warns)."""
        params = self.params
        peer = next((g for g in _calling if g is not self and params and g.params is params), None)
        self._calling_peer = peer is not None
        if peer is None:
            _calling.add(self)
            return False
        warnings.warn(
            f"keras-xla-guard: the XlaGuardCallback with log_dir={self.log_dir!r} does nothing in this "
            f"call: the one with log_dir={peer.log_dir!r} already tracks it (Keras has one test and one "
            "predict function per model). Pass one XlaGuardCallback.",
            XlaGuardWarning,
            stacklevel=4,
        )
        return True

    def _run_warm_up(self) -> None:
        """Warms the train step up before the first epoch; a failure is a warning."""
        from keras_xla_guard import seam
        from keras_xla_guard.warmup import _warm_up

        try:
            source = self._warm_up
            if source is True and self.engine.backend.name == "jax":
                raise ValueError(
                    "under JAX fit's input is not a tf.data.Dataset to read; pass "
                    "warm_up=<list of signatures>, e.g. [((32, 16), (32, 1))]"
                )
            if source is True:
                source = seam.training_dataset(self._fit_model)
                if source is None:
                    raise ValueError(
                        f"fit's input is not a tf.data.Dataset that {seam.keras_version(self._fit_model)} "
                        "exposes; pass warm_up=<dataset or signatures>"
                    )
            # After the tap is installed: warm the function fit will run.
            self.engine.warm_up_begin()
            report = None
            try:
                report = _warm_up(
                    self._fit_model,
                    source,
                    train_function_for=lambda spec: seam.tracked_train_function(self._fit_model, spec),
                )
            finally:
                # A failed warm-up still ends: later compilations are the steps' own.
                self.engine.warm_up_end(*(() if report is None else (report.signatures, report.steps)))
            self.warm_up_report = report
        except Exception as e:  # noqa: BLE001 - the guard must not break training
            warnings.warn(
                f"keras-xla-guard: warm-up skipped: {type(e).__name__}: {e}", XlaGuardWarning, stacklevel=2
            )

    def _leave(self, inside: bool) -> None:
        """This guard's fit (`inside`) or evaluate/predict call is over: another may guard the next."""
        (_guarding if inside else _calling).discard(self)

    def _abort(self) -> None:
        """An exception is leaving `fit` (Keras calls no callback then): stop and put back.

        Runs from the seam's exit hook or a failing step; never raises.
        """
        _guarding.discard(self)
        try:
            self.engine.abort()
        finally:
            self._inputs.detach()

    def _defers_to_peer(self) -> bool:
        """Whether another guard already guards this `fit` (then warns once).

        TensorFlow runs one profiler per process and Keras has one train
        function per model, so a second guard in the same `fit` stays out
        of the way instead of disturbing the first one's window and figures.
        """
        params = self.params
        # Keras hands the same `params` dict to every callback of one fit;
        # a guard that an exception left in `_guarding` holds an older one.
        peer = next((g for g in _guarding if g is not self and params and g.params is params), None)
        self._peer = peer
        if peer is None:
            _guarding.add(self)
            return False
        warnings.warn(
            f"keras-xla-guard: the XlaGuardCallback with log_dir={self.log_dir!r} does nothing "
            f"in this fit: the one with log_dir={peer.log_dir!r} already guards it (a process "
            "runs one profiler at a time). Pass one XlaGuardCallback to fit.",
            XlaGuardWarning,
            stacklevel=3,
        )
        return True

    def _attach_inputs(self, steps: int | None) -> None:
        self._inputs.attach(self._fit_model, steps, self._abort, record=self._track_signatures)

    def _track(self, method: Any, *args: Any, feed: SignatureFeed | None = None) -> None:
        """Runs a signature-tracking step of `feed` (the train feed); failures become one warning.

        `RecompilationLimitError` (on_violation="raise") passes through, and
        a stop requested by the guard (on_violation="stop") is handed to
        Keras through `model.stop_training`.
        """
        feed = self._inputs if feed is None else feed
        try:
            method(*args)
        except RecompilationLimitError:
            raise
        except Exception as e:  # noqa: BLE001 - the guard must not break training
            feed.tap = None
            feed.detach()
            warnings.warn(
                f"keras-xla-guard: input signature tracking stopped: {type(e).__name__}: {e}",
                XlaGuardWarning,
                stacklevel=3,
            )
        if self.engine.stop_requested and self._fit_model is not None:
            self._fit_model.stop_training = True


# Keras calls no callback when an exception leaves fit outside a step: the wrapped
# fit/evaluate/predict call tells the guard instead (`_exit_fit`). Wrapped from now on, not
# from a guard's creation: `model.fit(..., callbacks=[XlaGuardCallback()])` looks `fit` up
# before it makes the guard.
_model_hooks.register_guard(XlaGuardCallback)
