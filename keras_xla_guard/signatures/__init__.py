"""Input signatures: which concrete shapes a compiled step saw, and why.

Pure Python (no TensorFlow, no Keras) except `data` (`pad_to_buckets`, the
padding fix), which imports Keras when called on examples outside tf.data.
"""

from keras_xla_guard.signatures.buckets import (
    DEFAULT_MAX_BUCKETS,
    DEFAULT_MAX_PADDING,
    bucketing_code,
    recommend_buckets,
)
from keras_xla_guard.signatures.explanation import Explanation
from keras_xla_guard.signatures.signature import Signature, closest, flatten_leaves
from keras_xla_guard.signatures.tracker import (
    FUNCTIONS,
    MEGAMORPHIC_COMPILE_THRESHOLD,
    MEGAMORPHIC_MIN_EXECUTIONS_PER_COMPILE,
    EpochSignatures,
    SignatureTracker,
)

__all__ = [
    "DEFAULT_MAX_BUCKETS",
    "DEFAULT_MAX_PADDING",
    "EpochSignatures",
    "Explanation",
    "FUNCTIONS",
    "MEGAMORPHIC_COMPILE_THRESHOLD",
    "MEGAMORPHIC_MIN_EXECUTIONS_PER_COMPILE",
    "Signature",
    "SignatureTracker",
    "bucketing_code",
    "closest",
    "flatten_leaves",
    "recommend_buckets",
]
