"""Bucket boundaries for a varying length, and the code that applies them.

Pure Python: `recommend_buckets` picks the fewest padding-bounded buckets,
`bucketing_code` writes the snippet a user can paste, for the input pipeline
the backend's users have: `tf.data` on TensorFlow, or `pad_to_buckets` on
the examples themselves (NumPy arrays, lists, a generator or a
`keras.utils.PyDataset`), which needs no TensorFlow. The backend says which
(`Backend.input_pipeline`); nothing here asks which backend runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from keras_xla_guard._checks import check_int, is_int

__all__ = [
    "DEFAULT_MAX_BUCKETS",
    "DEFAULT_MAX_PADDING",
    "EXAMPLES",
    "INPUT_PIPELINES",
    "TF_DATA",
    "bucketing_code",
    "recommend_buckets",
    "short_batch_advice",
]

DEFAULT_MAX_BUCKETS = 4
DEFAULT_MAX_PADDING = 0.15
# The input pipelines a fix can be written for.
TF_DATA = "tf.data"
EXAMPLES = "examples"
INPUT_PIPELINES = (TF_DATA, EXAMPLES)


def recommend_buckets(
    lengths: Mapping[int, int] | Sequence[int],
    *,
    max_buckets: int = DEFAULT_MAX_BUCKETS,
    max_padding: float = DEFAULT_MAX_PADDING,
) -> tuple[int, ...]:
    """Picks padded lengths (bucket boundaries) for observed sequence lengths.

    The lengths are split into the fewest contiguous groups (at most
    `max_buckets`) whose padding stays within `max_padding` of the padded
    total; each group is padded to its longest member, so every boundary
    is an observed length and the last one is the longest length seen.

    Args:
        lengths: Observed lengths, either a sequence (one entry per batch)
            or a mapping length -> number of batches.
        max_buckets: Most buckets (compilations) to allow. Defaults to `4`.
        max_padding: Largest acceptable share of padding in the padded
            total, in [0, 1). Defaults to `0.15`.

    Returns:
        Sorted padded lengths, one per bucket; `()` when `lengths` is empty.

    Raises:
        ValueError: If an argument is out of range.

    Example:

    ```python
    from keras_xla_guard.signatures import recommend_buckets

    recommend_buckets([5, 7, 9, 11, 13])  # (7, 11, 13)
    ```
    """
    check_int("max_buckets", max_buckets, minimum=1)
    if not 0 <= max_padding < 1:
        raise ValueError(f"`max_padding` must be in [0, 1). Received: max_padding={max_padding!r}")
    counts: dict[int, int] = {}
    items = lengths.items() if isinstance(lengths, Mapping) else ((n, 1) for n in lengths)
    for length, count in items:
        if not is_int(length) or length < 0:
            raise ValueError(f"lengths must be integers >= 0. Received: lengths={lengths!r}")
        counts[length] = counts.get(length, 0) + count
    values = sorted(counts)
    if not values:
        return ()
    real = sum(n * c for n, c in counts.items())
    best: tuple[int, ...] = (values[-1],)
    for k in range(1, min(max_buckets, len(values)) + 1):
        padded, bounds = _partition(values, counts, k)
        best = bounds
        if padded == 0 or (padded - real) / padded <= max_padding:
            break
    return best


def _partition(values: list[int], counts: dict[int, int], k: int) -> tuple[int, tuple[int, ...]]:
    """Splits sorted `values` into `k` groups minimising the padded total."""
    n = len(values)
    prefix = [0]
    for v in values:
        prefix.append(prefix[-1] + counts[v])
    inf = float("inf")
    # cost[j][i]: least padded total for values[:i] in j groups.
    cost = [[inf] * (n + 1) for _ in range(k + 1)]
    split = [[0] * (n + 1) for _ in range(k + 1)]
    cost[0][0] = 0
    for j in range(1, k + 1):
        for i in range(1, n + 1):
            for s in range(j - 1, i):
                c = cost[j - 1][s] + values[i - 1] * (prefix[i] - prefix[s])
                if c < cost[j][i]:
                    cost[j][i], split[j][i] = c, s
    bounds = []
    i = n
    for j in range(k, 0, -1):
        bounds.append(values[i - 1])
        i = split[j][i]
    return int(cost[k][n]), tuple(sorted(bounds))


def _element_args(root_count: int) -> str:
    names = ("x", "y", "sample_weight")
    if root_count <= 1:
        return "x"
    return ", ".join(names[:root_count]) if root_count <= 3 else "*element"


def _unbatched_access(path: str, root_count: int) -> str:
    """Rewrites a display path like `x['tokens']` into Python for the lambda."""
    if root_count <= 1 and path.startswith("input"):
        # A bare-array element is named `input` in signatures; the lambda calls it `x`.
        path = "x" + path[len("input") :]
    if root_count > 3 and path.startswith(("x", "y", "sample_weight")):
        head = path.split("[", 1)[0]
        path = f"element[{('x', 'y', 'sample_weight').index(head)}]" + path[len(head) :]
    return path.replace("['", '["').replace("']", '"]')


def bucketing_code(
    path: str,
    dim: int,
    boundaries: Sequence[int],
    batch_size: int,
    *,
    root_count: int = 2,
    together: Sequence[str] = (),
    pipeline: str = TF_DATA,
) -> str:
    """The code that pads one variable dimension to bucket lengths.

    The code applies to the *unbatched* examples: on `tf.data` it replaces
    the `batch`/`padded_batch` call, so batch dimension `dim` of the
    batched input becomes dimension `dim - 1` of an element; on the
    examples themselves it is a `pad_to_buckets` call, whose result `fit`
    takes on any Keras 3 backend.

    Args:
        path: Display path of the input, e.g. `"x['tokens']"`.
        dim: The varying dimension of the batched input (>= 1).
        boundaries: Padded lengths, as from `recommend_buckets`.
        batch_size: Examples per batch.
        root_count: Entries of the dataset's top-level tuple (2 for
            `(x, y)`, 1 for a bare `x`). Defaults to `2`.
        together: Display paths of other inputs whose length equals
            `path`'s in every batch (a padding mask, segment ids): the
            bucketing pads every variable dimension of an element to the
            bucket length, so they are padded with it; the code says so.
            Defaults to `()`.
        pipeline: `"tf.data"` (the `bucket_by_sequence_length` call, with
            `pad_to_buckets` as the alternative) or `"examples"` (a
            `pad_to_buckets` call on the examples, no TensorFlow). Defaults
            to `"tf.data"`.

    Returns:
        Python source (several lines), ready to paste.

    Raises:
        ValueError: If `dim` < 1, `boundaries` is empty, `batch_size` < 1
            or `pipeline` is not one of `INPUT_PIPELINES`.

    Example:

    ```python
    from keras_xla_guard.signatures import bucketing_code

    print(bucketing_code("x['tokens']", 1, (16, 32, 64), batch_size=32))
    ```
    """
    if dim < 1:
        raise ValueError(f"`dim` must be a non-batch dimension (>= 1). Received: dim={dim!r}")
    if not boundaries:
        raise ValueError(f"`boundaries` must not be empty. Received: boundaries={boundaries!r}")
    if batch_size < 1:
        raise ValueError(f"`batch_size` must be >= 1. Received: batch_size={batch_size!r}")
    if pipeline not in INPUT_PIPELINES:
        raise ValueError(f"`pipeline` must be one of {INPUT_PIPELINES}. Received: pipeline={pipeline!r}")
    bounds = sorted(set(int(b) for b in boundaries))
    padded = ", ".join([path, *together[:-1]]) + (f" and {together[-1]}" if together else "")
    head = f"# Pad {padded} dim {dim} to {len(bounds)} bucket length(s) ({', '.join(map(str, bounds))}); full batches only."
    dropped = (
        f"# Drops each bucket's short last batch: up to {len(bounds) * (batch_size - 1)} examples an epoch"
    )
    keeps = "#   (drop_remainder=False keeps them, at one more shape per bucket)."
    masking = "# Padding changes an unmasked model's outputs: mask it (Embedding(mask_zero=True), Masking)."
    if pipeline == EXAMPLES:
        return "\n".join(
            [
                head,
                "# Give pad_to_buckets your examples, unbatched: NumPy arrays or lists (alone, or as",
                "# (x, y) or a dict, one entry per example), a generator of examples, or your",
                "# keras.utils.PyDataset. fit takes the keras.utils.PyDataset of padded batches it returns:",
                "from keras_xla_guard import pad_to_buckets",
                f"data = pad_to_buckets(data, {tuple(bounds)}, batch_size={batch_size})",
                "# model.fit(data, ...)",
                dropped,
                keeps,
                f"# An example longer than {bounds[-1]} raises ValueError: make {bounds[-1]} the longest your data has.",
                masking,
            ]
        )
    access = _unbatched_access(path, root_count)
    args = _element_args(root_count)
    tf_bounds = [b + 1 for b in bounds]
    return "\n".join(
        [
            head,
            "# Replaces .batch()/.padded_batch() on the unbatched dataset:",
            "dataset = dataset.bucket_by_sequence_length(",
            f"    element_length_func=lambda {args}: tf.shape({access})[{dim - 1}],",
            f"    bucket_boundaries={tf_bounds},  # exclusive upper bounds",
            f"    bucket_batch_sizes={[batch_size] * (len(bounds) + 1)},",
            "    pad_to_bucket_boundary=True,  # pads to boundary - 1",
            "    drop_remainder=True,",
            ")",
            dropped,
            keeps,
            f"# An element longer than {bounds[-1]} fails the pipeline: make {bounds[-1]} the longest your data has.",
            masking,
            "# or, with keras-xla-guard:",
            "# from keras_xla_guard import pad_to_buckets",
            f"# dataset = pad_to_buckets(dataset, {tuple(bounds)}, batch_size={batch_size})",
        ]
    )


def short_batch_advice(pipeline: str, full_size: int) -> tuple[str, str]:
    """How a pipeline drops a short last batch: the advice, and its name when advising against it.

    Args:
        pipeline: One of `INPUT_PIPELINES`.
        full_size: The regular batch size.

    Returns:
        `(advice, name)`, e.g. `("batch with drop_remainder=True",
        "drop_remainder=True")` on `tf.data`.
    """
    if pipeline == TF_DATA:
        return "batch with drop_remainder=True", "drop_remainder=True"
    return f"fit on the first len(x) // {full_size} * {full_size} examples", "dropping them"
