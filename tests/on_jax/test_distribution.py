"""keras.distribution.DataParallel on 2 simulated CPU devices under the guard.

XLA_FLAGS must be set before JAX starts, so the fit runs in a fresh
interpreter. On CPU both devices are threads of one host plane: the trace
has no per-device plane, so the window's figures are the devices' sum.
"""

from __future__ import annotations

import pytest
from _helpers import run_python

pytestmark = pytest.mark.slow


def test_data_parallel_on_two_devices_is_guarded_like_one():
    """Global batches' signatures, one train compilation, a window per device pair, weights as without the guard."""
    out = run_python(
        """
        import json, sys
        sys.path.insert(0, "tests")
        import jax, keras, numpy as np
        from _jax_helpers import make_data, make_model
        from keras_xla_guard import XlaGuardCallback
        import tempfile
        keras.distribution.set_distribution(keras.distribution.DataParallel(devices=jax.devices()))
        x, y = make_data(n=96)
        weights, figures = [], {}
        for guarded in (True, False):
            model = make_model()
            guard = XlaGuardCallback(log_dir=tempfile.mkdtemp(), profile_epochs=(1,), verbose=0) if guarded else None
            model.fit(x, y, batch_size=32, epochs=2, verbose=0, shuffle=False, callbacks=[guard] if guard else [])
            weights.append([w.tolist() for w in model.get_weights()])
            if guard:
                report = guard.reports[1]
                figures = {
                    "devices": len(jax.devices()),
                    "signatures": [str(s) for s in guard.signatures[0].signatures],
                    "train": [c.count("train") for c in guard.compilations.values()],
                    "ok": report.ok, "launches": report.xla_executions, "steps": report.steps_profiled,
                }
        print(json.dumps({**figures, "same_weights": weights[0] == weights[1]}))
        """,
        env={"XLA_FLAGS": "--xla_force_host_platform_device_count=2", "KERAS_BACKEND": "jax"},
    )
    assert out["devices"] == 2
    assert out["signatures"] == ["x: float32[32,16], y: float32[32,1]"]
    assert out["train"] == [1, 0]
    assert out["ok"] and out["steps"] >= 1
    # Each program runs once per device.
    assert out["launches"] % 2 == 0 and out["launches"] >= 2 * out["steps"]
    assert out["same_weights"]
