"""The compilation policy: `max_compilations` per epoch and the megamorphic warning.

Pure: it reads a `SignatureTracker` and says what to do; the engine does it
(warn, raise `RecompilationLimitError`, or ask the adapter to stop).
"""

from __future__ import annotations

from dataclasses import dataclass

from keras_xla_guard.signatures.tracker import (
    MEGAMORPHIC_COMPILE_THRESHOLD,
    MEGAMORPHIC_MIN_EXECUTIONS_PER_COMPILE,
    SignatureTracker,
)

__all__ = ["CompilationPolicy", "PolicyAction"]


@dataclass(frozen=True)
class PolicyAction:
    """One thing the policy asks for.

    Attributes:
        kind: `"warn"`, `"raise"` or `"stop"` (warn and end training).
        message: What happened, with the numbers.
    """

    kind: str
    message: str


class CompilationPolicy:
    """Applies `max_compilations` and the megamorphic warning to a run.

    Args:
        max_compilations: Most new signatures (XLA compilations) one epoch
            may bring; `None` disables the limit.
        on_violation: `"warn"`, `"raise"` or `"stop"`.
        megamorphic: Warn before TensorFlow's megamorphic threshold (a
            TensorFlow rule; JAX compiles every new shape, with no such
            threshold). Defaults to `True`.
    """

    def __init__(self, max_compilations: int | None, on_violation: str, megamorphic: bool = True) -> None:
        self.max_compilations = max_compilations
        self.on_violation = on_violation
        self.megamorphic = megamorphic
        self.reset()

    def reset(self) -> None:
        """Starts a new run: each warning may come once again."""
        self._megamorphic_warned = False
        self._violation_epoch: int | None = None

    def check(
        self,
        tracker: SignatureTracker,
        epoch: int | None,
        xla_mode: str,
        measured: int | None = None,
        loaded: int = 0,
    ) -> list[PolicyAction]:
        """What the run's signatures (or its counted compilations) so far call for.

        Args:
            tracker: The run's tracker, after the latest step was observed.
            epoch: The current epoch.
            xla_mode: `"jit_compile"` or `"autoclustering"` (the policy only
                applies when the step is compiled by XLA).
            measured: The train function's compilations in `epoch` as the
                backend counted them (JAX); the limit applies to them
                instead of the new signatures. Defaults to `None`.
            loaded: How many of `measured` the backend loaded from its
                persistent compilation cache instead of compiling; they
                count all the same (the step needed a program it had not
                run), and the message says so. Defaults to `0`.

        Returns:
            The megamorphic warning (once per run) and the limit's action
            (once per epoch), in that order; empty when nothing is wrong.
        """
        actions = []
        if self.megamorphic and not self._megamorphic_warned and tracker.megamorphic_risk():
            self._megamorphic_warned = True
            actions.append(PolicyAction("warn", _megamorphic_message(tracker, xla_mode)))
        new = tracker.epoch_new_signatures if measured is None else measured
        if self.max_compilations is None or new <= self.max_compilations or self._violation_epoch == epoch:
            return actions
        self._violation_epoch = epoch
        what = tracker.current_explanations()
        if measured is None:
            counted = "new input signatures"
        else:
            counted = "of the train step, counted as they happened" + (
                f"; {loaded} of them loaded from the persistent compilation cache, not compiled"
                if loaded
                else ""
            )
        message = (
            f"epoch {epoch} caused {new} XLA compilations ({counted}), more than "
            f"max_compilations={self.max_compilations}"
            + (f": {what[0]}" if what else "")
            + ". Pad or bucket the varying input (see the epoch's signature_explanations)."
        )
        if self.on_violation == "stop":
            message += " Stopping training (on_violation='stop')."
        actions.append(PolicyAction(self.on_violation, message))
        return actions


def _megamorphic_message(tracker: SignatureTracker, xla_mode: str) -> str:
    compiles = tracker.total_signatures
    what = tracker.current_explanations()
    head = (
        f"{compiles} XLA compilations of the train step so far (one per input signature) for "
        f"{tracker.executions} executions, fewer than {MEGAMORPHIC_MIN_EXECUTIONS_PER_COMPILE} per "
        f"compilation. TensorFlow marks a cluster megamorphic after more than "
        f"{MEGAMORPHIC_COMPILE_THRESHOLD} compilations with fewer than "
        f"{MEGAMORPHIC_MIN_EXECUTIONS_PER_COMPILE} executions each. "
    )
    if xla_mode == "autoclustering":
        effect = (
            "With auto-clustering it then stops compiling the cluster and runs it as plain "
            "TensorFlow ops for the rest of the process, silently losing XLA."
        )
    else:
        effect = (
            "With jit_compile=True TensorFlow never gives up: every further new shape is "
            "compiled again, so compile time keeps growing with each new shape."
        )
    cause = f" What varies: {what[0]}." if what else ""
    return head + effect + cause
