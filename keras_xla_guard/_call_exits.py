"""What the Keras callback does when a call it runs in ends without Keras saying so.

Keras calls no `on_train_end` (`on_test_end`, `on_predict_end`) after an
exception from a callback, a `KeyboardInterrupt` or a `SystemExit`. The
model's `fit`, `evaluate` and `predict`, wrapped by `_model_hooks` while a
guard lives, call the guard's exit instead from their `finally`, with
signals held; these are those exits, as a mixin of `XlaGuardCallback`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from keras_xla_guard.errors import RecompilationLimitError

__all__ = ["EXIT_WAIT_S", "CallExits"]

# Longest wait, when an exception ends fit, for the analyses of windows that finished.
EXIT_WAIT_S = 10.0


class CallExits:
    """The exits of `XlaGuardCallback`: the end of a `fit`, `evaluate` or `predict` it ran in.

    The callback provides `engine`, its train feed `_inputs`, its test and
    predict feeds `_feeds`, the calls it began and did not end
    (`_calls_open`), `_track`, `_end_engine_run` and `_leave`.
    """

    engine: Any
    _inputs: Any
    _feeds: dict[str, Any]
    _calls_open: set[str]

    if TYPE_CHECKING:
        # The callback's own (declared only: a body here would come first in its MRO).
        def _track(self, method: Any, *args: Any, feed: Any = None) -> None: ...

        def _end_engine_run(self, timeout: float | None = None) -> None: ...

        def _leave(self, inside: bool) -> None: ...

    def _exit_fit(self, error: BaseException | None) -> None:
        """The `fit` this guard runs in has ended; if Keras never ended the run, it ends here.

        The window is stopped (its epoch `incomplete`), Keras' functions are
        put back, the windows that finished are analyzed (at most
        `EXIT_WAIT_S` seconds) and every output written. Never raises.
        """
        self._leave(True)
        if self.engine.ended:
            return
        try:
            # The signatures of the steps that ran, for a budget's compilations of the last steps.
            self._track(self._inputs.drain)
            self._inputs.detach()
            for feed in self._feeds.values():
                feed.detach()
        finally:
            self.engine.abort(error)
            self._end_engine_run(EXIT_WAIT_S)

    def _exit_call(self, function: str, inside: bool) -> None:
        """An `evaluate` or `predict` call (`inside` fit: a validation) has ended: Keras' function back.

        After an exception (no `on_test_end` / `on_predict_end`) its figures
        are published with the steps that ran before it. Never raises.
        """
        feed = self._feeds[function]
        if function in self._calls_open:
            self._calls_open.discard(function)
            self._track(feed.end_epoch, feed=feed)
        feed.detach()
        if not inside:
            self._leave(False)
        try:
            # Nothing when on_test_end / on_predict_end closed the call already.
            self.engine.call_end(function)
        except RecompilationLimitError:
            pass  # the call is already leaving with its own exception
