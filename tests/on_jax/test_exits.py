"""What ends a guarded fit, evaluate or predict on Keras on JAX leaves nothing of the guard behind.

The cases are shared with the TensorFlow suite (`_exit_cases.py`).
"""

from __future__ import annotations

import pytest
from _exit_cases import *  # noqa: F403 - the shared tests, collected on this backend

pytestmark = pytest.mark.slow
