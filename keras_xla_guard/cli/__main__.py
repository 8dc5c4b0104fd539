"""`python -m keras_xla_guard.cli`: the `keras-xla-guard` command."""

import sys

from keras_xla_guard.cli import main

sys.exit(main())
