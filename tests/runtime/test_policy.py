"""CompilationPolicy: max_compilations per epoch and the megamorphic warning, as data."""

from __future__ import annotations

import numpy as np

from keras_xla_guard.runtime.policy import CompilationPolicy, PolicyAction
from keras_xla_guard.signatures import Signature, SignatureTracker


def _observe(tracker: SignatureTracker, lengths, epoch: int = 0) -> None:
    tracker.begin_epoch(epoch)
    for step, n in enumerate(lengths):
        tracker.observe(Signature.of(np.zeros((4, n), "float32"), root_names=("x",)), step=step)


def test_no_action_within_the_limit():
    """Up to max_compilations new signatures in an epoch nothing is asked for."""
    tracker = SignatureTracker(xla=True)
    _observe(tracker, [5, 6, 7])
    assert CompilationPolicy(3, "warn").check(tracker, 0, "jit_compile") == []


def test_the_limit_acts_once_per_epoch_with_the_cause():
    """The fourth signature over max_compilations=3 gives one action naming the epoch, count and dim."""
    tracker = SignatureTracker(xla=True)
    policy = CompilationPolicy(3, "stop")
    _observe(tracker, [5, 6, 7, 8])
    (action,) = policy.check(tracker, 0, "jit_compile")
    assert action.kind == "stop"
    assert action.message.startswith(
        "epoch 0 caused 4 XLA compilations (new input signatures), more than max_compilations=3: "
        "input x dim 1 varied across 4 values (5, 6, 7, 8)"
    )
    assert action.message.endswith("Stopping training (on_violation='stop').")
    assert policy.check(tracker, 0, "jit_compile") == []
    policy.reset()
    assert [a.kind for a in policy.check(tracker, 0, "jit_compile")] == ["stop"]


def test_megamorphic_warning_comes_once_and_names_the_mode():
    """At 8 signatures with few executions: one warning; auto-clustering's says XLA is lost."""
    tracker = SignatureTracker(xla=True)
    _observe(tracker, range(5, 13))
    policy = CompilationPolicy(None, "raise")
    (action,) = policy.check(tracker, 0, "autoclustering")
    assert action == PolicyAction("warn", action.message)
    assert action.message.startswith(
        "8 XLA compilations of the train step so far (one per input signature) for 8 executions"
    )
    assert "silently losing XLA" in action.message
    assert policy.check(tracker, 0, "autoclustering") == []
    (jit,) = CompilationPolicy(None, "warn").check(tracker, 0, "jit_compile")
    assert "TensorFlow never gives up" in jit.message


def test_counted_compilations_say_how_many_were_loaded_from_the_cache():
    """A backend's count (JAX) over the limit: the message says which of them the persistent cache supplied."""
    tracker = SignatureTracker(xla=True)
    _observe(tracker, [5])
    (action,) = CompilationPolicy(1, "warn").check(tracker, 0, "jit_compile", measured=3, loaded=2)
    assert action.message.startswith(
        "epoch 0 caused 3 XLA compilations (of the train step, counted as they happened; 2 of them loaded "
        "from the persistent compilation cache, not compiled), more than max_compilations=1"
    )
    (fresh,) = CompilationPolicy(1, "warn").check(tracker, 0, "jit_compile", measured=3)
    assert "counted as they happened), more than" in fresh.message
